"""The attribution's interval sweeps, run as exact integer numpy code and registered into DuckDB.

DuckDB stays the query layer: the engine reads its inputs from views of ``queries/`` and writes each result as a
table under the name of the view it replaces, so every view above it (and users' SQL) reads it unchanged.
Each (run, device) is swept on its own, the devices of a store in parallel threads (numpy releases the GIL in
its sorts and cumulative sums).

Replaced views, with their reference SQL kept in ``queries/`` (the same definitions, evaluated by DuckDB when
a connection is queried without ``traceql.analysis.prepare``; ``tests/test_engine.py`` compares the two):

- ``_instance_overlap``: per activity, the exact overlap by each co-runner class and the co-runners' SM·ns;
- ``_device_unions``: per device, the unions of compute, communication and both;
- ``_instance_metrics``: per activity, the nsys GPU metrics averaged over the samples inside it;
- ``_corunner_dram``: per activity, the isolated DRAM demand its co-runners bring while overlapping it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..queries_loader import materialize
from . import sweeps

METRICS = ("sm_active_pct", "dram_pct", "gpc_clock_mhz", "nvlink_pct", "pcie_pct")


BATCH_ROWS = 1 << 20  # rows per Arrow batch read from DuckDB: the memory of the read, whatever the store's size


def _grouped(con: duckdb.DuckDBPyConnection, sql: str, order: str = "", *,
             tables: bool = False) -> Iterator[tuple[tuple[str, int], dict]]:
    """The rows of ``sql`` (which has columns run_id and device_id) per (run, device), in that order: one scan,
    streamed in batches; each group's columns as numpy arrays (masked where NULL), without run_id and device_id
    (``tables``: as an Arrow table)."""
    reader = con.sql(f"SELECT * FROM ({sql}) ORDER BY run_id, device_id{', ' + order if order else ''}") \
        .to_arrow_reader(BATCH_ROWS)
    key, parts = None, []
    for batch in reader:
        run, dev = batch.column("run_id"), batch.column("device_id")
        n = batch.num_rows
        if n == 0:
            continue
        change = np.flatnonzero(np.asarray(pc.or_(pc.not_equal(run[1:], run[:-1]),
                                                  pc.not_equal(dev[1:], dev[:-1])), dtype=bool)) + 1
        starts = [0, *change.tolist()]
        for a, b in zip(starts, [*change.tolist(), n], strict=True):
            k = (run[a].as_py(), dev[a].as_py())
            if k != key and parts:
                yield key, _table_or_columns(parts, tables)
                parts = []
            key = k
            parts.append(batch.slice(a, b - a))
    if parts:
        yield key, _table_or_columns(parts, tables)


def _table_or_columns(parts: list[pa.RecordBatch], table: bool):
    t = pa.Table.from_batches(parts)
    return t if table else _columns(t)


def _columns(table: pa.Table) -> dict[str, np.ndarray]:
    out = {}
    for name in table.column_names:
        if name in ("run_id", "device_id"):
            continue
        col = table.column(name)
        if col.null_count:
            fill = 0.0 if pa.types.is_floating(col.type) else 0
            out[name] = np.ma.masked_array(pc.fill_null(col, fill).to_numpy(), mask=col.is_null().to_numpy())
        else:
            out[name] = col.to_numpy()
    return out


def _run_col(key: tuple[str, int], n: int) -> list[pa.Array]:
    run = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([key[0]]))
    return [run, pa.array(np.full(n, key[1], dtype=np.int32))]


def _publish(con: duckdb.DuckDBPyConnection, view: str, tables: list[pa.Table], schema: pa.Schema) -> None:
    """Store the result as the table that ``view`` now reads (the naming of ``queries_loader.materialize``)."""
    table = pa.concat_tables(tables) if tables else schema.empty_table()
    name = f"_engine_{view}"
    con.register(name, table)
    try:
        con.execute(f'CREATE OR REPLACE TEMP TABLE "_materialized_{view}" AS SELECT * FROM "{name}"')
    finally:
        con.unregister(name)
    con.execute(f'CREATE OR REPLACE VIEW "{view}" AS SELECT * FROM temp."_materialized_{view}"')


def _map(groups: Iterator[tuple[tuple[str, int], dict]], work: Callable[[tuple[str, int], dict], pa.Table]) \
        -> list[tuple[tuple[str, int], pa.Table]]:
    """Read the groups on the calling thread (one DuckDB connection), sweep them in parallel threads; at most two
    groups per thread wait for their turn, so memory stays that of a few devices."""
    workers = os.cpu_count() or 1
    out, pending = [], []
    with ThreadPoolExecutor(workers) as pool:
        for key, data in groups:
            pending.append((key, pool.submit(work, key, data)))
            while len(pending) > 2 * workers:
                k, f = pending.pop(0)
                out.append((k, f.result()))
        out += [(k, f.result()) for k, f in pending]
    return out


OVERLAP_SCHEMA = pa.schema([("run_id", pa.string()), ("device_id", pa.int32()), ("activity_id", pa.int64()),
                            ("comm_overlap_ns", pa.int64()), ("compute_overlap_ns", pa.int64()),
                            ("copy_overlap_ns", pa.int64()), ("overlap_ns", pa.int64()),
                            ("corunner_sm_ns", pa.int64()), ("comm_sm_ns", pa.int64()), ("sm_count", pa.int32())])
UNIONS_SCHEMA = pa.schema([("run_id", pa.string()), ("device_id", pa.int32()), ("compute_ns", pa.int64()),
                          ("comm_ns", pa.int64()), ("overlap_ns", pa.int64())])


def _overlaps(con: duckdb.DuckDBPyConnection) -> None:
    sm_counts = dict(((r, d), s) for r, d, s in con.sql("SELECT run_id, device_id, sm_count FROM devices").fetchall())
    sql = """SELECT run_id, device_id, activity_id, start_ns, end_ns, sm_held,
                    CASE corunner_kind WHEN 'comm' THEN 0 WHEN 'compute' THEN 1 ELSE 2 END::TINYINT AS cls
             FROM _activity_rows"""
    unions: dict[tuple[str, int], pa.Table] = {}

    def work(key, a):
        sm_count = sm_counts.get(key)
        res = sweeps.overlap(a["start_ns"], a["end_ns"], a["cls"], np.ma.filled(a["sm_held"], 0), sm_count)
        n = len(a["activity_id"])
        unions[key] = pa.table([*_run_col(key, 1), *(pa.array([v], pa.int64()) for v in res.totals.values())],
                               names=UNIONS_SCHEMA.names)
        cols = [pa.array(a["activity_id"]), *(pa.array(res.per_activity[c]) for c in OVERLAP_SCHEMA.names[3:9]),
                pa.array(np.full(n, sm_count if sm_count is not None else 0, dtype=np.int32),
                         mask=np.full(n, sm_count is None))]
        return pa.table([*_run_col(key, n), *cols], names=OVERLAP_SCHEMA.names)

    done = _map(_grouped(con, sql), work)
    _publish(con, "_instance_overlap", [t for _, t in done], OVERLAP_SCHEMA)
    _publish(con, "_device_unions", [unions[k] for k, _ in done], UNIONS_SCHEMA)


def device_unions(con: duckdb.DuckDBPyConnection) -> None:
    """``_device_unions`` alone, from ``_union_intervals`` (the overlap numbers of ``traceql overlap``): no activity
    rows, no per-activity integrals."""
    def work(key, a):
        res = sweeps.unions(a["start_ns"], a["end_ns"], a["cls"])
        return pa.table([*_run_col(key, 1), *(pa.array([v], pa.int64()) for v in res.values())],
                        names=UNIONS_SCHEMA.names)

    sql = "SELECT run_id, device_id, start_ns, end_ns, cls FROM _union_intervals"
    _publish(con, "_device_unions", [t for _, t in _map(_grouped(con, sql), work)], UNIONS_SCHEMA)


METRICS_SCHEMA = pa.schema([("run_id", pa.string()), ("device_id", pa.int32()), ("activity_id", pa.int64()),
                            ("samples", pa.int64()), *((m, pa.float64()) for m in METRICS)])


def _metrics(con: duckdb.DuckDBPyConnection) -> None:
    nulls = ", ".join(f"NULL::DOUBLE AS {m}" for m in METRICS)
    # the samples (part 0, by time) and then the activities (part 1) of each device, in one scan
    sql = f"""SELECT run_id, device_id, 0 AS part, ts_ns AS a, NULL::BIGINT AS b, NULL::BIGINT AS c,
                     {', '.join(f'{m}::DOUBLE AS {m}' for m in METRICS)}
              FROM _metric_wide
              UNION ALL
              SELECT run_id, device_id, 1, activity_id, start_ns, end_ns, {nulls} FROM _activity_rows"""
    materialize(con, ("_metric_wide",))

    def both() -> Iterator[tuple[tuple[str, int], dict]]:
        """The devices with samples and activities."""
        for key, t in _grouped(con, sql, "part, a", tables=True):
            part = t.column("part")
            samples = _columns(t.filter(pc.equal(part, 0)).select(["a", *METRICS]))
            acts = _columns(t.filter(pc.equal(part, 1)).select(["a", "b", "c"]))
            if len(samples["a"]) and len(acts["a"]):
                yield key, {"samples": {"ts_ns": samples["a"], **{m: np.ma.filled(samples[m], np.nan)
                                                                   for m in METRICS}},
                            "acts": {"activity_id": acts["a"], "start_ns": acts["b"], "end_ns": acts["c"]}}

    def work(key, d):
        s, a = d["samples"], d["acts"]
        means, counts = {}, []
        for m in METRICS:
            means[m], k = sweeps.sample_means(s["ts_ns"], s[m], a["start_ns"], a["end_ns"])
            counts.append(k)
        n = len(a["activity_id"])
        cols = [pa.array(a["activity_id"]), pa.array(np.max(counts, axis=0) if n else np.zeros(0, np.int64)),
                *(pa.array(means[m], from_pandas=True) for m in METRICS)]
        return pa.table([*_run_col(key, n), *cols], names=METRICS_SCHEMA.names)

    _publish(con, "_instance_metrics", [t for _, t in _map(both(), work)], METRICS_SCHEMA)


CORUNNER_SCHEMA = pa.schema([("run_id", pa.string()), ("device_id", pa.int32()), ("activity_id", pa.int64()),
                             ("own_dram_pct", pa.float64()), ("co_dram_pct", pa.float64()),
                             ("co_working_set_bytes", pa.float64())])


def _corunner_dram(con: duckdb.DuckDBPyConnection) -> None:
    sql = """SELECT run_id, device_id, a.activity_id, a.start_ns, a.end_ns, a.dram_pct::DOUBLE AS dram_pct,
                    a.working_set_bytes::DOUBLE AS working_set_bytes, o.overlap_ns
             FROM _activity_dram a JOIN _instance_overlap o USING (run_id, device_id, activity_id)"""

    def work(key, a):
        start, end, over = a["start_ns"], a["end_ns"], a["overlap_ns"]
        dur = end - start
        rate = np.ma.filled(a["dram_pct"], 0.0)
        ws_known = ~np.ma.getmaskarray(a["working_set_bytes"])
        ws = np.ma.filled(a["working_set_bytes"], 0.0)
        b = sweeps.Boundaries.of(start, end)  # one sort for the three integrals; each less the activity's own part
        co_rate = np.maximum(0.0, b.integral(rate) - rate * dur)
        co_ws = np.maximum(0.0, b.integral(ws) - ws * dur)
        profiled_others = b.integral(mask=ws_known) - ws_known * dur
        with np.errstate(invalid="ignore", divide="ignore"):
            co_dram = np.where(over > 0, co_rate / over, np.nan)
            co_set = np.where((over > 0) & (profiled_others > 0), co_ws / over, np.nan)
        n = len(start)
        cols = [pa.array(a["activity_id"]), pa.array(rate), pa.array(co_dram, from_pandas=True),
                pa.array(co_set, from_pandas=True)]
        return pa.table([*_run_col(key, n), *cols], names=CORUNNER_SCHEMA.names)

    _publish(con, "_corunner_dram", [t for _, t in _map(_grouped(con, sql), work)], CORUNNER_SCHEMA)


STAGES = {"_instance_overlap": _overlaps, "_instance_metrics": _metrics, "_corunner_dram": _corunner_dram}
