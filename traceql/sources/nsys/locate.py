"""Find an nsys executable and turn an .nsys-rep into an export that traceql reads.

Search order: ``$TRACEQL_NSYS``, ``nsys`` on PATH, Nsight Systems install folders, then the
copy bundled inside Nsight Compute. Exports are cached beside the report (``REPORT.traceql/``,
or under ``~/.cache/traceql`` when that folder is not writable) keyed by the report's sha256,
so a report is exported once; the cache's stamp also records the export's own sha256, and an export whose bytes are
not those (another trace's export copied in, a damaged file) is made again rather than ingested as this report's.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ...errors import BadInputError, NsysNotFoundError

INSTALL_GLOBS = (
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/opt/nvidia/nsight-systems/*/target-linux-x64/nsys",
    "/usr/local/cuda*/bin/nsys",
    "/usr/local/cuda*/nsight-systems*/bin/nsys",
    "/usr/lib/nsight-systems/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
)
PARQUETDIR_SINCE = (2024, 6)
EXPORT_TIMEOUT_S = 1800


def candidates() -> list[str]:
    found = []
    if env := os.environ.get("TRACEQL_NSYS"):
        found.append(env)
    if on_path := shutil.which("nsys"):
        found.append(on_path)
    for pattern in INSTALL_GLOBS:
        found.extend(sorted(glob.glob(pattern), reverse=True))
    return found


def find_nsys() -> str:
    for path in candidates():
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise NsysNotFoundError(
        "no nsys executable found (looked at $TRACEQL_NSYS, PATH, " + ", ".join(INSTALL_GLOBS) + "); "
        "install Nsight Systems, or set TRACEQL_NSYS=/path/to/nsys, or export the report yourself with "
        "`nsys export -t sqlite REPORT.nsys-rep` and ingest the .sqlite"
    )


def _link_chain(path: str) -> list[Path]:
    """``path`` and every path its symbolic links lead through, one hop at a time, ending at the real file."""
    chain, seen = [Path(os.path.abspath(path))], set()
    while chain[-1].is_symlink() and chain[-1] not in seen and len(chain) < 40:
        seen.add(chain[-1])
        target = Path(os.readlink(chain[-1]))
        chain.append(Path(os.path.normpath(chain[-1].parent / target)))
    # a link in a folder above the file resolves only with realpath
    real = Path(os.path.realpath(path))
    return chain if real in chain else [*chain, real]


def expected_host_dir(nsys: str) -> Path:
    """Where nsys looks for its host tools (QdstrmImporter among them): ``host-linux-x64`` beside the folder that holds
    the real nsys binary, after every link is resolved."""
    real = Path(os.path.realpath(nsys))
    return real.parent.parent / "host-linux-x64"


def find_importer(nsys: str) -> Path | None:
    """The QdstrmImporter of the Nsight Systems installation that ``nsys`` belongs to, or None.

    Looked for in the ``host-*`` folders (and the folder itself) beside each folder ``nsys`` and the links to it
    pass through: an installation keeps it in ``host-linux-x64`` next to ``target-linux-x64`` or ``bin``; Debian's
    package ships it in /usr/lib/nsight-systems/host-linux-x64 while its nsys binary resolves to
    /usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64, where nsys itself does not find it.
    """
    roots: list[Path] = []
    for hop in _link_chain(nsys):
        for root in (hop.parent, hop.parent.parent):
            if root not in roots:
                roots.append(root)
    for root in roots:
        for folder in [root, *sorted(root.glob("host-*"))]:
            importer = folder / "QdstrmImporter"
            if importer.is_file() and os.access(importer, os.X_OK):
                return importer
    return None


def nsys_version(nsys: str) -> tuple[int, ...]:
    out = subprocess.run([nsys, "--version"], capture_output=True, text=True, errors="replace", timeout=60).stdout
    m = re.search(r"(\d{4})\.(\d+)(?:\.(\d+))?", out)
    return tuple(int(x) for x in m.groups() if x is not None) if m else (0,)


def _cache_dir(report: Path, sha256: str) -> Path:
    beside = report.with_name(report.name + ".traceql")
    try:
        beside.mkdir(exist_ok=True)
        probe = beside / ".write-test"
        probe.touch()
        probe.unlink()
        return beside
    except OSError:
        home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "traceql" / sha256[:16]
        home.mkdir(parents=True, exist_ok=True)
        return home


def _drop_if_empty(cache: Path) -> None:
    """A failed export leaves no empty cache folder beside the report (the temporary folder in it is gone by now)."""
    with contextlib.suppress(OSError):
        for leftover in cache.glob(".tmp-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        cache.rmdir()


def export_report(report: Path, sha256: str) -> Path:
    """Export ``report`` once (Parquet directory where nsys can, else SQLite); return the export's path."""
    cache = _cache_dir(report, sha256)
    stamp = cache / "export.json"
    try:
        info = json.loads(stamp.read_text())
        cached = cache / info["export"] if info.get("sha256") == sha256 else None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):  # none yet, or not a stamp traceql wrote
        info, cached = {}, None
    if cached is not None and cached.exists():
        if info.get("export_sha256") == _fingerprint(cached):
            return cached
        if "export_sha256" in info:
            print(f"traceql: note: {cached} is not the export traceql made of {report} (its bytes changed); "
                  "exporting the report again", file=sys.stderr)
    try:
        nsys = find_nsys()
    except NsysNotFoundError as exc:
        raise NsysNotFoundError(f"{report}: cannot export it: {exc}") from None
    version = nsys_version(nsys)
    kind = "parquetdir" if version >= PARQUETDIR_SINCE else "sqlite"
    name = "export" if kind == "parquetdir" else "export.sqlite"
    with tempfile.TemporaryDirectory(dir=cache, prefix=".tmp-") as tmp:
        out = Path(tmp) / name
        def export(*options: str) -> subprocess.CompletedProcess:
            cmd = [nsys, "export", "-t", kind, "-o", str(out), "--force-overwrite=true", *options, str(report)]
            return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=EXPORT_TIMEOUT_S,
                                  start_new_session=True)

        try:
            # --include-json: NVTX payloads as JSON (NCCL's communicator and message size on its ranges); an nsys
            # that does not know the option exports without it
            proc = export("--include-json=true")
            if proc.returncode != 0 and "include-json" in (proc.stderr + proc.stdout):
                proc = export()
        except subprocess.TimeoutExpired as exc:
            _drop_if_empty(cache)
            raise BadInputError(f"{report}: `nsys export` did not finish in {EXPORT_TIMEOUT_S} s; export it by hand "
                                f"(`nsys export -t sqlite {report}`) and ingest the export") from exc
        if proc.returncode != 0 or not out.exists():
            # nsys may echo the damaged bytes: name its last error line, printable
            lines = [line.strip() for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
            errors = [line for line in lines if "error" in line.lower()]
            detail = (errors or lines or [f"exit code {proc.returncode}"])[-1]
            detail = "".join(c if c.isprintable() and c != "\ufffd" else "?" for c in detail)[:300]
            hint = "; the report is damaged or not one nsys wrote: copy it again, or collect it again"
            if "version" in (proc.stderr + proc.stdout).lower() and "support" in (proc.stderr + proc.stdout).lower():
                hint = (f"; this nsys ({'.'.join(map(str, version))}, {nsys}) is older than the one that "
                        "recorded the report: use a newer nsys (set TRACEQL_NSYS) or export it where it was made")
            _drop_if_empty(cache)
            raise BadInputError(f"{report}: `nsys export` failed: {detail}{hint}")
        final = cache / name
        if final.exists():
            shutil.rmtree(final) if final.is_dir() else final.unlink()
        out.rename(final)
    if stamp.is_dir():  # not a stamp traceql wrote
        shutil.rmtree(stamp)
    stamp.write_text(json.dumps({"sha256": sha256, "export": name, "export_sha256": _fingerprint(final),
                                 "nsys": nsys, "nsys_version": ".".join(map(str, version))}))
    return final


def _fingerprint(export: Path) -> str:
    """The sha256 of an export's bytes: a file's, or a Parquet directory's files', each after its name, in name
    order."""
    h = hashlib.sha256()
    for f in sorted(p for p in export.rglob("*") if p.is_file()) if export.is_dir() else [export]:
        h.update(f.relative_to(export).as_posix().encode() + b"\0" if export.is_dir() else b"")
        with open(f, "rb") as src:
            while chunk := src.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()
