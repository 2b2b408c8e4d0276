"""Odd rows at ingest (end before start, no times, duplicates, negative devices, unknown GPU metrics) are dropped,
counted, reported on stderr and kept in run.json, the manifest and the runs table; real exports need no repair."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import raw_query, run_cli, without_digests

import traceql
from traceql import store

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"


def _unconstrained(con: sqlite3.Connection, table: str) -> None:
    """The same table without NOT NULL constraints (nsys declares them), so that rows can lose their times."""
    con.execute(f"CREATE TABLE _copy AS SELECT * FROM {table}")
    con.execute(f"DROP TABLE {table}")
    con.execute(f"ALTER TABLE _copy RENAME TO {table}")


def _edited(tmp: Path, src: Path, name: str, *sql: str, unconstrained: tuple[str, ...] = ()) -> Path:
    p = tmp / name
    shutil.copy(src, p)
    p.chmod(0o644)
    con = sqlite3.connect(p)
    for table in unconstrained:
        _unconstrained(con, table)
    for s in sql:
        con.execute(s)
    con.commit()
    con.close()
    return p


def _rows(table: str, where: str) -> str:
    return f"rowid IN (SELECT rowid FROM {table} {where})"


@pytest.fixture(scope="module")
def odd_export(tmp_path_factory, contention_sqlite) -> tuple[Path, dict[str, int]]:
    """The contention export with odd rows of every kind put in, and the counts expected back."""
    trace = _edited(
        tmp_path_factory.mktemp("odd"), contention_sqlite, "odd.sqlite",
        f"UPDATE {KERNEL} SET \"end\" = start - 1000 WHERE {_rows(KERNEL, 'ORDER BY rowid LIMIT 3')}",
        f"UPDATE {KERNEL} SET start = NULL WHERE {_rows(KERNEL, 'ORDER BY rowid LIMIT 2 OFFSET 10')}",
        f"UPDATE {KERNEL} SET \"end\" = NULL WHERE {_rows(KERNEL, 'ORDER BY rowid LIMIT 1 OFFSET 20')}",
        f"UPDATE {KERNEL} SET deviceId = -1 WHERE {_rows(KERNEL, 'ORDER BY rowid LIMIT 4 OFFSET 30')}",
        f"INSERT INTO {KERNEL} SELECT * FROM {KERNEL} WHERE {_rows(KERNEL, 'ORDER BY rowid LIMIT 5 OFFSET 40')}",
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY SELECT * FROM CUPTI_ACTIVITY_KIND_MEMCPY "
        f"WHERE {_rows('CUPTI_ACTIVITY_KIND_MEMCPY', 'ORDER BY rowid LIMIT 2')}",
        f"UPDATE GPU_METRICS SET metricId = 9999 WHERE {_rows('GPU_METRICS', 'ORDER BY rowid LIMIT 7')}",
        f"UPDATE GPU_METRICS SET value = NULL WHERE {_rows('GPU_METRICS', 'ORDER BY rowid LIMIT 6 OFFSET 100')}",
        unconstrained=(KERNEL, "GPU_METRICS"))
    expected = {"kernels.end_before_start": 3, "kernels.no_time": 3, "kernels.no_device": 4, "kernels.duplicate": 5,
                "memcpy.duplicate": 2, "gpu_metrics.unknown_metric": 7, "gpu_metrics.no_value": 6}
    return trace, expected


def test_odd_rows_are_dropped_counted_and_reported(tmp_path, odd_export, contention_sqlite):
    trace, expected = odd_export
    out = tmp_path / "out"
    rc, _, stderr = run_cli("ingest", trace, "-o", out)
    assert rc == 0, stderr
    assert "Traceback" not in stderr
    # on stderr, in words, naming the file
    warning = next(line for line in stderr.splitlines() if "dropped" in line)
    assert str(trace) in warning
    for words in ("3 kernels rows ending before they start", "3 kernels rows without a start or end time",
                  "4 kernels rows on a negative or missing device id", "5 kernels rows duplicated",
                  "2 memcpy rows duplicated", "7 gpu_metrics samples of a metric the export does not describe",
                  "6 gpu_metrics samples without a time or value"):
        assert words in warning, warning
    # in run.json, the manifest and the runs table
    manifest = json.loads((out / "manifest.json").read_text())
    (run_id,) = manifest["runs"]
    assert manifest["runs"][run_id]["repairs"] == expected
    assert json.loads((store.run_dir(out, run_id) / "run.json").read_text())["repairs"] == expected
    con = traceql.connect(out)
    assert dict(con.sql("SELECT repairs FROM runs").fetchall()[0][0]) == expected
    # what is left: every kernel with both times, a device, end >= start, once
    raw_kernels = raw_query(contention_sqlite, f"SELECT count(*) FROM {KERNEL}")[0][0]
    n, bad, distinct = con.sql("""SELECT count(*), count(*) FILTER (start_ns IS NULL OR end_ns IS NULL OR
                                         end_ns < start_ns OR device_id < 0),
                                  (SELECT count(*) FROM (SELECT DISTINCT * FROM kernels)) FROM kernels""").fetchall()[0]
    assert n == raw_kernels - 3 - 3 - 4 and bad == 0 and distinct == n
    raw_samples = raw_query(contention_sqlite, "SELECT count(*) FROM GPU_METRICS")[0][0]
    assert con.sql("SELECT count(*) FROM gpu_metrics").fetchall()[0][0] == raw_samples - 7 - 6
    con.close()


def test_clean_exports_need_no_repair(overlap_run, contention_sqlite_run, contention_parquet_run, train_ddp_run):
    """Real exports from nsys 2025.3 (SQLite and Parquet) drop nothing: the checks fire on odd rows only."""
    for run in (overlap_run, contention_sqlite_run, contention_parquet_run, train_ddp_run):
        con = traceql.connect(run, views=False)
        assert [dict(r[0]) for r in con.sql("SELECT repairs FROM runs").fetchall()] == [{}], run
        con.close()
        (entry,) = json.loads((run / "manifest.json").read_text())["runs"].values()
        assert entry["repairs"] == {}


def test_python_twin_returns_the_repairs(tmp_path, odd_export):
    trace, expected = odd_export
    (info,) = traceql.ingest(trace, tmp_path / "out")
    assert info.repairs == expected
    assert any("dropped" in w for w in info.warnings)
    (again,) = traceql.ingest(trace, tmp_path / "out")  # already ingested: the same counts, from the manifest
    assert again.already and again.repairs == expected


def test_runs_of_an_older_store_read_repairs_as_null(tmp_path, overlap_run):
    """A run written before the repairs column existed still reads, beside a new one."""
    import pyarrow.parquet as pq

    old = tmp_path / "old"
    shutil.copytree(overlap_run, old)
    (run_id,) = json.loads((old / "manifest.json").read_text())["runs"]
    path = store.run_dir(old, run_id) / "runs.parquet"
    table = pq.read_table(path)
    pq.write_table(table.drop(["repairs"]).replace_schema_metadata(table.schema.metadata), path)
    without_digests(old)  # as that store would be: its runs recorded no sha256 of their files
    con = traceql.connect(old, views=False)
    assert con.sql("SELECT run_id, repairs FROM runs").fetchall() == [(run_id, None)]
    con.close()
