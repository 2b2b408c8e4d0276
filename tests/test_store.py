"""The run store: idempotent ingest, several runs in one directory, metadata, and `traceql sql` output formats."""

from __future__ import annotations

import csv
import io
import json
import shutil
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import H200, NSYS2022, REPO, raw_query, run_cli

import traceql
from traceql import store
from traceql.store import schema

CPU_NVTX = NSYS2022 / "cpu_nvtx.sqlite"


def _stat_all(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def test_reingest_is_idempotent(tmp_path):
    out = tmp_path / "run"
    (first,) = traceql.ingest(CPU_NVTX, out, require_kernels=False)
    assert not first.already
    before = _stat_all(out)
    manifest = (out / "manifest.json").read_bytes()
    (second,) = traceql.ingest(CPU_NVTX, out, require_kernels=False)
    assert second.already and second.run_id == first.run_id
    assert second.tables == first.tables and second.tables["nvtx"] == 19
    assert _stat_all(out) == before
    assert (out / "manifest.json").read_bytes() == manifest
    # The CLI says so too.
    rc, stdout, stderr = run_cli("ingest", CPU_NVTX, "-o", out, "--allow-no-kernels")
    assert rc == 0, stderr
    assert "already ingested" in stderr and first.run_id in stderr
    assert _stat_all(out) == before


def test_run_id_is_sha256_prefix(tmp_path):
    import hashlib

    (info,) = traceql.ingest(CPU_NVTX, tmp_path / "run", require_kernels=False)
    digest = hashlib.sha256(CPU_NVTX.read_bytes()).hexdigest()
    assert (info.sha256, info.run_id) == (digest, digest[:16])
    assert sorted(store.run_id_of(p) for p in (tmp_path / "run" / "runs").iterdir()) == [digest[:16]]


@pytest.fixture(scope="module")
def two_run_store(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    out = tmp_path_factory.mktemp("two") / "run"
    infos = traceql.ingest([CPU_NVTX, H200 / "contention.sqlite.xz"], out, require_kernels=False)
    return out, {Path(i.source_path).name: i.run_id for i in infos}


def test_two_traces_in_one_run_dir(two_run_store, contention_sqlite):
    out, ids = two_run_store
    assert len(set(ids.values())) == 2
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["runs"]) == set(ids.values())
    con = traceql.connect(out, views=False)
    runs = dict(con.execute("SELECT run_id, format FROM runs").fetchall())
    assert runs == {ids["cpu_nvtx.sqlite"]: "nsys-sqlite", ids["contention.sqlite.xz"]: "nsys-sqlite"}
    (raw_kernels,) = raw_query(contention_sqlite, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
    (raw_nvtx,) = raw_query(contention_sqlite, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59")[0]
    assert dict(con.execute("SELECT run_id, count(*) FROM kernels GROUP BY 1").fetchall()) == {
        ids["contention.sqlite.xz"]: raw_kernels}
    assert dict(con.execute("SELECT run_id, count(*) FROM nvtx GROUP BY 1").fetchall()) == {
        ids["cpu_nvtx.sqlite"]: 19, ids["contention.sqlite.xz"]: raw_nvtx}
    assert con.execute("SELECT count(*) FROM processes").fetchone()[0] == 72 + 307
    # The same run directory twice: each run is read once (twice, every kernel would overlap its own copy).
    con2 = traceql.connect([out, out], views=False)
    assert con2.execute("SELECT count(DISTINCT run_id), count(*) FROM runs").fetchone() == (2, 2)


def test_connect_ignores_leftovers(tmp_path, two_run_store):
    out = tmp_path / "run"
    shutil.copytree(two_run_store[0], out)
    con = traceql.connect(out, views=False)
    before = {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in schema.TABLES}
    # An interrupted ingest: a .tmp-* folder with complete-looking files, and a run folder the manifest lacks.
    for leftover in (out / ".tmp-0123456789abcdef-x1y2", store.run_dir(out, "0123456789abcdef")):
        shutil.copytree(next((out / "runs").iterdir()), leftover)
        (leftover / "junk.parquet").write_bytes(b"not parquet")
    con = traceql.connect(out, views=False)
    after = {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in schema.TABLES}
    assert after == before
    assert before["runs"] == 2 and before["kernels"] > 0


def test_every_parquet_file_carries_schema_version(two_run_store):
    out, ids = two_run_store
    for run_id in ids.values():
        files = sorted(store.run_dir(out, run_id).glob("*.parquet"))
        assert sorted(f.stem for f in files) == sorted(schema.TABLES)
        for f in files:
            meta = pq.read_schema(f).metadata
            assert meta[b"traceql.schema_version"] == str(schema.SCHEMA_VERSION).encode() == b"1", f
            assert meta[b"traceql.table"] == f.stem.encode(), f
            stored = pq.read_schema(f).remove_metadata()
            assert stored == schema.stored(f.stem, stored.names), f
            assert stored.names[:len(schema.TABLES[f.stem])] == schema.TABLES[f.stem].names, f
            assert set(pq.read_table(f, columns=["run_id"]).column("run_id").to_pylist()) <= {run_id}


# -- traceql sql ----------------------------------------------------------------------------------------

COUNT = "SELECT count(*) AS n FROM kernels"


@pytest.fixture(scope="module")
def raw_kernel_count(overlap_sqlite) -> int:
    return raw_query(overlap_sqlite, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]


def test_sql_json(overlap_run, raw_kernel_count):
    rc, stdout, stderr = run_cli("sql", overlap_run, COUNT, "--format", "json")
    assert rc == 0, stderr
    assert json.loads(stdout) == [{"n": raw_kernel_count}]


def test_sql_query_option(overlap_run, raw_kernel_count):
    rc, stdout, stderr = run_cli("sql", overlap_run, "-q", COUNT, "-f", "json")
    assert rc == 0, stderr
    assert json.loads(stdout) == [{"n": raw_kernel_count}]


def test_sql_csv(overlap_run, overlap_sqlite):
    rc, stdout, stderr = run_cli("sql", overlap_run, "SELECT device_id, count(*) AS n, 'a,b' AS s FROM kernels "
                                                     "GROUP BY 1 ORDER BY 1", "--format", "csv")
    assert rc == 0, stderr
    rows = list(csv.DictReader(io.StringIO(stdout)))
    raw = raw_query(overlap_sqlite, "SELECT deviceId, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1 ORDER BY 1")
    assert [(int(r["device_id"]), int(r["n"]), r["s"]) for r in rows] == [(d, n, "a,b") for d, n in raw]


def test_sql_parquet(overlap_run, tmp_path, raw_kernel_count):
    dest = tmp_path / "out.parquet"
    rc, stdout, stderr = run_cli("sql", overlap_run, COUNT, "--format", "parquet", "-o", dest)
    assert rc == 0, stderr
    assert pq.read_table(dest).to_pylist() == [{"n": raw_kernel_count}]
    rc, _, stderr = run_cli("sql", overlap_run, COUNT, "--format", "parquet")
    assert rc == 2 and "-o" in stderr and "Traceback" not in stderr


def test_sql_output_file(overlap_run, tmp_path, raw_kernel_count):
    dest = tmp_path / "out.json"
    rc, stdout, stderr = run_cli("sql", overlap_run, COUNT, "--format", "json", "-o", dest)
    assert rc == 0, stderr
    assert json.loads(dest.read_text()) == [{"n": raw_kernel_count}]


def test_sql_table(overlap_run, raw_kernel_count):
    rc, stdout, stderr = run_cli("sql", overlap_run, "SELECT count(*) AS kernel_count FROM kernels")
    assert rc == 0, stderr
    assert "kernel_count" in stdout
    assert f" {raw_kernel_count} " in stdout


def test_sql_table_many_rows(overlap_run, raw_kernel_count):
    rc, stdout, stderr = run_cli("sql", overlap_run, "SELECT start_ns FROM kernels")
    assert rc == 0, stderr
    assert f"({raw_kernel_count} rows, 200 shown" in stdout


def test_sql_bad_query_and_format(overlap_run):
    rc, _, stderr = run_cli("sql", overlap_run, "SELECT * FROM no_such_table")
    assert rc == 2 and "no_such_table" in stderr and "Traceback" not in stderr
    rc, _, stderr = run_cli("sql", overlap_run, COUNT, "--format", "xml")
    assert rc == 2 and "xml" in stderr and "Traceback" not in stderr


def test_schema_lists_every_table():
    rc, stdout, stderr = run_cli("schema")
    assert rc == 0, stderr
    tables_part, views_part = stdout.split("\nanalysis views", 1)
    listed = {line.split(":", 1)[0] for line in tables_part.splitlines() if line and not line.startswith(" ")}
    assert listed == set(schema.TABLES)
    for name, sch in schema.TABLES.items():
        block = tables_part.split(f"{name}:", 1)[1]
        for f in sch:
            assert f.name in block
    # the analysis views too, each with the columns of its header
    from traceql.queries_loader import header_columns, query_files

    views = {line.split(":", 1)[0] for line in views_part.splitlines()[1:] if line and not line.startswith(" ")}
    public = {f.removesuffix(".sql"): sql for f, sql in query_files() if not f.startswith("_")}
    assert views == set(public) and {"instance_facts", "kernel_attribution", "instance_predictions"} <= views
    block = views_part.split("kernel_attribution:", 1)[1]
    assert all(col in block for col, _ in header_columns(public["kernel_attribution"]))


@pytest.mark.parametrize("args", [["ingest", "x.sqlite"], ["sql"], ["no-such-command"], ["ingest", "--bogus"]])
def test_usage_errors_exit_2_without_traceback(args):
    rc, _, stderr = run_cli(*args)
    assert rc == 2 and "Traceback" not in stderr, stderr


def test_version_flag():
    rc, stdout, stderr = run_cli("--version")
    assert (rc, stdout.strip()) == (0, traceql.__version__), stderr


# -- packaging --------------------------------------------------------------------------------------------

def test_wheel_ships_queries_and_collectors(tmp_path):
    """`pip wheel .` must ship the traceql.queries package (with every .sql file) and the collectors."""
    import subprocess
    import sys

    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("traceql", "queries", "collectors", "recipes"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp_path / "dist"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-w", str(dist), "-q"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = dist.glob("traceql-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "traceql/queries/__init__.py" in names
    assert "traceql/collectors/overlap.py" in names
    modules = {f"traceql/{f.relative_to(REPO / 'traceql').as_posix()}" for f in (REPO / "traceql").rglob("*.py")}
    assert modules - names == set()  # every module of every package (the package list in pyproject.toml is explicit)
    assert {"traceql/report/vega-bundle.js.gz", "traceql/report/vega-bundle.json"} <= names  # reports draw offline
    sql_files = {f"traceql/queries/{p.name}" for p in (REPO / "queries").glob("*.sql")}
    assert sql_files <= names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "traceql = traceql.cli:console" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_arrow_types_roundtrip_through_duckdb(overlap_con):
    """The views keep the declared types (int64 ns, int32 ids, the labels map)."""
    got = overlap_con.sql("SELECT * FROM nvtx LIMIT 0").to_arrow_table()
    want = schema.TABLES["nvtx"]
    assert [(f.name, f.type) for f in got.schema] == [(f.name, f.type) for f in want]


def test_a_run_given_twice_is_read_once(tmp_path, overlap_run):
    """The same directory twice, or two stores sharing a run: each run is read once, and the CLI says so."""
    other = tmp_path / "other"
    shutil.copytree(overlap_run, other)
    con = traceql.connect([overlap_run, overlap_run, other], views=False)
    [(runs, kernels)] = con.sql("SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM kernels)").fetchall()
    [(alone,)] = traceql.connect(overlap_run, views=False).sql("SELECT count(*) FROM kernels").fetchall()
    assert (runs, kernels) == (1, alone)
    rc, out, err = run_cli("sql", overlap_run, other, "SELECT count(*) AS n FROM runs", "-f", "json")
    assert rc == 0 and json.loads(out) == [{"n": 1}]
    assert "is read once" in err and str(other) in err


def test_attribute_a_run_given_twice_equals_once(overlap_run):
    from traceql.attribute import attribute

    once, twice = attribute(overlap_run), attribute([overlap_run, overlap_run])
    assert once.kernels.to_pylist() == twice.kernels.to_pylist()
    assert once.summary.to_pylist() == twice.summary.to_pylist()


def test_sql_csv_writes_list_columns_as_json(tmp_path):
    traceql.ingest(H200 / "kernels.ncu-rep.xz", tmp_path / "ncu")
    rc, out, err = run_cli("sql", tmp_path / "ncu", "SELECT name, missing FROM ncu_kernels ORDER BY name", "-f", "csv")
    assert rc == 0 and "Traceback" not in err, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows and all(isinstance(json.loads(r["missing"]), list) for r in rows)


def test_every_file_of_a_store_is_version_checked(tmp_path, overlap_run, contention_sqlite):
    """A store whose second run was written by another schema version is refused, not read silently."""
    store = tmp_path / "s"
    shutil.copytree(overlap_run, store)
    traceql.ingest(contention_sqlite, store)
    runs = sorted((store / "runs").iterdir())
    victim = runs[-1] / "kernels.parquet"
    table = pq.read_table(victim)
    meta = dict(table.schema.metadata)
    meta[schema.META_VERSION] = b"999"
    pq.write_table(table.replace_schema_metadata(meta), victim)
    with pytest.raises(traceql.SchemaVersionError, match="999"):
        traceql.connect(store)


def test_staging_folders_of_killed_ingests_are_removed(tmp_path, overlap_sqlite):
    """An ingest killed mid-way leaves its staging folder; the next ingest into the directory removes it, but never
    the folder of an ingest that is still running."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from traceql import store

    out = tmp_path / "runs"
    # a real ingest, killed once its staging folder exists
    proc = subprocess.Popen([sys.executable, "-m", "traceql.cli", "ingest", str(overlap_sqlite), "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not list(out.glob(".tmp-*")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed = list(out.glob(".tmp-*"))
    assert killed, "the ingest finished before it could be killed"
    alive = store.staging_dir(out)  # this process: alive
    legacy = out / ".tmp-abcdef"  # a folder that names no process, recent: might belong to a running old ingest
    legacy.mkdir()
    traceql.ingest(H200 / "train_ddp.sqlite.xz", out)
    left = set(out.glob(".tmp-*"))
    assert not set(killed) & left and alive in left and legacy in left
    assert len(store.read_manifest(out)["runs"]) == 1  # the killed ingest published nothing


def test_run_json_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    """A run's run.json (written last: a run folder with one is complete) is written under a name of its own and
    renamed over the one before. Stopped before the rename, the previous run.json is as it was, and nothing else is
    left in the folder."""
    from traceql.store import writer

    writer.write_run_json(tmp_path, {"run_id": "r", "tables": {}})
    before = (tmp_path / "run.json").read_text()

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(writer.os, "replace", stopped)
    with pytest.raises(KeyboardInterrupt):
        writer.finish_run(tmp_path, writer.RunInfo(run_id="r", source_path="", sha256="", format="",
                                                   tables={"kernels": 3}, files={"kernels": 10}))
    monkeypatch.undo()
    assert (tmp_path / "run.json").read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]
