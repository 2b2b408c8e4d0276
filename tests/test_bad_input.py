"""Bad inputs: exit code 2, an error that names the file, no traceback, and a run directory left as it was."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import H200, NSYS2022, foreign_sqlite, run_cli

import traceql
from traceql import store
from traceql.errors import NsysNotFoundError
from traceql.sources.nsys import locate

CPU_NVTX = NSYS2022 / "cpu_nvtx.sqlite"


# -- builders of bad inputs (each returns the path to give `traceql ingest`) ----------------------

def _text_named_sqlite(d: Path, _raw) -> Path:
    p = d / "x.sqlite"
    p.write_text("this is not a database\n" * 20)
    return p


def _foreign_sqlite(d: Path, _raw) -> Path:
    return foreign_sqlite(d / "inventory.sqlite")


def _truncated(d: Path, raw: Path) -> Path:
    p = d / "contention_cut.sqlite"
    data = raw.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    return p


def _no_kernels(d: Path, _raw) -> Path:
    p = d / "cpu_nvtx.sqlite"
    shutil.copy(CPU_NVTX, p)
    return p


def _edited_copy(d: Path, name: str, *sql: str) -> Path:
    p = d / name
    shutil.copy(CPU_NVTX, p)
    con = sqlite3.connect(p)
    for s in sql:
        con.execute(s)
    con.commit()
    con.close()
    return p


def _unknown_schema(d: Path, _raw) -> Path:
    return _edited_copy(d, "future.sqlite",
                        "UPDATE EXPORT_META_DATA SET value = '9.0.0' WHERE name = 'EXPORT_SCHEMA_VERSION'")


def _no_events(d: Path, _raw) -> Path:
    return _edited_copy(d, "no_events.sqlite", "DELETE FROM NVTX_EVENTS")


def _qdstrm(d: Path, _raw) -> Path:
    p = d / "report.qdstrm"
    p.write_bytes(b"\x00qdstrm partial collection" * 10)
    return p


def _empty(d: Path, _raw) -> Path:
    p = d / "empty.sqlite"
    p.write_bytes(b"")
    return p


def _missing(d: Path, _raw) -> Path:
    return d / "does_not_exist.sqlite"


# (builder, extra CLI args, words the error must contain)
CASES = {
    "text_file": (_text_named_sqlite, [], "not an SQLite file"),
    "foreign_sqlite": (_foreign_sqlite, [], "not an Nsight Systems export"),
    "truncated": (_truncated, [], "truncated"),
    "no_kernels": (_no_kernels, [], "--allow-no-kernels"),
    "unknown_schema": (_unknown_schema, [], "9.0.0"),
    "no_events": (_no_events, [], "no events"),
    "no_events_allowed": (_no_events, ["--allow-no-kernels"], "no events"),
    "qdstrm": (_qdstrm, [], "qdstrm"),
    "empty_file": (_empty, [], "empty file"),
    "missing": (_missing, [], "no such file"),
}


@pytest.fixture(scope="session")
def base_store(contention_parquet_run) -> Path:
    """A run directory that already holds one run (contention), to check that failures leave it alone."""
    return contention_parquet_run


def _snapshot(out: Path) -> dict:
    if not out.exists():
        return {"exists": False}
    manifest = out / "manifest.json"
    return {
        "exists": True,
        "manifest": manifest.read_bytes() if manifest.exists() else None,
        "runs": sorted(p.name for p in (out / "runs").iterdir()) if (out / "runs").exists() else [],
        "files": sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.name != ".lock"),
    }


def assert_clean_failure(rc: int, stderr: str, named: Path | str, out: Path | None, before: dict | None,
                         words: str = "") -> None:
    assert rc == 2, stderr
    assert str(named) in stderr, stderr
    assert "Traceback" not in stderr, stderr
    assert words.lower() in stderr.lower(), stderr
    if out is None:
        return
    if out.exists():
        assert not list(out.glob(".tmp-*")), list(out.iterdir())
        assert not list(out.glob(".manifest-*"))
    after = _snapshot(out)
    if before["exists"]:
        assert after == before
    else:
        assert after.get("manifest") is None
        assert after.get("runs", []) == []
        assert after.get("files", []) == []


@pytest.mark.parametrize("store", ["fresh", "existing"])
@pytest.mark.parametrize("case", list(CASES))
def test_bad_trace(case, store, tmp_path, contention_sqlite, base_store):
    build, args, words = CASES[case]
    trace = build(tmp_path, contention_sqlite)
    out = tmp_path / "out"
    if store == "existing":
        shutil.copytree(base_store, out)
    before = _snapshot(out)
    rc, _, stderr = run_cli("ingest", trace, "-o", out, *args)
    assert_clean_failure(rc, stderr, trace, out, before, words)


def _env_without_nsys() -> dict[str, str]:
    env = dict(os.environ, TRACEQL_NSYS="/nonexistent/bin/nsys")
    dirs = [d for d in env.get("PATH", "").split(os.pathsep)
            if d and not os.path.exists(os.path.join(d, "nsys"))]
    env["PATH"] = os.pathsep.join(dirs)
    return env


def test_rep_without_nsys_cli(tmp_path):
    """An .nsys-rep and no nsys anywhere: PATH stripped, TRACEQL_NSYS wrong, install folders hidden."""
    report = tmp_path / "cpu_nvtx.nsys-rep"
    shutil.copy(NSYS2022 / "cpu_nvtx.nsys-rep", report)
    out = tmp_path / "out"
    # The install folders (e.g. Debian's /usr/lib/nsight-systems) cannot be hidden through the environment,
    # so the CLI runs with traceql.sources.nsys.locate.INSTALL_GLOBS emptied.
    code = ("import sys, traceql.sources.nsys.locate as l; l.INSTALL_GLOBS = (); from traceql.cli import main; "
            "sys.argv[0] = 'traceql'; main()")
    proc = subprocess.run([sys.executable, "-c", code, "ingest", str(report), "-o", str(out), "--allow-no-kernels"],
                          capture_output=True, text=True, env=_env_without_nsys(), timeout=120)
    assert_clean_failure(proc.returncode, proc.stderr, report, out, {"exists": False}, "no nsys executable found")
    assert "TRACEQL_NSYS" in proc.stderr  # the next step


def test_rep_without_nsys_library(tmp_path, monkeypatch):
    for k, v in _env_without_nsys().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(locate, "INSTALL_GLOBS", ())
    with pytest.raises(NsysNotFoundError):
        locate.find_nsys()
    report = tmp_path / "cpu_nvtx.nsys-rep"
    shutil.copy(NSYS2022 / "cpu_nvtx.nsys-rep", report)
    with pytest.raises(NsysNotFoundError, match="cpu_nvtx.nsys-rep"):
        traceql.ingest(report, tmp_path / "out", require_kernels=False)
    assert not (tmp_path / "out" / "manifest.json").exists()
    # With on_error='skip' a report that cannot be exported is reported and skipped, not raised.
    seen = []
    results = traceql.ingest([report, CPU_NVTX], tmp_path / "out", require_kernels=False, on_error="skip",
                             progress=lambda r, t: seen.append((type(r).__name__, t.name)))
    assert [r.source_path for r in results] == [str(CPU_NVTX.resolve())]
    assert seen == [("NsysNotFoundError", "cpu_nvtx.nsys-rep"), ("RunInfo", "cpu_nvtx.sqlite")]


def test_ingest_of_a_run_dir_is_refused(tmp_path, base_store):
    rc, _, stderr = run_cli("ingest", base_store, "-o", tmp_path / "out")
    assert_clean_failure(rc, stderr, base_store, tmp_path / "out", {"exists": False}, "traceql sql")


# -- `traceql sql` on things that are not run directories of this version --------------------------

def test_sql_on_plain_directory(tmp_path):
    d = tmp_path / "plain"
    d.mkdir()
    (d / "notes.txt").write_text("hi")
    rc, stdout, stderr = run_cli("sql", d, "SELECT 1")
    assert_clean_failure(rc, stderr, d, None, None, "not a traceql run directory")
    assert stdout == ""


def test_sql_on_missing_directory(tmp_path):
    d = tmp_path / "nowhere"
    rc, _, stderr = run_cli("sql", d, "SELECT 1")
    assert_clean_failure(rc, stderr, d, None, None, "no such run directory")


def test_sql_on_future_manifest(tmp_path, base_store):
    run = tmp_path / "run"
    shutil.copytree(base_store, run)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["schema_version"] == 1
    manifest["schema_version"] = 99
    (run / "manifest.json").write_text(json.dumps(manifest))
    rc, stdout, stderr = run_cli("sql", run, "SELECT count(*) FROM nvtx")
    assert_clean_failure(rc, stderr, run / "manifest.json", None, None, "schema version 99")
    assert stdout == ""


def test_sql_on_future_parquet(tmp_path, base_store):
    run = tmp_path / "run"
    shutil.copytree(base_store, run)
    (run_id,) = json.loads((run / "manifest.json").read_text())["runs"]
    path = store.run_dir(run, run_id) / "nvtx.parquet"
    table = pq.read_table(path)
    meta = dict(table.schema.metadata)
    assert meta[b"traceql.schema_version"] == b"1"
    meta[b"traceql.schema_version"] = b"99"
    pq.write_table(table.replace_schema_metadata(meta), path)
    rc, stdout, stderr = run_cli("sql", run, "SELECT count(*) FROM nvtx")
    assert_clean_failure(rc, stderr, path, None, None, "schema version 99")
    assert stdout == ""


# -- inputs are read, never written ------------------------------------------------------------------

def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.parametrize("kind", ["h200_sqlite", "nsys2022_sqlite", "truncated"])
def test_input_left_untouched(kind, tmp_path, contention_sqlite):
    src = tmp_path / "in"
    src.mkdir()
    if kind == "h200_sqlite":
        trace, args, rc_expected = src / "contention.sqlite", [], 0
        shutil.copy(contention_sqlite, trace)
    elif kind == "nsys2022_sqlite":
        trace, args, rc_expected = src / "cpu_nvtx.sqlite", ["--allow-no-kernels"], 0
        shutil.copy(CPU_NVTX, trace)
    else:
        trace, args, rc_expected = _truncated(src, contention_sqlite), [], 2
    trace.chmod(0o644)
    before = (_sha(trace), trace.stat().st_mtime_ns, sorted(p.name for p in src.iterdir()))
    rc, _, stderr = run_cli("ingest", trace, "-o", tmp_path / "out", *args)
    assert rc == rc_expected, stderr
    after = (_sha(trace), trace.stat().st_mtime_ns, sorted(p.name for p in src.iterdir()))
    assert after == before  # same bytes, and no -wal, -shm or -journal files beside it
    for suffix in ("-wal", "-shm", "-journal"):
        assert not trace.with_name(trace.name + suffix).exists()


def test_parquetdir_input_left_untouched(tmp_path):
    src = tmp_path / "contention_parquetdir"
    shutil.copytree(H200 / "contention_parquetdir", src)
    before = {p.name: _sha(p) for p in src.iterdir()}
    rc, _, stderr = run_cli("ingest", src, "-o", tmp_path / "out")
    assert rc == 0, stderr
    assert {p.name: _sha(p) for p in src.iterdir()} == before


def test_require_nsys_policy(monkeypatch):
    """conftest's nsys gate: skip without nsys, but fail when TRACEQL_REQUIRE_NSYS=1 (CI)."""
    import conftest

    def missing():
        raise NsysNotFoundError("no nsys executable found")

    monkeypatch.setattr(conftest, "find_nsys", missing)
    monkeypatch.delenv("TRACEQL_REQUIRE_NSYS", raising=False)
    with pytest.raises(pytest.skip.Exception):
        conftest._nsys_or_skip()
    monkeypatch.setenv("TRACEQL_REQUIRE_NSYS", "1")
    with pytest.raises(pytest.fail.Exception, match="TRACEQL_REQUIRE_NSYS"):
        conftest._nsys_or_skip()
    monkeypatch.setattr(conftest, "find_nsys", lambda: "/opt/nsys")
    assert conftest._nsys_or_skip() == "/opt/nsys"
