"""Shared fixtures: each real trace is ingested once per session into a temporary run directory.

Helpers:
- ``run_cli(*args)`` runs ``python -m traceql.cli ARGS`` in a subprocess: (rc, stdout, stderr).
- ``require_nsys`` (fixture) / ``@pytest.mark.nsys`` (marker): the test needs an nsys executable;
  without one it is skipped, or fails when ``TRACEQL_REQUIRE_NSYS=1`` (as in CI).
"""

from __future__ import annotations

import contextlib
import io
import json
import lzma
import os
import shutil
import sqlite3
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

import traceql
from traceql.errors import NsysNotFoundError
from traceql.sources.nsys.locate import find_nsys

DATA = Path(__file__).parent / "data"
H200 = DATA / "h200"
NSYS2022 = DATA / "nsys2022"
REPO = Path(__file__).resolve().parent.parent


def run_cli(*args: str | os.PathLike, env: dict[str, str] | None = None, cwd: str | os.PathLike | None = None,
            timeout: float = 120) -> tuple[int, str, str]:
    """Run ``python -m traceql.cli ARGS``; return (exit code, stdout, stderr)."""
    proc = subprocess.run([sys.executable, "-m", "traceql.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def cli_in_process(*args: str | os.PathLike) -> tuple[int, str, str]:
    """``traceql ARGS`` in this process, as the console script runs it: a second less than :func:`run_cli` each (and
    memory:// is this process's); a traceback is exit code 1 with the traceback in stderr."""
    from traceql import cli as cli_module

    out, err = io.StringIO(), io.StringIO()
    argv, sys.argv = sys.argv, ["traceql", *map(str, args)]
    rc = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli_module.main()
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 0
    except BaseException:  # what the console script would print as a traceback
        return 1, out.getvalue(), err.getvalue() + traceback.format_exc()
    finally:
        sys.argv = argv
    return rc, out.getvalue(), err.getvalue()


# brute force for interval unions (the references the engine's sweeps are checked against): plain Python, no numpy

def merged_intervals(intervals) -> list[tuple[int, int]]:
    """The union of [start, end) intervals as disjoint intervals, in order."""
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [tuple(x) for x in out]


def intervals_length(merged) -> int:
    return sum(e - s for s, e in merged)


def intervals_intersection(a, b) -> int:
    """How long two unions (from :func:`merged_intervals`) overlap, by walking both."""
    i = j = total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _nsys_or_skip() -> str:
    try:
        return find_nsys()
    except NsysNotFoundError as exc:
        if os.environ.get("TRACEQL_REQUIRE_NSYS") == "1":
            pytest.fail(f"TRACEQL_REQUIRE_NSYS=1 but no nsys: {exc}")
        pytest.skip(f"no nsys executable ({exc})")


@pytest.fixture(scope="session")
def require_nsys() -> str:
    """Path of an nsys executable; skip (or fail with TRACEQL_REQUIRE_NSYS=1) when there is none."""
    return _nsys_or_skip()


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("nsys"):
        _nsys_or_skip()


# -- raw exports, read independently of traceql ------------------------------------------------

@pytest.fixture(scope="session")
def raw_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("raw")


def _decompressed(raw_dir: Path, name: str) -> Path:
    dest = raw_dir / f"{name}.sqlite"
    if not dest.exists():
        with lzma.open(H200 / f"{name}.sqlite.xz") as src, open(dest, "wb") as dst:
            shutil.copyfileobj(src, dst)
        dest.chmod(0o444)  # the tests only read it
    return dest


@pytest.fixture(scope="session")
def overlap_sqlite(raw_dir) -> Path:
    """tests/data/h200/overlap.sqlite.xz, decompressed with Python's lzma."""
    return _decompressed(raw_dir, "overlap")


@pytest.fixture(scope="session")
def contention_sqlite(raw_dir) -> Path:
    return _decompressed(raw_dir, "contention")


def foreign_sqlite(p: Path) -> Path:
    """An SQLite database of another program (an inventory of parts) at ``p``."""
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE parts (id INTEGER, name TEXT)")
    con.execute("INSERT INTO parts VALUES (1, 'bolt')")
    con.commit()
    con.close()
    return p


def raw_query(db: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """Query an nsys SQLite export directly with Python's sqlite3 (read-only)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def long_metrics(wide):
    """A wide GPU-metrics table (a row per GPU and sample time, a column per metric) as the long rows it stores: a
    pyarrow table of (run_id,) device_id, ts_ns, metric, value, one row per value present, in no set order."""
    import pyarrow as pa

    keys = [n for n in ("run_id", "device_id", "ts_ns") if n in wide.column_names]
    parts = []
    for name in wide.column_names:
        if name in keys:
            continue
        present = wide.filter(wide.column(name).is_valid())
        parts.append(pa.table({**{k: present.column(k) for k in keys},
                               "metric": pa.repeat(pa.scalar(name), present.num_rows).cast(pa.string()),
                               "value": present.column(name)}))
    if not parts:
        empty = {"run_id": pa.string(), "device_id": pa.int32(), "ts_ns": pa.int64()}
        return pa.table({**{k: pa.array([], empty[k]) for k in keys}, "metric": pa.array([], pa.string()),
                         "value": pa.array([], pa.float64())})
    return pa.concat_tables(parts)


def older_layout(fresh: Path, old: Path, layout: int, rewrite: dict) -> tuple[str, dict]:
    """A copy at ``old`` of the one-run store ``fresh`` as an earlier traceql wrote it: each table of ``rewrite``
    (table -> function of its rows) rewritten as that layout held it, the index saying ``layout``, the files' sizes and
    rows recorded in ``run.json`` and the index; its run id and index."""
    import json

    import pyarrow.parquet as pq

    from traceql import store
    from traceql.store import schema

    shutil.copytree(fresh, old)
    (rid,) = json.loads((old / "manifest.json").read_text())["runs"]
    folder = store.run_dir(old, rid)
    info = json.loads((folder / "run.json").read_text())
    for table, change in rewrite.items():
        f = folder / f"{table}.parquet"
        rows = change(pq.read_table(f))
        pq.write_table(rows.replace_schema_metadata(schema.metadata(table)), f)
        info["tables"][table] = rows.num_rows
    info["files"] = {t: (folder / f"{t}.parquet").stat().st_size for t in info["files"]}
    (folder / "run.json").write_text(json.dumps(info))
    manifest = json.loads((old / "manifest.json").read_text())
    manifest["layout"] = layout
    manifest["runs"][rid].update(files=info["files"], tables=info["tables"])
    (old / "manifest.json").write_text(json.dumps(manifest))
    return rid, manifest


@pytest.fixture(scope="session")
def fresh(tmp_path_factory) -> Path:
    """The H200 contention trace ingested by this traceql (a one-run store), to compare older layouts with."""
    out = tmp_path_factory.mktemp("fresh") / "store"
    traceql.ingest(H200 / "contention.sqlite.xz", out)
    return out


# -- ingested runs (one per trace per session) --------------------------------------------------

def _ingest(tmp_path_factory, name: str, trace: Path, **kwargs) -> Path:
    out = tmp_path_factory.mktemp(name) / "run"
    infos = traceql.ingest(trace, out, **kwargs)
    assert len(infos) == 1 and not infos[0].already
    return out


@pytest.fixture(scope="session")
def overlap_run(tmp_path_factory) -> Path:
    return _ingest(tmp_path_factory, "overlap", H200 / "overlap.sqlite.xz")


@pytest.fixture(scope="session")
def contention_sqlite_run(tmp_path_factory) -> Path:
    return _ingest(tmp_path_factory, "contention_sqlite", H200 / "contention.sqlite.xz")


@pytest.fixture(scope="session")
def contention_parquet_run(tmp_path_factory) -> Path:
    return _ingest(tmp_path_factory, "contention_parquet", H200 / "contention_parquetdir")


@pytest.fixture(scope="session")
def train_ddp_run(tmp_path_factory) -> Path:
    return _ingest(tmp_path_factory, "train_ddp", H200 / "train_ddp.sqlite.xz")


@pytest.fixture(scope="session")
def h200x2_store(tmp_path_factory) -> Path:
    """The reproduction runs of tests/data/h200x2 (overlap, train_ddp, train_ddp_repeat, train_fsdp2), ingested with
    their labels and NVML samples into one run store, as `traceql collect` made it on the GPU machine."""
    from h200x2 import build_store

    return build_store(tmp_path_factory.mktemp("h200x2") / "run",
                       ["overlap", "train_ddp", "train_ddp_repeat", "train_fsdp2"])


@pytest.fixture(scope="session")
def h200x2_all_store(tmp_path_factory) -> Path:
    """Every run committed in tests/data/h200x2 (whatever runs.json lists), ingested as h200x2_store is: what
    docs/reproduction.md is generated from."""
    from h200x2 import build_store

    return build_store(tmp_path_factory.mktemp("h200x2_all") / "run")


KNOWN_CAUSE = {"h100": DATA / "h100" / "known_cause.sqlite.xz", "h200": DATA / "h200" / "known_cause.sqlite.xz",
               "h200-6144": DATA / "h200" / "known_cause_6144.sqlite.xz"}


@pytest.fixture(scope="session", params=sorted(KNOWN_CAUSE))
def known_cause_run(request, tmp_path_factory) -> Path:
    """The known-cause traces of collectors/known_cause.py: from an H100, from an H200, and from an H200 again with
    other sizes (6144 GEMMs, which cuBLAS runs with another kernel)."""
    return _ingest(tmp_path_factory, f"known_cause_{request.param}", KNOWN_CAUSE[request.param])


@pytest.fixture(scope="session")
def cpu_nvtx_run(tmp_path_factory) -> Path:
    return _ingest(tmp_path_factory, "cpu_nvtx", NSYS2022 / "cpu_nvtx.sqlite", require_kernels=False)


@pytest.fixture(scope="session")
def overlap_con(overlap_run):
    """DuckDB connection over the overlap run's tables (without the analysis views of queries/)."""
    con = traceql.connect(overlap_run, views=False)
    yield con
    con.close()


def read_ncu_report(path: Path) -> list[dict]:
    """Every profiled kernel of an .ncu-rep: its names and every metric that has a value, straight from ncu_report
    (the reference the tests hold traceql's reading against)."""
    import ncu_report

    ctx = ncu_report.load_report(str(path))
    kernels = []
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for a in range(rng.num_actions()):
            act = rng.action_by_idx(a)
            metrics = {}
            for name in act.metric_names():
                m = act.metric_by_name(name)
                if m.has_value():
                    metrics[name] = m.as_string() if m.kind() == ncu_report.IMetric.ValueKind_STRING else m.as_double()
            kernels.append({"name": act.name(ncu_report.IAction.NameBase_DEMANGLED), "short_name": act.name(),
                            "metrics": metrics, "units": {n: act.metric_by_name(n).unit() for n in metrics}})
    return kernels


def without_digests(root: Path) -> None:
    """Make the run store ``root`` one written before runs recorded the sha256 of their files (index and run.json):
    it is read by sizes and footers, so a test may rewrite a file of it."""
    manifest = json.loads((root / "manifest.json").read_text())
    for entry in manifest["runs"].values():
        entry.pop("digests", None)
    (root / "manifest.json").write_text(json.dumps(manifest))
    for info in root.glob("runs/*/run.json"):
        info.write_text(json.dumps({k: v for k, v in json.loads(info.read_text()).items() if k != "digests"}))
