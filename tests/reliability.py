"""The harness of the reliability suite (tests/test_reliability.py): cases of bad input, how each is run, and the
checks every case must pass.

A case is a function registered with :func:`case`; it builds its bad input from real exports (copies, edited), runs
one traceql command (in this process where it can: :func:`cli`; in a child where a signal or a limit is the point)
and returns the :class:`Run`. The suite then checks, for every case: the documented exit code (2 for bad input), a
message on stderr that names the file and the next step (the case's ``words``), no traceback, every watched path
(run stores, output files and their folders) unchanged or, for a store that took a run, still consistent, and no
temporary file left beside them. ``docs/reliability.md`` is generated from the registry and the results
(``benchmarks/reliability_report.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import stat
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from traceql import store

COMMANDS = ("ingest", "sql", "attribute", "report", "collect", "overlap", "migrate", "paper", "diff", "export")
TEMP_GLOBS = (".tmp-*", ".manifest-*", ".*.tmp", "*.tmp", "runs/*/.*.migrating", "runs/*/.*.merging")


@dataclass
class Run:
    rc: int
    out: str
    err: str
    named: list[str]  # what the message must name (a path, a value)
    watched: dict[Path, object] = field(default_factory=dict)  # path -> snapshot before
    grew: set[Path] = field(default_factory=set)  # watched stores that may take a run (still consistent after)
    traceback: str = ""


@dataclass(frozen=True)
class Case:
    id: str
    command: str
    what: str
    fn: Callable[[Env], Run]
    expect: int
    words: tuple[str, ...]


CASES: dict[str, Case] = {}


def case(command: str, what: str, *, expect: int = 2, words: tuple[str, ...] | str = (), name: str | None = None):
    """Register a case: ``what`` says the bad input in words (it goes to docs/reliability.md); ``words`` must appear
    in the message (the next step, the reason)."""
    assert command in COMMANDS, command

    def register(fn: Callable[[Env], Run]) -> Callable[[Env], Run]:
        cid = f"{command}/{name or fn.__name__.removeprefix('_')}"
        assert cid not in CASES, cid
        CASES[cid] = Case(cid, command, what, fn, expect, (words,) if isinstance(words, str) else tuple(words))
        return fn
    return register


def snapshot(path: Path):
    """What a path holds: None if absent; bytes' hash for a file; every file's hash for a folder (not the lock)."""
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_dir():
        return {str(p.relative_to(path)): _digest(p) for p in sorted(path.rglob("*"))
                if p.is_file() and p.name != ".lock"} | {"<dirs>": sorted(str(p.relative_to(path))
                                                                          for p in path.rglob("*") if p.is_dir())}
    if not path.is_file():
        return "special"
    return _digest(path)


def _digest(p: Path) -> str:
    h = hashlib.sha1()
    with p.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class Env:
    """What a case gets: a folder of its own, the session's real inputs, and ways to run traceql."""

    tmp: Path
    inputs: dict[str, Path]

    def path(self, name: str) -> Path:
        return self.tmp / name

    def cli(self, *args, named: list[str | Path] | str | Path = (), watch: list[Path] | Path = (),
            grow: list[Path] | Path = (), env: dict[str, str] | None = None, stdin: str | None = None) -> Run:
        """``traceql ARGS`` in this process, as the console script runs it; the watched paths snapshotted around."""
        from traceql import cli as cli_module

        named, watch, grow = _listed(named), _listed(watch), _listed(grow)
        before = {Path(p): snapshot(Path(p)) for p in watch}
        out, err = io.StringIO(), io.StringIO()
        rc, tb = 0, ""
        saved_env = {k: os.environ.get(k) for k in env or {}}
        os.environ.update(env or {})
        argv, stdin_saved = sys.argv, sys.stdin
        sys.argv = ["traceql", *map(str, args)]
        if stdin is not None:
            sys.stdin = io.StringIO(stdin)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                cli_module.main()
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # what the console script would print as a traceback
            tb = traceback.format_exc()
            rc = 1
        finally:
            sys.argv, sys.stdin = argv, stdin_saved
            for k, v in saved_env.items():  # only what the case set: other threads may read the environment
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        return Run(rc, out.getvalue(), err.getvalue() + tb, [str(n) for n in named], before,
                   {Path(p) for p in grow}, tb)

    def child(self, args: list[str | Path], *, named=(), watch=(), grow=(), env: dict[str, str] | None = None,
              timeout: float = 120, preexec=None, run=None) -> Run:
        """``python -m traceql.cli ARGS`` in a child process (signals, resource limits); ``run(popen)`` may drive it."""
        import subprocess

        named, watch, grow = _listed(named), _listed(watch), _listed(grow)
        before = {Path(p): snapshot(Path(p)) for p in watch}
        full_env = {**os.environ, **(env or {})}
        proc = subprocess.Popen([sys.executable, "-m", "traceql.cli", *map(str, args)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=full_env, preexec_fn=preexec,
                                cwd=Path(__file__).resolve().parent.parent)
        try:
            if run is not None:
                run(proc)
            out, err = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        tb = err if "Traceback (most recent call last)" in err else ""
        return Run(proc.returncode, out, err, [str(n) for n in named], before, {Path(p) for p in grow}, tb)


def _listed(x) -> list:
    if isinstance(x, str | Path):
        return [x]
    return list(x)


def store_problems(root: Path) -> list[str]:
    """What is wrong with a run store: an unreadable manifest, a listed run missing a file or with a file of another
    version, a leftover temporary file or staging folder. [] when it is consistent (or absent)."""
    from traceql.store import schema

    if not (root / "manifest.json").exists():
        return []
    problems = []
    try:
        manifest = json.loads((root / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        return [f"manifest unreadable: {exc}"]
    for run_id, entry in manifest.get("runs", {}).items():
        folder = store.run_dir(root, run_id)
        if not folder.is_dir() and manifest.get("layout", 1) == 1:  # a store of layout 1 (being migrated)
            folder = root / "runs" / run_id
        for table in entry.get("tables", {}):
            f = folder / f"{table}.parquet"
            if not f.is_file():
                problems.append(f"{f} listed but missing")
                continue
            try:
                schema.check_file(f)
            except Exception as exc:  # noqa: BLE001 (any failure is a problem to report)
                problems.append(f"{f}: {exc}")
    for pattern in TEMP_GLOBS:
        problems += [f"leftover {p}" for p in root.glob(pattern)]
    return problems


def check(c: Case, run: Run) -> list[str]:
    """Everything wrong with one case's run; [] when it is clean."""
    problems = []
    if run.traceback:
        problems.append("traceback:\n" + run.traceback[-2000:])
    if run.rc != c.expect:
        problems.append(f"exit code {run.rc}, documented {c.expect}")
    err = run.err
    for n in run.named:
        if n not in err:
            problems.append(f"message does not name {n!r}")
    for w in c.words:
        if w.lower() not in err.lower():
            problems.append(f"message lacks {w!r}")
    if c.expect == 2 and not err.strip():
        problems.append("no message")
    for path, before in run.watched.items():
        after = snapshot(path)
        if path in run.grew:
            problems += store_problems(path)
        elif after != before:
            problems.append(f"{path} changed")
        folder = path if path.is_dir() else path.parent
        if folder.is_dir():
            problems += [f"leftover {p}" for pattern in TEMP_GLOBS for p in folder.glob(pattern)]
    if not stat.S_ISCHR(os.stat("/dev/full").st_mode):  # a rename or a delete must never reach a device
        problems.append("/dev/full is no longer a device")
    if problems:
        problems.append(f"stderr: {err[-1500:]}")
    return problems
