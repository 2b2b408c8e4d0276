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

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import duck
from ..duck import usable_cpus
from ..queries_loader import keep_view, materialize, point_view
from . import sweeps

METRICS = ("sm_active_pct", "dram_pct", "gpc_clock_mhz", "nvlink_pct", "pcie_pct")


BATCH_ROWS = 1 << 20  # rows per Arrow batch read from DuckDB: the memory of the read, whatever the store's size
BUNDLE_ROWS = 1 << 16  # rows of small devices swept together in one task
APPEND_ROWS = 1 << 21  # rows of a result assembled and appended to its table at a time
INFLIGHT_ROWS = 1 << 22  # rows of devices read and not yet swept past which reading waits (while every thread has one)


Columns = dict[str, np.ndarray]


def _grouped(con: duckdb.DuckDBPyConnection, sql: str, order: str = "", by: str = "device_id") \
        -> Iterator[tuple[tuple[str, int], Columns]]:
    """The rows of ``sql`` (which has columns run_id and ``by``, a device or a thread) per (run, ``by``), in that
    order: one scan, streamed in batches; each group's columns as numpy arrays (numbers masked where NULL, text as
    objects), without run_id and ``by``. A batch is converted to numpy once and its groups are views into it, so a
    store of thousands of small devices costs one conversion per batch, not one per device."""
    reader = con.sql(f"SELECT * FROM ({sql}) ORDER BY run_id, {by}{', ' + order if order else ''}") \
        .to_arrow_reader(BATCH_ROWS)
    key, parts = None, []
    for batch in reader:
        run, dev = batch.column("run_id"), batch.column(by)
        n = batch.num_rows
        if n == 0:
            continue
        cols = _columns(batch, skip=("run_id", by))
        change = np.flatnonzero(np.asarray(pc.or_(pc.not_equal(run[1:], run[:-1]),
                                                  pc.not_equal(dev[1:], dev[:-1])), dtype=bool)) + 1
        starts = [0, *change.tolist()]
        runs, devs = run.take(starts).to_pylist(), dev.take(starts).to_pylist()
        for a, b, k in zip(starts, [*change.tolist(), n], zip(runs, devs, strict=True), strict=True):
            if k != key and parts:
                yield key, _joined(parts)
                parts = []
            key = k
            parts.append({c: v[a:b] for c, v in cols.items()})
    if parts:
        yield key, _joined(parts)


def _joined(parts: list[Columns]) -> Columns:
    """One group's columns from the pieces that consecutive batches hold."""
    if len(parts) == 1:
        return parts[0]
    return {c: (np.ma.concatenate if np.ma.isMaskedArray(v) else np.concatenate)([p[c] for p in parts])
            for c, v in parts[0].items()}


def _columns(table: pa.Table | pa.RecordBatch, skip: tuple[str, ...] = ("run_id", "device_id")) -> Columns:
    out = {}
    for name in table.column_names:
        if name in skip:
            continue
        col = table.column(name)
        if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_boolean(col.type)):
            out[name] = col.to_numpy(zero_copy_only=False)  # text: objects, None where NULL
        elif col.null_count:
            fill = 0.0 if pa.types.is_floating(col.type) else 0
            out[name] = np.ma.masked_array(pc.fill_null(col, fill).to_numpy(zero_copy_only=False),
                                           mask=col.is_null().to_numpy(zero_copy_only=False))
        else:
            out[name] = col.to_numpy(zero_copy_only=False)
    return out


def _publish(con: duckdb.DuckDBPyConnection, view: str, groups: Iterable[tuple[tuple[str, int], Columns]],
             schema: pa.Schema, nan_is_null: tuple[str, ...] = ()) -> None:
    """Store the result as the table that ``view`` now reads (the naming of ``queries_loader.materialize``).
    ``groups``: per (run, device), its columns (numpy, masked where NULL; ``nan_is_null``: NaN is NULL), appended
    with the run and device of each row as they come (:func:`_fill`)."""
    point_view(con, view, _fill(con, f"_materialized_{view}", groups, schema, nan_is_null))


def _fill(con: duckdb.DuckDBPyConnection, table: str, groups: Iterable[tuple[tuple[str, int], Columns]],
          schema: pa.Schema, nan_is_null: tuple[str, ...], compressed: bool = True) -> str:
    """A kept table (``duck.keep_pieces``) of ``groups``, assembled and appended in pieces of at least
    ``APPEND_ROWS`` rows as the sweeps finish them."""
    def pieces() -> Iterator[pa.Table]:
        piece: list[tuple[tuple[str, int], Columns]] = []
        rows = 0
        for key, cols in groups:
            piece.append((key, cols))
            rows += len(next(iter(cols.values()))) if cols else 0
            if rows >= APPEND_ROWS:
                yield _assemble(piece, schema, nan_is_null)
                piece, rows = [], 0
        if piece:
            yield _assemble(piece, schema, nan_is_null)

    return duck.keep_pieces(con, table, schema.empty_table(), pieces(), compressed)


def _assemble(groups: list[tuple[tuple[str, int], Columns]], schema: pa.Schema,
              nan_is_null: tuple[str, ...]) -> pa.Table:
    if not groups:
        return schema.empty_table()
    names = schema.names[2:]
    sizes = np.array([len(cols[names[0]]) for _, cols in groups], dtype=np.int64)
    runs = list(dict.fromkeys(k[0] for k, _ in groups))
    run_index = {r: i for i, r in enumerate(runs)}
    run = pa.DictionaryArray.from_arrays(
        pa.array(np.repeat(np.array([run_index[k[0]] for k, _ in groups], dtype=np.int32), sizes)), pa.array(runs))
    key = schema.field(1).type  # the device (or thread) of the groups
    dev = pa.array(np.repeat(np.array([k[1] for k, _ in groups], dtype=key.to_pandas_dtype()), sizes), type=key)
    arrays = []
    for c in names:
        parts = [cols[c] for _, cols in groups]
        masked = any(np.ma.isMaskedArray(p) for p in parts)
        v = (np.ma.concatenate if masked else np.concatenate)(parts)
        typ = schema.field(c).type
        if masked:
            arrays.append(pa.array(np.ma.getdata(v), type=typ, mask=np.ma.getmaskarray(v)))
        else:
            arrays.append(pa.array(v, type=typ, from_pandas=c in nan_is_null))
    return pa.table([run, dev, *arrays], names=schema.names)


def _map(groups: Iterator[tuple[tuple[str, int], Columns]], work: Callable[[tuple[str, int], Columns], Columns]) \
        -> Iterator[tuple[tuple[str, int], Columns]]:
    """Read the groups on the calling thread (one DuckDB connection), sweep them in parallel threads, a thread per
    usable CPU, and yield the results in the order of ``groups``; at most two tasks per thread wait for their turn,
    and no more than one per thread once they hold ``INFLIGHT_ROWS`` rows, so memory stays that of a few devices.
    Small groups are swept in bundles (one task per ``BUNDLE_ROWS`` rows), so that thousands of small devices are
    not a task each."""
    workers = usable_cpus()
    pending: list[tuple[int, Future]] = []  # (rows, task)
    bundle, rows = [], 0

    def run_bundle(items):
        return [(k, work(k, d)) for k, d in items]

    with ThreadPoolExecutor(workers) as pool:
        for key, data in groups:
            bundle.append((key, data))
            rows += len(next(iter(data.values()))) if data else 0
            if rows < BUNDLE_ROWS:
                continue
            pending.append((rows, pool.submit(run_bundle, bundle)))
            bundle, rows = [], 0
            while len(pending) > 2 * workers or \
                    (len(pending) > workers and sum(n for n, _ in pending) > INFLIGHT_ROWS):
                yield from pending.pop(0)[1].result()
        if bundle:
            pending.append((rows, pool.submit(run_bundle, bundle)))
        for _, f in pending:
            yield from f.result()


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
    unions: dict[tuple[str, int], Columns] = {}

    def work(key, a):
        sm_count = sm_counts.get(key)
        res = sweeps.overlap(a["start_ns"], a["end_ns"], a["cls"], np.ma.filled(a["sm_held"], 0), sm_count)
        n = len(a["activity_id"])
        unions[key] = {k: np.array([v], dtype=np.int64) for k, v in res.totals.items()}
        return {"activity_id": a["activity_id"], **{c: res.per_activity[c] for c in OVERLAP_SCHEMA.names[3:9]},
                "sm_count": np.ma.masked_array(np.full(n, sm_count or 0, dtype=np.int32),
                                               mask=np.full(n, sm_count is None))}

    keys = []  # the devices in the order of the result, for their unions

    def done():
        for key, cols in _map(_grouped(con, sql), work):
            keys.append(key)
            yield key, cols

    _publish(con, "_instance_overlap", done(), OVERLAP_SCHEMA)
    _publish(con, "_device_unions", [(k, unions[k]) for k in keys], UNIONS_SCHEMA)


def device_unions(con: duckdb.DuckDBPyConnection) -> None:
    """``_device_unions`` alone, from ``_union_intervals`` (the overlap numbers of ``traceql overlap``): no activity
    rows, no per-activity integrals."""
    def work(key, a):
        totals = sweeps.unions(a["start_ns"], a["end_ns"], a["cls"])
        return {k: np.array([v], dtype=np.int64) for k, v in totals.items()}

    sql = "SELECT run_id, device_id, start_ns, end_ns, cls FROM _union_intervals"
    _publish(con, "_device_unions", _map(_grouped(con, sql), work), UNIONS_SCHEMA)


METRICS_SCHEMA = pa.schema([("run_id", pa.string()), ("device_id", pa.int32()), ("activity_id", pa.int64()),
                            ("samples", pa.int64()), *((m, pa.float64()) for m in METRICS)])


def _metrics(con: duckdb.DuckDBPyConnection) -> None:
    materialize(con, ("_metric_wide",))
    # two ordered scans, the samples on a cursor of their own: one scan of both, padded with NULLs, held twice the
    # memory in the sort and in each device's arrays
    cur = con.cursor()
    samples = _grouped(cur, f"SELECT run_id, device_id, ts_ns, {', '.join(f'{m}::DOUBLE AS {m}' for m in METRICS)} "
                            "FROM _metric_wide", "ts_ns")
    activities = _grouped(con, "SELECT run_id, device_id, activity_id, start_ns, end_ns FROM _activity_rows",
                          "activity_id")

    def both() -> Iterator[tuple[tuple[str, int], Columns]]:
        """The devices with samples and activities (both scans go by run and device, NULL devices last)."""
        def order(k):
            return k[0], k[1] is None, k[1] or 0

        s_key, s = next(samples, (None, None))
        for key, a in activities:
            while s_key is not None and order(s_key) < order(key):
                s_key, s = next(samples, (None, None))
            if s_key == key and len(s["ts_ns"]) and len(a["activity_id"]):
                yield key, {"ts_ns": np.ma.getdata(s["ts_ns"]), **{m: np.ma.filled(s[m], np.nan) for m in METRICS},
                            **{c: np.ma.getdata(a[c]) for c in ("activity_id", "start_ns", "end_ns")}}

    def work(key, d):
        means, counts = {}, []
        for m in METRICS:
            means[m], k = sweeps.sample_means(d["ts_ns"], d[m], d["start_ns"], d["end_ns"])
            counts.append(k)
        n = len(d["activity_id"])
        return {"activity_id": d["activity_id"], "samples": np.max(counts, axis=0) if n else np.zeros(0, np.int64),
                **means}

    try:
        _publish(con, "_instance_metrics", _map(both(), work), METRICS_SCHEMA, nan_is_null=METRICS)
    finally:
        cur.close()


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
        return {"activity_id": a["activity_id"], "own_dram_pct": rate, "co_dram_pct": co_dram,
                "co_working_set_bytes": co_set}

    _publish(con, "_corunner_dram", _map(_grouped(con, sql), work), CORUNNER_SCHEMA,
             nan_is_null=("co_dram_pct", "co_working_set_bytes"))


def _enclosing(con: duckdb.DuckDBPyConnection, ranges: str) -> str:
    """Each launch's innermost range among the NVTX ranges of its thread that ``ranges`` (a
    condition on ``nvtx``) selects: its start (the latest start of the ranges around the launch), its text (that of
    the latest (start, text) among those with a text: SQL's ``arg_max`` passes over NULL texts), and the launch's
    signature and time, in a kept table (its name is returned). Launches with no range around them have no row."""
    sql = f"""SELECT run_id, global_tid, 0 AS part, start_ns AS a, end_ns AS b, NULL::UBIGINT AS sig, text
              FROM nvtx WHERE {ranges} AND start_ns IS NOT NULL AND end_ns IS NOT NULL AND global_tid IS NOT NULL
              UNION ALL
              SELECT r.run_id, r.global_tid, 1, r.start_ns, a.activity_id, a.sig, NULL
              FROM _activity_rows a JOIN runtime_api r
                ON r.run_id = a.run_id AND r.global_pid = a.global_pid AND r.correlation_id = a.correlation_id
              WHERE r.global_tid IS NOT NULL AND r.start_ns IS NOT NULL"""

    def work(key, d):
        n_ranges = int(np.searchsorted(d["part"], 1))  # ranges first (part 0), by start and text
        start, end = np.ma.getdata(d["a"][:n_ranges]), np.ma.getdata(d["b"][:n_ranges])
        text = d["text"][:n_ranges]
        t, act, sig = np.ma.getdata(d["a"][n_ranges:]), np.ma.getdata(d["b"][n_ranges:]), d["sig"][n_ranges:]
        inner = sweeps.innermost(start, end, t)
        named = np.flatnonzero(text != None)  # noqa: E711 (elementwise on objects)
        if len(named) == n_ranges:
            inner_text = inner
        elif len(named) == 0:
            inner_text = np.full(len(t), -1)
        else:
            found = sweeps.innermost(start[named], end[named], t)
            inner_text = np.where(found >= 0, named[np.maximum(found, 0)], -1)
        keep = inner >= 0
        step_text = np.where(inner_text >= 0, text[np.maximum(inner_text, 0)], None)[keep]
        return {"activity_id": act[keep], "step_start_ns": start[inner[keep]], "step_text": step_text,
                "sig": np.ma.getdata(sig)[keep], "t": t[keep]}

    groups = ((k, d) for k, d in _grouped(con, sql, "part, a, text", by="global_tid")
              if 0 < np.searchsorted(d["part"], 1) < len(d["part"]))
    # staged for the SQL over it and dropped: not worth compressing
    return _fill(con, "_enclosing", _map(groups, work), ENCLOSING_SCHEMA, (), compressed=False)


def _from_enclosing(con: duckdb.DuckDBPyConnection, view: str, ranges: str, select: str) -> None:
    """``view`` reads ``select`` over the launches' innermost ``ranges`` (:func:`_enclosing`, named ``_input``
    there), computed once."""
    staged = _enclosing(con, ranges)
    try:
        keep_view(con, view, f"WITH _input AS (SELECT * FROM {staged}) {select}")
    finally:
        con.execute(f"DROP TABLE IF EXISTS {staged}")


def _occurrence(con: duckdb.DuckDBPyConnection) -> None:
    """``_activity_occurrence``: each launch's innermost NVTX range on its thread (``sweeps.innermost``) and the
    launch's occurrence in that range instance (a window function over the result, in SQL)."""
    _from_enclosing(con, "_activity_occurrence", "event_type IN ('push_pop', 'start_end')", """
        SELECT run_id, activity_id, global_tid, step_start_ns, step_text,
               row_number() OVER (PARTITION BY run_id, global_tid, step_start_ns, sig ORDER BY t, activity_id) - 1
                   AS occurrence
        FROM _input""")


def _groups(con: duckdb.DuckDBPyConnection) -> None:
    """``_activity_groups`` when attribution groups by NVTX (``analysis.group_by_nvtx`` left the glob in
    ``_nvtx_glob``): each launch's innermost range of its thread whose text matches the glob."""
    asked = con.sql("SELECT count(*) FROM duckdb_tables() WHERE table_name = '_nvtx_glob'").fetchall()[0][0]
    if not asked:
        return  # the view stays the empty one of queries/
    _from_enclosing(con, "_activity_groups",
                    "event_type IN ('push_pop', 'start_end') AND text GLOB (SELECT pattern FROM _nvtx_glob)",
                    "SELECT run_id, activity_id, step_text AS nvtx FROM _input")


ENCLOSING_SCHEMA = pa.schema([("run_id", pa.string()), ("global_tid", pa.int64()), ("activity_id", pa.int64()),
                              ("step_start_ns", pa.int64()), ("step_text", pa.string()), ("sig", pa.uint64()),
                              ("t", pa.int64())])


STAGES = {"_instance_overlap": _overlaps, "_instance_metrics": _metrics, "_corunner_dram": _corunner_dram,
          "_activity_occurrence": _occurrence, "_activity_groups": _groups}
