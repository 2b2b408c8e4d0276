"""GPU metrics are read in parallel rowid ranges and written in batches: the result must not depend on how."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import raw_query

from traceql import store
from traceql.sources.nsys.adapter import adapter_for
from traceql.sources.nsys.source import open_source
from traceql.store import schema

# The samples as an SQL join over the raw export, in table order: what gpu_metrics.parquet must hold.
RAW_METRICS = """
    SELECT g.typeId & 255, g.timestamp, m.metricName,
           g.value * CASE WHEN m.metricName LIKE '%Clock Frequency [MHz]' THEN 1e-6 ELSE 1.0 END
    FROM GPU_METRICS g JOIN TARGET_INFO_GPU_METRICS m ON m.typeId = g.typeId AND m.metricId = g.metricId
    ORDER BY g.rowid"""


def read_metrics(export: Path, **scan) -> pa.Table:
    """gpu_metrics of ``export`` as the adapter yields them, with ``scan`` options (batch_rows, workers)."""
    source = open_source(export)
    con = duckdb.connect()
    try:
        batches = list(adapter_for(source, con).gpu_metrics(**scan))
        return pa.Table.from_batches(batches).combine_chunks()
    finally:
        con.close()
        source.close()


@pytest.fixture(scope="module")
def single(overlap_sqlite) -> pa.Table:
    """The overlap trace's metrics read the plain way: one pass, one connection."""
    table = read_metrics(overlap_sqlite, batch_rows=1 << 30, workers=1)
    assert table.num_rows == raw_query(overlap_sqlite, "SELECT count(*) FROM GPU_METRICS")[0][0] > 100_000
    return table


@pytest.mark.parametrize(("batch_rows", "workers"), [(7919, 2), (1 << 14, 3), (100_000, 2), (5000, 1)])
def test_parallel_read_equals_single_read(overlap_sqlite, single, batch_rows, workers):
    parallel = read_metrics(overlap_sqlite, batch_rows=batch_rows, workers=workers)
    assert parallel.schema == single.schema
    assert parallel.equals(single)  # same rows, same order


def test_single_read_equals_raw_join(overlap_sqlite, single):
    want = raw_query(overlap_sqlite, RAW_METRICS)
    got = single.cast(pa.schema([f.with_type(pa.string()) if f.name == "metric" else f for f in single.schema]))
    assert list(zip(*(got.column(i).to_pylist() for i in range(4)), strict=True)) == want
    clocks = [v for _, _, name, v in want if name == "GPC Clock Frequency [MHz]"]
    assert clocks and 500 < max(clocks) < 3000  # MHz, not the Hz nsys writes


def test_read_with_rowid_gaps(overlap_sqlite, tmp_path):
    """Deleted rows leave rowid ranges short or empty; every remaining sample comes once, in order."""
    export = tmp_path / "gaps.sqlite"
    shutil.copyfile(overlap_sqlite, export)
    export.chmod(0o644)
    con = sqlite3.connect(export)
    with con:
        con.execute("DELETE FROM GPU_METRICS WHERE rowid % 1000 < 300 OR rowid BETWEEN 20000 AND 60000")
    con.close()
    want = raw_query(export, RAW_METRICS)
    for batch_rows, workers in [(1 << 30, 1), (997, 2), (10_000, 3)]:
        got = read_metrics(export, batch_rows=batch_rows, workers=workers)
        assert got.num_rows == len(want)
        assert got.column("ts_ns").to_pylist() == [r[1] for r in want]
        assert got.column("value").to_pylist() == [r[3] for r in want]


def test_ingested_file_equals_raw_join(overlap_run, overlap_sqlite):
    """GPU metrics are stored wide: a row per GPU and sample time, in time order per GPU, a DOUBLE column per metric
    named as nsys names it; unpivoted (the long view ``gpu_metrics``) they are the export's rows, every one."""
    import traceql

    (run_id,) = json.loads((overlap_run / "manifest.json").read_text())["runs"]
    path = store.run_dir(overlap_run, run_id) / "gpu_metrics.parquet"
    stored = pq.read_schema(path).remove_metadata()
    assert stored.names[:3] == schema.TABLES["gpu_metrics"].names  # plain strings, not dictionaries
    assert stored.field("run_id").type == pa.string()
    assert schema.check_file(path, "gpu_metrics") == "gpu_metrics"
    want = raw_query(overlap_sqlite, RAW_METRICS)
    assert stored.names[3:] == sorted({name for _, _, name, _ in want})
    assert all(f.type == pa.float64() for f in stored if f.name not in schema.TABLES["gpu_metrics"].names)
    table = pq.read_table(path)
    assert set(table.column("run_id").to_pylist()) == {run_id}
    keys = list(zip(table.column("device_id").to_pylist(), table.column("ts_ns").to_pylist(), strict=True))
    assert len(set(keys)) == len(keys) == len({(d, t) for d, t, _, _ in want})
    for device in {d for d, _ in keys}:
        times = [t for d, t in keys if d == device]
        assert times == sorted(times)
    con = traceql.connect(overlap_run)
    rows = con.sql("SELECT device_id, ts_ns, metric, value FROM gpu_metrics").fetchall()
    assert sorted(rows) == sorted(want)
    assert con.sql("SELECT count(*) FROM gpu_metrics_wide").fetchall() == [(len(keys),)]


def test_same_content_elsewhere_is_already_ingested(overlap_sqlite, tmp_path):
    """The hash runs while the export is read: a copy under another name must still come out as the same run,
    with nothing in the run directory changed."""
    import hashlib

    import traceql

    out = tmp_path / "run"
    (first,) = traceql.ingest(overlap_sqlite, out)
    assert first.sha256 == hashlib.sha256(overlap_sqlite.read_bytes()).hexdigest() and not first.already
    before = {str(p.relative_to(out)): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    copy = tmp_path / "elsewhere.sqlite"
    shutil.copyfile(overlap_sqlite, copy)
    (second,) = traceql.ingest(copy, out)
    assert second.already and (second.run_id, second.sha256) == (first.run_id, first.sha256)
    assert second.tables == first.tables
    after = {str(p.relative_to(out)): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    assert after == before
