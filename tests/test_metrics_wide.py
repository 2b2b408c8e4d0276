"""GPU metrics stored wide (a row per GPU and sample time, a column per metric): the rows turned wide as they stream
hold every value of the long rows, whatever the batches; the long view gives them back; the attribution's projection
equals its reference SQL; a store of layout 3 (GPU metrics long) is migrated to what a fresh ingest writes."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import H200, cli_in_process, long_metrics, older_layout, run_cli

import traceql
from traceql import store
from traceql.queries_loader import query_files
from traceql.store import metrics, schema
from traceql.store.wide import Widener, metric_names, widen

LONG = pa.schema([("device_id", pa.int32()), ("ts_ns", pa.int64()), ("metric", pa.string()), ("value", pa.float64())])


def _long(rows: list[tuple]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(LONG.names, r, strict=True)) for r in rows], schema=LONG)


def _random_long(seed: int, devices: int = 3, samples: int = 60, names=("A [%]", "B", "C \"q\"", "D")) -> list[tuple]:
    """Samples of a random subset of ``names`` each, devices interleaved in time, as nsys writes them."""
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(samples):
        for d in rng.permutation(devices):
            ts = int(t * 1000 + rng.integers(0, 999))
            rows += [(int(d), ts, n, float(rng.normal())) for n in names if rng.random() < 0.7]
    return rows


def _in_time_order_per_gpu(wide: pa.Table) -> bool:
    keys = list(zip(wide.column("device_id").to_pylist(), wide.column("ts_ns").to_pylist(), strict=True))
    return all([t for k, t in keys if k == d] == sorted(t for k, t in keys if k == d) for d in {d for d, _ in keys})


def _unpivoted(wide: pa.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in long_metrics(wide).select(LONG.names).to_pylist())


def _streamed(rows: list[tuple], batch: int, dictionary: bool) -> tuple[pa.Table, metrics.Widener]:
    table = _long(rows)
    if dictionary:
        table = table.cast(pa.schema([*LONG][:2] + [pa.field("metric", pa.dictionary(pa.int32(), pa.string())),
                                                      LONG.field("value")]))
    w = Widener(metric_names({r[2] for r in rows}))
    parts = [w.feed(b) for b in table.to_batches(max_chunksize=batch)] + [w.flush()]
    return pa.concat_tables([p for p in parts if p is not None]), w


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("batch", [1, 5, 64, 100_000])
def test_streamed_wide_rows_hold_every_value_once_per_gpu_and_time(seed, batch):
    rows = _random_long(seed)
    wide, w = _streamed(rows, batch, dictionary=seed % 2 == 1)
    keys = list(zip(wide.column("device_id").to_pylist(), wide.column("ts_ns").to_pylist(), strict=True))
    assert len(keys) == len(set(keys)) == len({(d, t) for d, t, _, _ in rows})
    assert _in_time_order_per_gpu(wide)
    assert _unpivoted(wide) == sorted(rows)
    assert w.ordered and w.dropped == {"duplicate_metric": 0, "unnamed_metric": 0}
    assert wide.column_names == ["device_id", "ts_ns", *sorted({r[2] for r in rows})]


def test_nan_is_a_value_and_absence_is_null():
    rows = [(0, 10, "A", float("nan")), (0, 10, "B", 1.0), (0, 20, "B", 2.0)]
    wide, _ = widen(_long(rows))
    assert wide.column("A").null_count == 1 and np.isnan(wide.column("A")[0].as_py())
    assert wide.column("B").to_pylist() == [1.0, 2.0]


def test_a_repeated_metric_keeps_its_first_value_and_is_counted():
    rows = [(0, 10, "A", 1.0), (0, 10, "A", 5.0), (0, 10, "B", 2.0), (1, 10, "A", 3.0)]
    wide, dropped = widen(_long(rows))
    assert wide.sort_by("device_id").column("A").to_pylist() == [1.0, 3.0]
    assert dropped == {"duplicate_metric": 1, "unnamed_metric": 0}


def test_a_metric_without_a_name_is_left_out_and_counted():
    rows = [(0, 10, None, 1.0), (0, 10, "A", 2.0), (0, 20, "device_id", 3.0)]  # a key column's name is no column
    wide, dropped = widen(_long(rows))
    assert wide.column_names == ["device_id", "ts_ns", "A"] and wide.num_rows == 1
    assert dropped["unnamed_metric"] == 2


@pytest.mark.parametrize("batch", [3, 1000])
def test_an_export_out_of_time_order_is_merged_into_one_row_per_gpu_and_time(tmp_path, batch):
    """Samples whose times go back across batches would write one (GPU, time) twice: the file is merged once written,
    and a metric repeated across the pieces is counted as within one batch."""
    rows = _random_long(7, devices=2, samples=40)
    # a time going back across batches is seen (within one batch the rows are sorted)
    assert _streamed(rows[::-1], batch, dictionary=False)[1].ordered == (batch >= len(rows))
    rng = np.random.default_rng(0)
    shuffled = [rows[i] for i in rng.permutation(len(rows))] + [rows[0]]  # and one value twice
    path = tmp_path / "gpu_metrics.parquet"
    n, dropped = metrics.write_wide(_long(shuffled).to_batches(max_chunksize=batch),
                                    metric_names({r[2] for r in rows}), "r1", path)
    wide = pq.read_table(path)
    keys = list(zip(wide.column("device_id").to_pylist(), wide.column("ts_ns").to_pylist(), strict=True))
    assert n == wide.num_rows == len(set(keys)) and _in_time_order_per_gpu(wide)
    assert _unpivoted(wide.drop(["run_id"])) == sorted(rows)
    assert dropped["duplicate_metric"] == 1
    assert set(wide.column("run_id").to_pylist()) == {"r1"}
    assert schema.check_file(path, "gpu_metrics") == "gpu_metrics"


def test_a_file_of_another_value_type_is_refused(tmp_path):
    path = tmp_path / "gpu_metrics.parquet"
    pq.write_table(pa.table({"run_id": ["r"], "device_id": pa.array([0], pa.int32()), "ts_ns": [1], "A": ["text"]})
                   .replace_schema_metadata(schema.metadata("gpu_metrics")), path)
    with pytest.raises(traceql.BadInputError, match="column A is string, not double"):
        schema.check_file(path, "gpu_metrics")


# -- the store ---------------------------------------------------------------------------------------------------

def _reference(con) -> list[tuple]:
    return con.sql(f"SELECT * FROM ({dict(query_files())['_metric_wide.sql']}) ORDER BY ALL").fetchall()


def test_the_projection_equals_the_reference_sql_on_real_traces():
    con = traceql.connect(H200 / "suite")
    got = con.sql("SELECT * FROM _metric_wide ORDER BY ALL").fetchall()
    assert "UNPIVOT" not in con.sql("SELECT sql FROM duckdb_views() WHERE view_name = '_metric_wide'").fetchall()[0][0]
    assert len(got) > 10_000 and got == _reference(con)
    assert con.sql("SELECT count(dram_pct), count(nvlink_pct), count(pcie_pct) FROM _metric_wide").fetchall()[0][0]


def test_runs_with_different_metrics_read_together(tmp_path):
    """Each run's file has the metrics its GPU sampled: read together, a metric a run lacks is NULL in its rows, and
    the long view and the projection are those of each run alone."""
    from synthetic import make_store

    root = tmp_path / "s"
    a = [dict(device_id=0, ts_ns=t, metric=m, value=v) for t in range(0, 1000, 100)
         for m, v in (("DRAM Read Bandwidth [Throughput %]", 10.0), ("DRAM Write Bandwidth [Throughput %]", 5.0),
                      ("NVLink RX User Data [Throughput %]", 7.0), ("NVLink TX User Data [Throughput %]", 9.0))]
    b = [dict(device_id=0, ts_ns=t, metric=m, value=v) for t in range(0, 1000, 200)
         for m, v in (("DRAM Read Bandwidth [Throughput %]", 20.0), ("PCIe RX Throughput [Throughput %]", 3.0),
                      ("Other Metric", 1.0))]
    make_store(root, run_id="a" * 16, gpu_metrics=a)
    make_store(root, run_id="b" * 16, gpu_metrics=b)
    con = traceql.connect(root)
    wide = {c for (c,) in con.sql("SELECT column_name FROM (DESCRIBE gpu_metrics_wide)").fetchall()}
    assert {"Other Metric", "PCIe RX Throughput [Throughput %]", "NVLink TX User Data [Throughput %]"} <= wide
    assert sorted(con.sql("SELECT run_id, device_id, ts_ns, metric, value FROM gpu_metrics").fetchall()) == sorted(
        [("a" * 16, r["device_id"], r["ts_ns"], r["metric"], r["value"]) for r in a]
        + [("b" * 16, r["device_id"], r["ts_ns"], r["metric"], r["value"]) for r in b])
    got = con.sql("SELECT * FROM _metric_wide ORDER BY ALL").fetchall()
    assert got == _reference(con)
    assert {(r[0][0], r[4], r[6], r[7]) for r in got} == {("a", 15.0, 9.0, None), ("b", 20.0, None, 3.0)}


def test_a_store_without_the_attribution_metrics_has_no_samples(tmp_path):
    from synthetic import make_store

    root = make_store(tmp_path / "s", gpu_metrics=[dict(device_id=0, ts_ns=5, metric="Unrelated", value=1.0)])
    con = traceql.connect(root)
    assert con.sql("SELECT count(*) FROM _metric_wide").fetchall() == [(0,)] == [(len(_reference(con)),)]
    assert con.sql("SELECT metric, value FROM gpu_metrics").fetchall() == [("Unrelated", 1.0)]


def test_sql_reads_both_forms_once_files_are_locked():
    """``traceql sql`` closes DuckDB to the file system: the views then read the files through pyarrow, the wide one
    with every run's columns."""
    con = traceql.connect(H200 / "suite")
    want = con.sql("SELECT count(*) FROM gpu_metrics").fetchall()[0][0]
    columns = len(con.sql("SELECT * FROM gpu_metrics_wide LIMIT 0").columns)
    rc, out, err = run_cli("sql", H200 / "suite", "SELECT count(*) AS n FROM gpu_metrics", "--format", "csv")
    assert rc == 0 and out.split()[1:] == [str(want)], err
    rc, out, err = run_cli("sql", H200 / "suite", "SELECT * FROM gpu_metrics_wide LIMIT 1", "--format", "json")
    assert rc == 0 and len(json.loads(out)[0]) == columns > 20, err


def _layout_3(fresh: Path, old: Path) -> tuple[str, dict]:
    """A copy at ``old`` of the one-run store ``fresh`` as traceql wrote it before GPU metrics were wide: the file
    a row per sample and metric, layout 3; its run id and index."""
    return older_layout(fresh, old, 3, {"gpu_metrics": lambda rows: long_metrics(rows).select(["run_id", *LONG.names])})


def test_a_store_of_layout_3_is_refused_then_migrated_to_what_ingest_writes(tmp_path, fresh):
    old = tmp_path / "old"
    rid, manifest = _layout_3(fresh, old)
    assert manifest["runs"][rid]["tables"]["gpu_metrics"] > 100_000
    with pytest.raises(traceql.SchemaVersionError, match=f"layout 3.*traceql migrate {old}"):
        traceql.connect(old)
    rc, out, err = run_cli("migrate", old)
    assert rc == 0 and "1 run(s) migrated" in out + err, err
    folder, want = store.run_dir(old, rid), store.run_dir(fresh, rid)
    assert pq.read_table(folder / "gpu_metrics.parquet").equals(pq.read_table(want / "gpu_metrics.parquet"))
    entry = json.loads((old / "manifest.json").read_text())["runs"][rid]
    fresh_entry = json.loads((fresh / "manifest.json").read_text())["runs"][rid]
    assert entry["tables"] == fresh_entry["tables"] and entry["files"]["gpu_metrics"] == (
        folder / "gpu_metrics.parquet").stat().st_size
    assert store.read_run_info(folder)["tables"] == fresh_entry["tables"]
    results = [run_cli("attribute", d, "--format", "json") for d in (fresh, old)]
    assert results[0][0] == results[1][0] == 0
    assert json.loads(results[0][1])["kernels"] == json.loads(results[1][1])["kernels"]


def test_a_store_of_layout_3_at_a_url_is_migrated_where_it_is(tmp_path, fresh):
    fsspec = pytest.importorskip("fsspec")
    mem = fsspec.filesystem("memory")
    old = tmp_path / "old"
    rid, _ = _layout_3(fresh, old)
    url = f"memory://traceql-test-{tmp_path.name}/store"
    root = url.removeprefix("memory://")
    mem.put(str(old), root, recursive=True)
    try:
        rc, out, err = cli_in_process("migrate", url)
        assert rc == 0 and "1 run(s) migrated" in out + err, err
        folder = f"{root}/runs/run_id={rid}"
        info = json.loads(mem.cat_file(f"{folder}/run.json"))
        assert info["files"] == {t: mem.size(f"{folder}/{t}.parquet") for t in info["tables"]}
        from traceql.store import remote

        want = traceql.connect(fresh).sql("SELECT * FROM gpu_metrics_wide ORDER BY ALL").fetchall()
        assert remote.connect(url).sql("SELECT * FROM gpu_metrics_wide ORDER BY ALL").fetchall() == want
    finally:
        with contextlib.suppress(FileNotFoundError):
            mem.rm(f"/traceql-test-{tmp_path.name}", recursive=True)


def test_opening_reads_the_recorded_columns_not_every_footer(tmp_path, fresh, monkeypatch):
    """Each run records its GPU metrics' columns (run.json, the index), so that opening a store of many runs reads
    no footer for them; a run that records none has its footer read, with the same result."""
    (rid,) = json.loads((fresh / "manifest.json").read_text())["runs"]
    path = store.run_dir(fresh, rid) / "gpu_metrics.parquet"
    own = [n for n in pq.read_schema(path).names if n not in schema.TABLES["gpu_metrics"].names]
    assert store.read_run_info(store.run_dir(fresh, rid))["columns"] == {"gpu_metrics": own}
    assert json.loads((fresh / "manifest.json").read_text())["runs"][rid]["columns"] == {"gpu_metrics": own}
    want = traceql.connect(fresh).sql("SELECT * FROM gpu_metrics_wide ORDER BY ALL").fetchall()
    copy = tmp_path / "copy"
    shutil.copytree(fresh, copy)
    read = []
    real = pq.read_schema
    monkeypatch.setattr(store.pq, "read_schema", lambda p, *a, **k: read.append(Path(p).name) or real(p, *a, **k))
    assert traceql.connect(copy).sql("SELECT * FROM gpu_metrics_wide ORDER BY ALL").fetchall() == want
    assert "gpu_metrics.parquet" not in read
    manifest = json.loads((copy / "manifest.json").read_text())
    for columns in (None, "SMs Active", {"gpu_metrics": "not a list"}, {"gpu_metrics": [1, 2]}):  # none, or damaged
        read.clear()
        manifest["runs"][rid]["columns"] = columns
        (copy / "manifest.json").write_text(json.dumps(manifest))
        assert traceql.connect(copy).sql("SELECT * FROM gpu_metrics_wide ORDER BY ALL").fetchall() == want
        assert "gpu_metrics.parquet" in read


def test_write_wide_streams_a_batch_at_a_time(tmp_path, monkeypatch):
    """Each batch is widened before the next is read, so that memory holds a few batches, not the decoder's output."""
    rows = _random_long(3, samples=200)
    batches = _long(rows).to_batches(max_chunksize=50)
    fed = []
    real = metrics.Widener.feed_samples
    monkeypatch.setattr(metrics.Widener, "feed_samples", lambda self, b: fed.append(1) or real(self, b))

    def read():
        for i, b in enumerate(batches):
            assert len(fed) == i  # every batch read so far was widened
            yield b

    n, _ = metrics.write_wide(read(), metric_names({r[2] for r in rows}), "r", tmp_path / "g.parquet")
    assert len(fed) == len(batches) > 10 and n == len({(d, t) for d, t, _, _ in rows})
