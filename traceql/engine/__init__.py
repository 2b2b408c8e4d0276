"""The attribution's interval sweeps, run as exact integer numpy code and registered into DuckDB.

DuckDB stays the query layer: the engine reads its inputs from views of ``queries/`` and writes each result as a
table under the name of the view it replaces, so every view above it (and users' SQL) reads it unchanged.
Each (run, device) is swept on its own, the devices of a store in parallel threads (numpy releases the GIL in
its sorts and cumulative sums).

Replaced views, with their reference SQL kept in ``queries/`` (the same definitions, evaluated by DuckDB when
a connection is queried without ``traceql.attribution.prepare``; ``tests/test_engine.py`` compares the two):

- ``_activity_rows``: numbered as one sorted scan of ``_activity_list`` streams by, and kept in that order (by run
  and activity: each device's together, in time);
- ``_instance_sweeps``, in one pass per device over the activity rows in that order (:func:`_sweeps`): the exact
  overlap of each activity by each co-runner class and the co-runners' SM·ns, the GPU-metric means over it, its
  isolated DRAM rate and its co-runners', its launch context and the NVML sample at its midpoint. The pass writes
  each activity's row and what it gives it as one table, ``_instance_parts``, which ``_instance_facts`` derives its
  columns from, row by row; ``_instance_overlap``, ``_instance_metrics``, ``_activity_dram`` and ``_corunner_dram``
  are projections of it, and ``_device_unions`` (per device, the unions of compute, communication and both) is
  written beside it;
- ``_activity_occurrence`` and ``_activity_groups``: each launch's innermost NVTX range of the user's, open in its
  process or on its thread (``traceql.launch``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import chain
from typing import NamedTuple

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import duck, launch, stats
from ..duck import usable_cpus
from ..queries_loader import point_view
from . import sweeps

METRICS = ("sm_active_pct", "dram_pct", "gpc_clock_mhz", "nvlink_pct", "pcie_pct", "sm_issue_pct")
# the GPU metrics an activity's demand alone is measured by (_activity_dram, _solo_rates)
DEMAND = ("dram_pct", "sm_issue_pct")


BATCH_ROWS = 1 << 20  # rows per Arrow batch read from DuckDB: the memory of the read, whatever the store's size
BUNDLE_ROWS = 1 << 16  # rows of small devices swept together in one task
APPEND_ROWS = 1 << 18  # rows of a result assembled and appended to its table at a time
INFLIGHT_ROWS = 1 << 22  # rows of devices read and not yet swept past which reading waits (while every thread has one)
WINDOW_ROWS = 1 << 22  # activities of a device swept at a time (a device of more is swept in windows)
# under a memory cap, a window's activity per this many bytes of the cap: a window in flight holds about 1.2 KiB per
# activity, and a few are (benchmarks/attribute_bench.py, 10 M kernels under 2 GB: 128 k-activity windows peaked at
# 3.1 GiB in all, 256 k at 3.4 GiB; docs/performance.md)
CAPPED_WINDOW_BYTES = 1 << 14
MIN_WINDOW_ROWS = 1 << 14


Columns = dict[str, np.ndarray]


def _grouped(con: duckdb.DuckDBPyConnection, sql: str, order: str = "", by: str = "device_id",
             numbers: tuple[str, ...] | None = None, rows: bool = False, ordered: bool = False) \
        -> Iterator[tuple[tuple[str, int], Columns]]:
    """The rows of ``sql`` (which has columns run_id and ``by``, a device or a thread) per (run, ``by``), in that
    order: one scan, streamed in batches; each group's columns as numpy arrays (numbers masked where NULL, text as
    objects), without run_id and ``by``; only those of ``numbers`` if given, and with ``rows``, the group's rows
    as they came too (an Arrow table under ``"_rows"``). ``ordered``: ``sql`` reads a table kept in that order,
    which DuckDB returns as it is kept (its insertion order), so the scan is not sorted again; a group seen twice
    is an error. A batch is converted to numpy once and its groups are views into it, so a store of thousands of
    small devices costs one conversion per batch, not one per device."""
    key, parts = None, []
    for k, part in _pieces(con, sql, order, by, numbers, rows, ordered):
        if k != key and parts:
            yield key, _joined(parts)
            parts = []
        key = k
        parts.append(part)
    if parts:
        yield key, _joined(parts)


def _pieces(con: duckdb.DuckDBPyConnection, sql: str, order: str = "", by: str = "device_id",
            numbers: tuple[str, ...] | None = None, rows: bool = False, ordered: bool = False,
            batch_rows: int = 0) -> Iterator[tuple[tuple[str, int], Columns]]:
    """:func:`_grouped`'s groups in the pieces that the scan's batches (of ``batch_rows``, else ``BATCH_ROWS``)
    hold: a group read across batches comes as consecutive pieces of the same key."""
    query = f"SELECT * FROM ({sql})"
    if not ordered:
        query += f" ORDER BY run_id, {by}{', ' + order if order else ''}"
    reader = con.sql(query).to_arrow_reader(batch_rows or BATCH_ROWS)
    key, seen = None, set()
    for batch in reader:
        run, dev = batch.column("run_id"), batch.column(by)
        n = batch.num_rows
        if n == 0:
            continue
        cols = _columns(batch, skip=("run_id", by), only=numbers)
        table = pa.Table.from_batches([batch]) if rows else None
        change = np.flatnonzero(np.asarray(pc.or_(pc.not_equal(run[1:], run[:-1]),
                                                  pc.not_equal(dev[1:], dev[:-1])), dtype=bool)) + 1
        starts = [0, *change.tolist()]
        runs, devs = run.take(starts).to_pylist(), dev.take(starts).to_pylist()
        for a, b, k in zip(starts, [*change.tolist(), n], zip(runs, devs, strict=True), strict=True):
            if ordered and k != key:
                if k in seen:
                    raise RuntimeError(f"the rows of {sql!r} are not in the order they were kept in")
                seen.add(k)
            key = k
            part = {c: v[a:b] for c, v in cols.items()}
            if table is not None:
                part["_rows"] = table.slice(a, b - a)
            yield k, part


def _joined(parts: list[Columns]) -> Columns:
    """One group's columns from the pieces that consecutive batches hold."""
    if len(parts) == 1:
        return parts[0]
    return {c: pa.concat_tables([p[c] for p in parts]) if isinstance(v, pa.Table) else
            (np.ma.concatenate if any(np.ma.isMaskedArray(p[c]) for p in parts) else np.concatenate)(
                [p[c] for p in parts])
            for c, v in parts[0].items()}


def _columns(table: pa.Table | pa.RecordBatch, skip: tuple[str, ...] = ("run_id", "device_id"),
             only: tuple[str, ...] | None = None) -> Columns:
    out = {}
    for name in table.column_names:
        if name in skip or (only is not None and name not in only):
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
             schema: pa.Schema, nan_is_null: tuple[str, ...] = (), to_file: bool = False) -> None:
    """Store the result as the table that ``view`` now reads (the naming of ``queries_loader.materialize``).
    ``groups``: per (run, device), its columns (numpy, masked where NULL; ``nan_is_null``: NaN is NULL; text as
    Arrow arrays), appended with the run and device of each row as they come (:func:`_fill`)."""
    point_view(con, view, _fill(con, f"_materialized_{view}", groups, schema, nan_is_null, to_file))


def _fill(con: duckdb.DuckDBPyConnection, table: str, groups: Iterable[tuple[tuple[str, int], Columns]],
          schema: pa.Schema, nan_is_null: tuple[str, ...], to_file: bool = False) -> str:
    """A kept table (``duck.keep_pieces``) of ``groups``, or a file (``duck.keep_file``), assembled and appended in
    pieces of at least ``APPEND_ROWS`` rows as the sweeps finish them."""
    def pieces() -> Iterator[pa.Table]:
        piece: list[tuple[tuple[str, int], Columns]] = []
        rows = 0
        for key, cols in groups:
            n = _size(cols)
            for a in range(0, max(n, 1), APPEND_ROWS):  # a device larger than a piece goes in slices
                piece.append((key, _sliced(cols, a, min(n, a + APPEND_ROWS)) if n > APPEND_ROWS else cols))
                rows += min(n - a, APPEND_ROWS)
                if rows >= APPEND_ROWS:
                    yield _assemble(piece, schema, nan_is_null, chunked=to_file)
                    piece, rows = [], 0
        if piece:
            yield _assemble(piece, schema, nan_is_null, chunked=to_file)

    if to_file:
        return duck.keep_file(con, table, schema.empty_table(), pieces())
    return duck.keep_pieces(con, table, schema.empty_table(), pieces())


def _size(cols: Columns) -> int:
    """The rows of a group's columns."""
    first = next((v for v in cols.values() if v is not None), None)
    return 0 if first is None else first.num_rows if isinstance(first, pa.Table) else len(first)


def _sliced(cols: Columns, a: int, b: int) -> Columns:
    """Rows a to b of a group's columns (numpy, Arrow, or None: all NULL)."""
    return {c: None if v is None else v.slice(a, b - a) if isinstance(v, (pa.Table, pa.Array)) else v[a:b]
            for c, v in cols.items()}


def _assemble(groups: list[tuple[tuple[str, int], Columns]], schema: pa.Schema,
              nan_is_null: tuple[str, ...], chunked: bool = False) -> pa.Table:
    """One table of the groups' columns. ``chunked``: the columns passed through from the rows of a scan may stay in
    the chunks they came in (for a Parquet file, which writes them the same; a table kept in DuckDB scans each chunk
    on its own)."""
    if not groups:
        return schema.empty_table()
    names = schema.names[2:]
    # "_rows": the rows of a scan, as they came, whose columns go through unchanged
    rows = pa.concat_tables([cols["_rows"] for _, cols in groups]) if "_rows" in groups[0][1] else None
    sizes = np.array([_size(cols) for _, cols in groups], dtype=np.int64)
    runs = list(dict.fromkeys(k[0] for k, _ in groups))
    run_index = {r: i for i, r in enumerate(runs)}
    run = pa.DictionaryArray.from_arrays(
        pa.array(np.repeat(np.array([run_index[k[0]] for k, _ in groups], dtype=np.int32), sizes)), pa.array(runs))
    key = schema.field(1).type  # the device (or thread) of the groups
    dev = pa.array(np.repeat(np.array([k[1] for k, _ in groups], dtype=key.to_pandas_dtype()), sizes), type=key)
    arrays = []
    for c in names:
        typ = schema.field(c).type
        if c not in groups[0][1]:
            column = rows.column(c)
            if not chunked:
                column = column.combine_chunks()  # a chunk per device costs DuckDB a scan each
            arrays.append(column if column.type == typ else column.cast(typ))
            continue
        parts = [cols[c] for _, cols in groups]
        if all(p is None for p in parts):  # None: a group whose rows are all NULL
            arrays.append(pa.nulls(int(sizes.sum()), typ))
            continue
        if any(isinstance(p, pa.Array) for p in parts):  # text taken from the rows of another scan
            arrays.append(pa.concat_arrays([pa.nulls(n, typ) if p is None else p.cast(typ)
                                            for p, n in zip(parts, sizes.tolist(), strict=True)]))
            continue
        if any(p is None for p in parts):
            parts = [np.ma.masked_all(n, dtype=typ.to_pandas_dtype()) if p is None else p
                     for p, n in zip(parts, sizes.tolist(), strict=True)]
        masked = any(np.ma.isMaskedArray(p) for p in parts)
        v = (np.ma.concatenate if masked else np.concatenate)(parts)
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
            rows += _size(data)
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


SOLO_SCHEMA = pa.schema([("run_id", pa.string()), ("device_id", pa.int32()), ("sig", pa.uint64()),
                        ("dram_pct", pa.float64()), ("samples", pa.int64()), ("sm_issue_pct", pa.float64())])
UNIONS_SCHEMA = pa.schema([("run_id", pa.string()), ("device_id", pa.int32()), ("compute_ns", pa.int64()),
                          ("comm_ns", pa.int64()), ("overlap_ns", pa.int64())])
OVERLAP_COLUMNS = ("comm_overlap_ns", "compute_overlap_ns", "copy_overlap_ns", "overlap_ns", "corunner_sm_ns",
                   "comm_sm_ns", "exclusive_sm_ns", "exclusive_start_sm_ns", "slots_sm_ns", "slots_start_sm_ns")
# the columns of _instance_sweeps after its keys (run_id, device_id, activity_id)
SWEPT = pa.schema([
    *((c, pa.int64()) for c in OVERLAP_COLUMNS), ("sm_count", pa.int32()),
    ("samples", pa.int64()), *((m, pa.float64()) for m in METRICS),
    ("own_dram_pct", pa.float64()), ("working_set_bytes", pa.float64()), ("co_dram_pct", pa.float64()),
    ("co_kernel_dram_pct", pa.float64()), ("co_working_set_bytes", pa.float64()), ("own_sm_issue_pct", pa.float64()),
    ("co_sm_issue_pct", pa.float64()),
    ("step_start_ns", pa.int64()), ("step_text", pa.string()), ("occurrence", pa.int64()), ("nvtx", pa.string()),
    ("power_w", pa.float64()), ("nvml_sm_clock_mhz", pa.float64()), ("throttle_reasons", pa.int64()),
])
# NULL where NaN: the float columns whose SQL is NULL where nothing is measured or nothing overlaps
NAN_IS_NULL = (*METRICS, "working_set_bytes", "co_dram_pct", "co_kernel_dram_pct", "co_working_set_bytes",
               "own_sm_issue_pct", "co_sm_issue_pct")
# the views the pass replaces, each a projection of _instance_parts: (columns after run and device, condition)
PROJECTIONS = {
    "_instance_sweeps": (f"activity_id, {', '.join(SWEPT.names)}", ""),
    "_instance_overlap": (f"activity_id, {', '.join(OVERLAP_COLUMNS)}, sm_count", ""),
    "_instance_metrics": (f"activity_id, samples, {', '.join(METRICS)}", "samples IS NOT NULL"),
    "_activity_dram": ("activity_id, start_ns, end_ns, own_dram_pct AS dram_pct, working_set_bytes, "
                       "own_sm_issue_pct AS sm_issue_pct", ""),
    "_corunner_dram": ("activity_id, own_dram_pct, co_dram_pct, co_kernel_dram_pct, co_working_set_bytes, "
                       "co_sm_issue_pct", ""),
}


def device_unions(con: duckdb.DuckDBPyConnection) -> None:
    """``_device_unions`` alone, from ``_union_intervals`` (the overlap numbers of ``traceql overlap``): no activity
    rows, no per-activity integrals."""
    def work(key, a):
        totals = sweeps.unions(a["start_ns"], a["end_ns"], a["cls"])
        return {k: np.array([v], dtype=np.int64) for k, v in totals.items()}

    sql = "SELECT run_id, device_id, start_ns, end_ns, cls FROM _union_intervals"
    _publish(con, "_device_unions", _map(_grouped(con, sql), work), UNIONS_SCHEMA)


# the order that numbers a run's activities (_activity_rows' row_number)
ACTIVITY_ORDER = "device_id, start_ns, end_ns, activity, global_pid, correlation_id, sig"


def _activity_rows(con: duckdb.DuckDBPyConnection) -> None:
    """``_activity_rows`` kept in the order of its activities (run, activity), which is each device's rows together
    in time order: the order the sweeps read it in, with no sort. One sort of ``_activity_list``, numbered per run
    as it streams by: the reference SQL sorts twice (its window function, then the order it is kept in); at 10 M
    kernels this took 9.1-9.6 s and 4.2 GB against 10.4-10.6 s and 6.1 GB."""
    schema = con.sql("SELECT * FROM _activity_rows LIMIT 0").arrow().schema
    # kernels alone, each run's file kept by device and time (traceql.store.writer.KERNEL_ORDER): a scan as stored is
    # most often in this order already, which the stream checks as it goes; the sort is left out until it finds a
    # row out of order (then the table is begun again, sorted). At 10 M kernels the sort took 2.7 of 4.4 s
    if duck.keeps_order(con) and not con.sql("SELECT (SELECT count(*) FROM memcpy) + (SELECT count(*) FROM memset)") \
            .fetchall()[0][0]:
        threads = con.sql("SELECT current_setting('threads')").fetchall()[0][0]
        con.execute("SET threads = 1")  # a join's output keeps its input's order on one thread
        try:
            _number_activities(con, schema, "", checked=True)
            return
        except _OutOfOrder:
            pass
        finally:
            con.execute(f"SET threads = {int(threads)}")
    _number_activities(con, schema, f" ORDER BY run_id, {ACTIVITY_ORDER}", checked=False)


class _OutOfOrder(Exception):
    """A scan that was to be in the activities' order is not."""


# the columns of ACTIVITY_ORDER after the device and time, for kernels alone (whose activity is the same)
_ORDER_KEYS = ("device_id", "start_ns", "end_ns", "global_pid", "correlation_id", "sig")


def _in_order(batch: pa.RecordBatch, last: list) -> None:
    """Raise :class:`_OutOfOrder` unless ``batch`` continues ``last`` (the previous batch's last run and keys, updated
    here) in the order ``ORDER BY run_id, ACTIVITY_ORDER`` gives kernels (none of the keys NULL)."""
    if batch.num_rows == 0:
        return
    cols = [batch.column(c) for c in ("run_id", *_ORDER_KEYS)]
    if any(c.null_count for c in cols) or batch.column("activity").null_count or \
            pc.any(pc.not_equal(batch.column("activity"), "kernel")).as_py():
        raise _OutOfOrder
    run = cols[0]
    keys = [c.to_numpy(zero_copy_only=False) for c in cols[1:]]
    change = np.flatnonzero(np.asarray(pc.not_equal(run[1:], run[:-1]), dtype=bool)) + 1
    runs = run.take([0, *change.tolist()]).to_pylist()
    goes_on = bool(last) and runs[0] == last[0]  # the batch goes on with the previous one's run
    if last and not goes_on:
        runs.insert(0, last[0])
    if any(b <= a for a, b in zip(runs[:-1], runs[1:], strict=False)):  # a run's rows together, runs in order
        raise _OutOfOrder
    if goes_on:  # its first row after the previous batch's last
        keys = [np.r_[np.array([p], dtype=k.dtype), k] for p, k in zip(last[1:], keys, strict=True)]
        change = change + 1
    decided = np.zeros(max(len(keys[0]) - 1, 0), dtype=bool)
    decided[change - 1] = True  # a later run
    for k in keys:  # lexicographically: a row is before the next unless an earlier key decided it
        lo, hi = k[:-1], k[1:]
        if np.any((hi < lo) & ~decided):
            raise _OutOfOrder
        decided |= hi > lo
    last[:] = [run[-1].as_py(), *(k[-1] for k in keys)]


# rows of a row group of the activity rows' file: those of the batches DuckDB's sort returns
ROW_GROUP_ROWS = 122_880


def _number_activities(con: duckdb.DuckDBPyConnection, schema: pa.Schema, order: str, checked: bool) -> None:
    reader = con.sql(f"SELECT * FROM _activity_list{order}").to_arrow_reader(BATCH_ROWS)
    numbered: dict[str, int] = {}  # activities numbered so far, per run
    last: list = []  # the last row's run and keys, when checked

    def pieces() -> Iterator[pa.Table]:
        for batch in reader:
            if checked:
                _in_order(batch, last)
            run = batch.column("run_id").to_numpy(zero_copy_only=False)
            ids = np.arange(1, len(run) + 1, dtype=np.int64)
            for a, b in _runs_of(run):
                ids[a:b] += numbered.get(run[a], 0) - a
                numbered[run[a]] = numbered.get(run[a], 0) + b - a
            table = pa.Table.from_batches([batch]).append_column("activity_id", pa.array(ids)).select(schema.names)
            # the file's row groups as a sort returns them: the pass's scan of 1 M-row row groups held about 0.3-0.5
            # GiB more at 10 M kernels (DuckDB reads a row group whole)
            for a in range(0, table.num_rows, ROW_GROUP_ROWS):
                yield table.slice(a, ROW_GROUP_ROWS)

    point_view(con, "_activity_rows",
               duck.keep_file(con, "_materialized__activity_rows", schema.empty_table(), pieces()))


def _runs_of(keys: np.ndarray) -> list[tuple[int, int]]:
    """[a, b) of each run of equal consecutive ``keys``."""
    cut = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]).tolist() if len(keys) else []
    return list(zip(cut, [*cut[1:], len(keys)], strict=True))


class _Following:
    """The rows of a scan in the order of the activities (run, activity), handed out to the devices of the activity
    scan as it reaches them: a merge of two ordered scans, in place of a join on the keys."""

    def __init__(self, con: duckdb.DuckDBPyConnection, sql: str):
        self._reader = con.sql(f"SELECT * FROM ({sql}) ORDER BY run_id, activity_id").to_arrow_reader(BATCH_ROWS)
        self._segments: list[tuple[str, np.ndarray, pa.Table]] = []  # (run, activity ids, rows), one run each

    def _more(self) -> bool:
        for batch in self._reader:
            if batch.num_rows == 0:
                continue
            run = batch.column("run_id")
            change = np.flatnonzero(np.asarray(pc.not_equal(run[1:], run[:-1]), dtype=bool)) + 1
            starts = [0, *change.tolist()]
            ids = batch.column("activity_id").to_numpy(zero_copy_only=False)
            table = pa.Table.from_batches([batch])
            for a, b, r in zip(starts, [*change.tolist(), batch.num_rows], run.take(starts).to_pylist(), strict=True):
                self._segments.append((r, ids[a:b], table.slice(a, b - a)))
            return True
        return False

    def take(self, run: str, ids: np.ndarray) -> tuple[np.ndarray, pa.Table | None]:
        """For the activities ``ids`` (sorted, consecutive in the scan) of ``run``: the index of each one's row in
        the returned rows, or -1 where it has none."""
        pieces, found = [], []
        while True:
            if not self._segments and not self._more():
                break
            r, seg_ids, rows = self._segments[0]
            if r < run:
                self._segments.pop(0)
                continue
            if r > run:
                break
            j = int(np.searchsorted(seg_ids, ids[-1], side="right"))
            pieces.append(rows.slice(0, j))
            found.append(seg_ids[:j])
            if j < len(seg_ids):
                self._segments[0] = (r, seg_ids[j:], rows.slice(j))
                break
            self._segments.pop(0)
        index = np.full(len(ids), -1, dtype=np.int64)
        if not pieces:
            return index, None
        got = np.concatenate(found)
        at = np.minimum(np.searchsorted(ids, got), len(ids) - 1)
        hit = ids[at] == got
        index[at[hit]] = np.flatnonzero(hit)
        return index, pa.concat_tables(pieces)


class _Window(NamedTuple):
    """A window of a device's activities and the activities it needs beside it."""
    key: tuple[str, int]
    cols: Columns  # the context: activities of earlier windows still running, the window's own, and later ones
    own: slice  # the window's own activities in the context
    span: tuple[int, int | None] | None  # the window's time [lo, hi) (None: the whole device, in one window)
    rows: pa.Table | None  # the rows of its own activities, as they came

    def times(self) -> tuple[int, int]:
        """The time its samples are needed for: from its first start to its last end (a device in one window: all)."""
        if self.span is None:
            return _EARLIEST, _LATEST
        return self.span[0], int(np.ma.getdata(self.cols["end_ns"][self.own]).max())


def _windows(pieces: Iterator[tuple[tuple[str, int], Columns]], size: int) -> Iterator[_Window]:
    """Each device's activities (pieces of consecutive rows, by run and device, in time order) in windows of
    ``size`` activities. Beside its own activities, a window carries every activity of earlier windows still running
    at its first start and every later one that starts before its last end: all those that overlap one of its own,
    so each own activity's integrals are exact. A window's time is [its first start, the next window's first start):
    the device's timeline, cut into windows. A device of at most ``size`` activities is one window, alone."""
    key, buf, own0, first, rows = None, {}, 0, True, []

    def cut(final: bool) -> Iterator[_Window]:
        nonlocal buf, own0, first, rows
        while buf:
            start, end = np.ma.getdata(buf["start_ns"]), np.ma.getdata(buf["end_ns"])
            n = len(start)
            b = min(own0 + size, n)
            if b == n and not final:
                return  # a window not yet whole
            reach = b + int(np.searchsorted(start[b:], end[own0:b].max(initial=start[own0]), side="left"))
            if reach == n and not final:
                return  # later activities may still start within it
            last = b == n
            whole = first and last
            own_rows = None
            if rows:
                table = pa.concat_tables(rows) if len(rows) > 1 else rows[0]
                own_rows, rest = table.slice(0, b - own0), table.slice(b - own0)
                rows = [rest] if rest.num_rows else []
            yield _Window(key, buf if whole else {c: v[:reach] for c, v in buf.items()}, slice(own0, b),
                          None if whole else (int(start[own0]), None if last else int(start[b])), own_rows)
            first = False
            if last:
                buf, own0 = {}, 0
                return
            keep = np.r_[np.flatnonzero(end[:b] > start[b]), np.arange(b, n)]  # still running, and not swept
            buf = {c: v[keep] for c, v in buf.items()}
            own0 = len(keep) - (n - b)

    for k, part in pieces:
        if k != key:
            yield from cut(final=True)
            key, first = k, True
        if "_rows" in part:
            rows.append(part.pop("_rows"))
        buf = _joined([buf, part]) if buf else part
        yield from cut(final=False)
    yield from cut(final=True)


class _Series:
    """A scan of time series (by run and device, in time order), handed out to the windows of each device as they
    need them: the samples in a window's time and the last one before it. A device's samples are read as its
    windows reach them, and dropped once no later window can need them."""

    def __init__(self, pieces: Iterator[tuple[tuple[str, int], Columns]], time: str = "ts_ns"):
        self._pieces, self._time = pieces, time
        self._key, self._buf, self._ended = None, None, False  # the device buffered, its samples, all read
        self._next = next(self._pieces, None)

    @staticmethod
    def _order(k: tuple[str, int]) -> tuple:
        return k[0], k[1] is None, k[1] or 0  # NULL devices last, as DuckDB orders them

    def window(self, key: tuple[str, int], lo: int, hi: int) -> Columns | None:
        """``key``'s samples from the last at or before ``lo`` to the last at or before ``hi`` (empty if none);
        None if ``key`` has no samples. Windows of a device come in time order."""
        if key != self._key:
            self._key, self._buf, self._ended = key, None, False
            while self._next is not None and self._order(self._next[0]) < self._order(key):
                self._next = next(self._pieces, None)
            if self._next is None or self._next[0] != key:
                self._ended = True
                return None
        while not self._ended and (self._buf is None or self._buf[self._time][-1] <= hi):
            if self._next is None or self._next[0] != key:
                self._ended = True
                break
            part = self._next[1]
            self._buf = _joined([self._buf, part]) if self._buf is not None else part
            self._next = next(self._pieces, None)
        if self._buf is None:
            return None
        ts = np.ma.getdata(self._buf[self._time])
        p = max(int(np.searchsorted(ts, lo, side="right")) - 1, 0)
        q = int(np.searchsorted(ts, hi, side="right"))
        if p:
            self._buf = {c: v[p:] for c, v in self._buf.items()}
        return {c: v[:q - p] for c, v in self._buf.items()}


def _gather(values: np.ndarray | np.ma.MaskedArray, index: np.ndarray) -> np.ma.MaskedArray | None:
    """``values[index]``, masked where ``index`` is -1 (and where ``values`` is); None where every row is."""
    if not len(values) or index.max(initial=-1) < 0:
        return None
    got = np.ma.masked_array(np.ma.getdata(values)[np.maximum(index, 0)], mask=index < 0)
    if np.ma.isMaskedArray(values):
        got.mask |= np.ma.getmaskarray(values)[np.maximum(index, 0)]
    return got


def _text(rows: pa.Table | None, column: str, index: np.ndarray) -> pa.Array | None:
    if rows is None or index.max(initial=-1) < 0:
        return None
    return rows.column(column).combine_chunks().take(pa.array(index, mask=index < 0)).cast(pa.string())


def _sweeps(con: duckdb.DuckDBPyConnection) -> None:
    """``_instance_parts`` (each activity's row and ``_instance_sweeps``) and ``_device_unions``, in one pass per
    device over ``_activity_rows``, read in its order beside the GPU-metric samples, the launch contexts and the
    NVML samples:

    1. the overlap of each activity by each co-runner class and the SM·ns its co-runners held (``sweeps.overlap``);
    2. the GPU-metric means over it (``sweeps.sample_means``);
    3. its isolated DRAM rate: the median GPU-metric DRAM rate of its signature's instances that ran alone on the
       device, else of the samples taken while one of them ran alone for a stretch (``_solo_rates``), else its
       Nsight Compute profile's, else the copy's own bytes over its duration, else 0 (``_activity_dram``);
    4. its co-runners' isolated DRAM rate and working sets while they overlapped it (``_corunner_dram``);
    5. its launch context and the NVML sample at its midpoint.

    A device is swept in windows of at most :func:`window_rows` activities (:func:`_windows`), so that memory is
    that of a window, whatever the size of the device. The isolated DRAM rates of a device of several windows are
    medians over the whole device: they are taken first, in a pass of their own (:func:`_alone_medians`).

    Each replaced view now reads a projection of the result (``PROJECTIONS``).
    """
    size = window_rows()
    # per device: its SM count, DRAM bandwidth, and an SM's limits (CTAs, warps, registers, shared memory), each
    # limit the default where the device does not say
    devices, limits = {}, {}
    for r, d, s, b, *lim in con.sql("SELECT run_id, device_id, sm_count, mem_bandwidth_Bps, max_blocks_per_sm, "
                                    "max_warps_per_sm, max_regs_per_sm, max_smem_per_sm_bytes FROM devices").fetchall():
        devices[(r, d)] = (s, b)
        limits[(r, d)] = tuple(x if x is not None else dflt for x, dflt in zip(lim, sweeps.SM_LIMITS, strict=True))
    demand: dict[tuple[str, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for (r, d), g in _grouped(con, "SELECT run_id, device_id, sig, dram_pct::DOUBLE AS dram_pct, "
                                   "working_set_bytes::DOUBLE AS working_set_bytes FROM _ncu_demand", "sig"):
        demand[(r, d)] = (np.ma.getdata(g["sig"]), np.ma.filled(g["dram_pct"], np.nan),
                          np.ma.filled(g["working_set_bytes"], np.nan))
    dtod = np.array(sorted(r[0] for r in con.sql("SELECT sig FROM _signatures WHERE name LIKE '%DtoD%'").fetchall()),
                    dtype=np.uint64)
    power = {k: (np.ma.getdata(g["ts_ns"]), g["power_w"], g["sm_clock_mhz"], g["throttle_reasons"]) for k, g in
             _grouped(con, "SELECT run_id, device_id, ts_ns, power_w, sm_clock_mhz, throttle_reasons FROM power "
                           "WHERE ts_ns IS NOT NULL", "ts_ns")}
    # _metric_wide is read as it is (a projection of the stored wide GPU metrics), sorted by each scan
    ordered = duck.keeps_order(con)  # else sorted: the same order
    medians = _alone_medians(con, size, ordered)
    cursors = [con.cursor() for _ in range(3)]
    samples = _Series(_pieces(cursors[0], f"SELECT run_id, device_id, ts_ns, "
                                          f"{', '.join(f'{m}::DOUBLE AS {m}' for m in METRICS)} FROM _metric_wide",
                              "ts_ns"))
    occurrence = _Following(cursors[1], "SELECT run_id, activity_id, step_start_ns, step_text, occurrence "
                                        "FROM _activity_occurrence")
    groups = _Following(cursors[2], "SELECT run_id, activity_id, nvtx FROM _activity_groups")
    activity = con.sql("SELECT * FROM _activity_rows LIMIT 0").arrow().schema
    activities = _pieces(con, """SELECT *, CASE corunner_kind WHEN 'comm' THEN 0 WHEN 'compute' THEN 1 ELSE 2
                                            END::TINYINT AS _cls, activity = 'kernel' AS _kernel
                                 FROM _activity_rows""",
                         "activity_id", numbers=("activity_id", "start_ns", "end_ns", "sm_held", "sig", "bytes",
                                                 "ctas", "threads_per_block", "regs_per_thread",
                                                 "dynamic_smem_bytes", "static_smem_bytes", "launch_occupancy",
                                                 "_cls", "_kernel"),
                         rows=True, ordered=ordered, batch_rows=min(size, BATCH_ROWS))

    def inputs() -> Iterator[tuple[tuple[str, int], Columns]]:
        """Each window of activities with its samples, launch contexts and groups (every scan goes by run and
        device, or by run and activity, which is the same order)."""
        for w in _windows(activities, size):
            ids = np.ma.getdata(w.cols["activity_id"][w.own])
            yield w.key, {**w.cols, "_own": w.own, "_span": w.span, "_rows": w.rows,
                          "_samples": samples.window(w.key, *w.times()),
                          "_occurrence": occurrence.take(w.key[0], ids), "_groups": groups.take(w.key[0], ids)}

    def work(key, a):
        start, end = np.ma.getdata(a["start_ns"]), np.ma.getdata(a["end_ns"])
        if np.any(np.diff(np.ma.getdata(a["activity_id"])) <= 0):
            raise RuntimeError("the activity rows are not in the order they were kept in")
        cls, sig, own = np.ma.getdata(a["_cls"]), np.ma.getdata(a["sig"]), a["_own"]
        dur = end - start
        n = own.stop - own.start
        sm_count, bandwidth = devices.get(key, (None, None))
        smem = np.ma.filled(a["dynamic_smem_bytes"], 0) + np.ma.filled(a["static_smem_bytes"], 0)
        fit = sweeps.Fit.of(a["ctas"], a["threads_per_block"], a["regs_per_thread"], smem, a["launch_occupancy"],
                            sm_count, limits.get(key, sweeps.SM_LIMITS))
        res = sweeps.overlap(start, end, cls, np.ma.filled(a["sm_held"], 0), sm_count, a["_span"], fit)
        over = res.per_activity["overlap_ns"]
        out = {"_rows": a["_rows"], "_totals": res.totals}  # its row, as it came
        out.update({c: res.per_activity[c][own] for c in OVERLAP_COLUMNS})
        out["sm_count"] = np.ma.masked_array(np.full(n, sm_count or 0, dtype=np.int32),
                                             mask=np.full(n, sm_count is None))

        out.update(_metric_means(a["_samples"], start[own], end[own]))
        # a device in one window: its own activities are all there are, and their DRAM rates give the medians
        if a["_span"] is None:
            alone = {m: stats.group_medians(*_alone(sig, dur, over, out[m])) for m in DEMAND}
            solo = {m: _solo_medians(*_solo(res.boundaries, sig, own, a["_samples"], m)) for m in DEMAND}
        else:
            alone, solo = medians[key]
        out["_solo"] = solo
        rate, ws = _isolated_dram(a, sig, dur, alone["dram_pct"], solo["dram_pct"][:2], bandwidth, dtod,
                                  demand.get(key, (np.zeros(0, np.uint64), np.zeros(0), np.zeros(0))))
        out["own_dram_pct"], out["working_set_bytes"] = rate[own], ws[own]
        co_rate, co_ws = _corunner_demand(res.boundaries, dur, over, rate, ws)
        out["co_dram_pct"], out["co_working_set_bytes"] = co_rate[own], co_ws[own]
        # the same demand, of the co-running kernels alone (copy engines yield DRAM to the SMs' traffic)
        out["co_kernel_dram_pct"] = _corunner_rate(res.boundaries, dur, over,
                                                   np.where(np.ma.getdata(a["_kernel"]), rate, 0.0))[own]
        issue = _isolated_issue(a, sig, alone["sm_issue_pct"], solo["sm_issue_pct"][:2])
        out["own_sm_issue_pct"] = issue[own]
        out["co_sm_issue_pct"] = _corunner_issue(res.boundaries, dur, over, issue)[own]
        index, rows = a["_occurrence"]
        out["step_start_ns"] = _gather(_column(rows, "step_start_ns"), index)
        out["occurrence"] = _gather(_column(rows, "occurrence"), index)
        out["step_text"] = _text(rows, "step_text", index)
        index, rows = a["_groups"]
        out["nvtx"] = _text(rows, "nvtx", index)
        ts, watts, clock, throttle = power.get(key, (np.zeros(0, np.int64),) + (np.zeros(0),) * 3)
        # the last sample at or before the midpoint
        at = np.searchsorted(ts, (start[own] + end[own]) // 2, side="right") - 1
        out["power_w"], out["nvml_sm_clock_mhz"], out["throttle_reasons"] = (
            _gather(v, at) for v in (watts, clock, throttle))
        return out

    unions: dict[tuple[str, int], Columns] = {}
    solo_rates: dict[tuple[str, int], Columns] = {}

    def done():
        for key, cols in _map(inputs(), work):
            solo_rates[key] = _solo_table(cols.pop("_solo"))
            totals = cols.pop("_totals")
            if key in unions:  # a later window of the device
                totals = {k: v + int(unions[key][k][0]) for k, v in totals.items()}
            unions[key] = {k: np.array([v], dtype=np.int64) for k, v in totals.items()}
            yield key, cols

    # the activity rows and what the sweeps give each, in one table: a Parquet file, whose size DuckDB knows from its
    # footer (it plans the joins of the views above by it). In memory, the table took 4 GiB uncompressed at 10 M
    # kernels (compressing it took longer than computing it), and past a cap its appended rows spilled uncompressed:
    # at 100 M kernels, most of 50 GB spilled, and what ran out of memory under a 1.25 GB cap
    parts = pa.schema([*activity, *SWEPT])
    try:
        _publish(con, "_instance_parts", done(), parts, nan_is_null=NAN_IS_NULL, to_file=True)
    finally:
        for c in cursors:
            c.close()
    _publish(con, "_device_unions", list(unions.items()), UNIONS_SCHEMA)
    _publish(con, "_solo_rates", [(k, v) for k, v in solo_rates.items() if len(v["sig"])], SOLO_SCHEMA)
    # the activity rows are read from it from now on
    con.execute(f"CREATE OR REPLACE VIEW _activity_rows AS SELECT {', '.join(activity.names)} FROM _instance_parts")
    duck.drop_file(con, "_materialized__activity_rows")
    for view, (columns, where) in PROJECTIONS.items():
        con.execute(f'CREATE OR REPLACE VIEW "{view}" AS SELECT run_id, device_id, {columns} FROM _instance_parts'
                    + (f" WHERE {where}" if where else ""))


_EARLIEST, _LATEST = np.iinfo(np.int64).min, np.iinfo(np.int64).max


def window_rows() -> int:
    """The activities of a device swept at a time: ``WINDOW_ROWS``; when memory is capped (``TRACEQL_MEMORY_LIMIT``),
    one per ``CAPPED_WINDOW_BYTES`` of the cap, between ``MIN_WINDOW_ROWS`` and ``WINDOW_ROWS``."""
    if not duck.memory_limit():
        return WINDOW_ROWS
    cap = duck.memory_limit_bytes()
    return WINDOW_ROWS if cap is None else max(MIN_WINDOW_ROWS, min(WINDOW_ROWS, cap // CAPPED_WINDOW_BYTES))


def _alone(sig: np.ndarray, dur: np.ndarray, over: np.ndarray, dram: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The signatures and measured DRAM rates of the activities that ran alone on their device (and were measured)."""
    alone = (over == 0) & (dur > 0) & ~np.isnan(dram)
    return sig[alone], dram[alone]


def _solo(b: sweeps.Boundaries, sig: np.ndarray, own: slice, samples: Columns | None, metric: str) \
        -> tuple[np.ndarray, np.ndarray]:
    """The signatures and values of ``metric`` of the GPU-metric samples taken while one of the window's own
    activities ran with nothing else on the device (:func:`sweeps.solo_samples`; ``b``: the boundaries of the
    window's context). Such a stretch is whole in the window that owns the activity: every activity that overlaps it
    is there."""
    if samples is None or len(samples["ts_ns"]) < 3:
        return np.zeros(0, dtype=np.uint64), np.zeros(0)
    k, who = sweeps.solo_samples(b, np.ma.getdata(samples["ts_ns"]))
    mine = (who >= own.start) & (who < own.stop)
    value = np.ma.filled(samples[metric], np.nan)[k[mine]]
    measured = ~np.isnan(value)
    return sig[who[mine]][measured], value[measured]


def _solo_medians(sig: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per signature (sorted), the median of its solo samples and their count."""
    keys, medians = stats.group_medians(sig, value)
    return keys, medians, np.unique(sig, return_counts=True)[1].astype(np.int64)


def _solo_table(solo: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> Columns:
    """``_solo_rates``' columns of a device from each demand metric's :func:`_solo_medians`: a row per signature
    with a solo sample of either, its DRAM samples counted (0 where it has none)."""
    (dsig, dram, count), (isig, issue, _) = solo["dram_pct"], solo["sm_issue_pct"]
    sig = np.union1d(dsig, isig).astype(np.uint64)
    samples = np.zeros(len(sig), dtype=np.int64)
    samples[np.searchsorted(sig, dsig)] = count
    return {"sig": sig, "dram_pct": stats.lookup(dsig, dram, sig), "samples": samples,
            "sm_issue_pct": stats.lookup(isig, issue, sig)}


def _alone_medians(con: duckdb.DuckDBPyConnection, size: int, ordered: bool) \
        -> dict[tuple[str, int], tuple[dict, dict]]:
    """For each device of more than ``size`` activities (swept in several windows): per demand metric
    (``DEMAND``) and signature, the median of its instances that ran alone (sorted signatures, medians), and that of
    its solo samples (:func:`_solo_medians`), from a pass of its own over the same windows (the overlap with anything
    else, and the metric means)."""
    large = f"{duck.KEPT}._large_devices"  # a table the cursors see (they do not see temporary ones)
    con.execute(f"CREATE OR REPLACE TABLE {large} AS SELECT run_id, device_id FROM _activity_rows "
                f"GROUP BY ALL HAVING count(*) > {size}")
    if not con.sql(f"SELECT count(*) FROM {large}").fetchall()[0][0]:
        con.execute(f"DROP TABLE {large}")
        return {}
    cursors = [con.cursor() for _ in range(2)]
    on = "ON t.run_id = l.run_id AND t.device_id IS NOT DISTINCT FROM l.device_id"
    samples = _Series(_pieces(cursors[0], "SELECT run_id, device_id, ts_ns, "
                                          f"{', '.join(f'{m}::DOUBLE AS {m}' for m in DEMAND)} "
                                          f"FROM _metric_wide t SEMI JOIN {large} l {on}", "ts_ns"))
    keys = set(con.sql(f"SELECT run_id, device_id FROM {large}").fetchall())
    # the activity rows as kept (a join would not keep their order), the other devices' passed over
    activities = ((k, p) for k, p in _pieces(cursors[1], "SELECT run_id, device_id, activity_id, start_ns, end_ns, "
                                                          "sig FROM _activity_rows", "activity_id", ordered=ordered,
                                             batch_rows=min(size, BATCH_ROWS)) if k in keys)

    def inputs():
        for w in _windows(activities, size):
            yield w.key, {**w.cols, "_own": w.own, "_samples": samples.window(w.key, *w.times())}

    def work(key, a):
        start, end, own = np.ma.getdata(a["start_ns"]), np.ma.getdata(a["end_ns"]), a["_own"]
        b = sweeps.Boundaries.of(start, end)
        over = b.over(b.prefix(b.level() > 1))[own]
        s = a["_samples"]
        if s is None or not len(s["ts_ns"]):
            means = np.full((len(DEMAND), len(over)), np.nan)
        else:
            means = sweeps.sample_means(np.ma.getdata(s["ts_ns"]),
                                        np.stack([np.ma.filled(s[m], np.nan) for m in DEMAND]), start[own], end[own])[0]
        sig = np.ma.getdata(a["sig"])
        got = {}
        for i, m in enumerate(DEMAND):
            got.update(zip((f"sig {m}", m, f"solo_sig {m}", f"solo {m}"),
                           (*_alone(sig[own], (end - start)[own], over, means[i]), *_solo(b, sig, own, s, m)),
                           strict=True))
        return got

    medians: dict[tuple[str, int], tuple[dict, dict]] = {}
    key, found = None, []  # the device whose windows come, what they found

    def medians_of(parts: list[Columns]) -> tuple[dict, dict]:
        def joined(c):
            return np.concatenate([p[c] for p in parts])
        return ({m: stats.group_medians(joined(f"sig {m}"), joined(m)) for m in DEMAND},
                {m: _solo_medians(joined(f"solo_sig {m}"), joined(f"solo {m}")) for m in DEMAND})

    try:
        for k, got in _map(inputs(), work):
            if k != key and found:
                medians[key] = medians_of(found)  # a device's medians as soon as its windows are in
                found = []
            key = k
            found.append(got)
        if found:
            medians[key] = medians_of(found)
    finally:
        for c in cursors:
            c.close()
        con.execute(f"DROP TABLE {large}")
    return medians


def _metric_means(samples: Columns | None, start: np.ndarray, end: np.ndarray) -> Columns:
    """The GPU-metric means over each activity and the samples counted (NULL for a device without samples)."""
    n = len(start)
    if samples is None or not len(samples["ts_ns"]):  # no samples on the device, or none in a window of it
        return {"samples": None if samples is None else np.zeros(n, dtype=np.int64),
                **{m: np.full(n, np.nan) for m in METRICS}}
    values = np.stack([np.ma.filled(samples[m], np.nan) for m in METRICS])  # a row per metric
    means, counts = sweeps.sample_means(np.ma.getdata(samples["ts_ns"]), values, start, end)
    return {"samples": counts.max(axis=0), **{m: means[i] for i, m in enumerate(METRICS)}}


def _isolated_dram(a: Columns, sig: np.ndarray, dur: np.ndarray, medians: tuple[np.ndarray, np.ndarray],
                   solo: tuple[np.ndarray, np.ndarray], bandwidth: int | None, dtod: np.ndarray,
                   demand: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each activity's isolated DRAM rate (% of peak): the median measured rate of its signature's instances that ran
    alone on the device (``medians``: sorted signatures, medians), else the median of the samples taken while one of
    them ran alone for a stretch (``solo``, the same form), else its Nsight Compute profile's (``demand``: sorted
    signatures, rates, working sets), else a copy's or set's own bytes over its duration (twice for device-to-device
    copies), else 0; and its profiled working set (bytes; NaN where not profiled)."""
    own = stats.lookup(*medians, sig)
    ncu_sig, ncu_dram, ncu_ws = demand
    fallbacks = [stats.lookup(*solo, sig)] if len(solo[0]) else []
    fallbacks += [stats.lookup(ncu_sig, ncu_dram, sig)] if len(ncu_sig) else []
    copy = ~np.ma.getdata(a["_kernel"]) & (dur > 0)
    if bandwidth is not None and bandwidth > 0 and copy.any():
        estimate = np.full(len(sig), np.nan)
        moved = np.ma.filled(a["bytes"].astype(np.float64), np.nan)[copy]
        twice = np.isin(sig[copy], dtod) if len(dtod) else False
        estimate[copy] = 100.0 * moved * np.where(twice, 2, 1) / (dur[copy] * 1e-9) / bandwidth
        fallbacks.append(estimate)
    for fallback in (*fallbacks, 0.0):
        own = np.where(np.isnan(own), fallback, own)
    return own, stats.lookup(ncu_sig, ncu_ws, sig)


def _isolated_issue(a: Columns, sig: np.ndarray, medians: tuple[np.ndarray, np.ndarray],
                    solo: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Each activity's SM Issue alone (% of peak, averaged over every SM): the median of its signature's instances
    that ran alone, else of its solo samples; 0 for copies and sets (copy engines); NaN for a kernel with neither."""
    own = stats.lookup(*medians, sig)
    if len(solo[0]):
        own = np.where(np.isnan(own), stats.lookup(*solo, sig), own)
    return np.where(np.ma.getdata(a["_kernel"]), own, 0.0)


def _corunner_issue(b: sweeps.Boundaries, dur: np.ndarray, over: np.ndarray, own: np.ndarray) -> np.ndarray:
    """The co-runners' SM Issue alone while they overlapped each activity (NaN where nothing did, or where one of
    them has none known): integrals over the device's boundaries, each less the activity's own part."""
    unknown = np.isnan(own)
    known = np.where(unknown, 0.0, own)
    co = np.maximum(0.0, b.integral(known) - known * dur)
    unknown_others = b.integral(mask=unknown) - unknown * dur
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((over > 0) & (unknown_others == 0), co / over, np.nan)


def _corunner_demand(b: sweeps.Boundaries, dur: np.ndarray, over: np.ndarray, own: np.ndarray, ws: np.ndarray) \
        -> tuple[np.ndarray, np.ndarray]:
    """The co-runners' isolated DRAM rate while they overlapped each activity (NaN where nothing did), and the
    working sets of the profiled ones (NaN where none was profiled): integrals over the device's boundaries, each
    less the activity's own part."""
    known = ~np.isnan(ws)
    ws = np.where(known, ws, 0.0)
    co_ws = np.maximum(0.0, b.integral(ws) - ws * dur)
    profiled_others = b.integral(mask=known) - known * dur
    with np.errstate(invalid="ignore", divide="ignore"):
        return (_corunner_rate(b, dur, over, own),
                np.where((over > 0) & (profiled_others > 0), co_ws / over, np.nan))


def _corunner_rate(b: sweeps.Boundaries, dur: np.ndarray, over: np.ndarray, own: np.ndarray) -> np.ndarray:
    """The co-runners' summed rate ``own`` (each activity's, 0 for those left out) while they overlapped each
    activity (NaN where nothing did): an integral over the device's boundaries less the activity's own part."""
    co = np.maximum(0.0, b.integral(own) - own * dur)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(over > 0, co / over, np.nan)


def _column(rows: pa.Table | None, column: str) -> np.ndarray | np.ma.MaskedArray:
    if rows is None:
        return np.zeros(0, dtype=np.int64)
    return _columns(rows, skip=(), only=(column,))[column]


def _enclosing(con: duckdb.DuckDBPyConnection, view: str, ranges: str, occurrence: bool) -> str:
    """Each launch's innermost range among the user's NVTX ranges of its scope (``_launch_rule``: its process, or
    its thread; ranges of the default domain and of the domains the rule names) that ``ranges`` (a condition on
    ``nvtx``) selects: its start and end (those of the latest start of the ranges around the launch) and its text
    (that of the latest (start, text) among those with a text: SQL's ``arg_max`` passes over NULL texts); with
    ``occurrence``, the launch's occurrence in that range instance too (launches of the same signature before it, by
    launch time and activity). In a kept table named for ``view`` (its name is returned). Launches with no range
    around them have no row.

    A scope's ranges are held whole; its launches are read and swept in windows (:func:`window_rows`), and the
    launches of each range instance and signature counted so far are carried from one window to the next."""
    scope_col, user = launch.rule_sql(con)

    def scan(part: _LaunchScan | None) -> str:
        def only(alias: str) -> str:  # the threads of this scan
            if part is None:
                return ""
            quoted = part.run.replace("'", "''")
            return f"AND {alias}run_id = '{quoted}' AND {alias}{scope_col} BETWEEN {part.first} AND {part.last}"

        def times() -> str:  # the launch times of this scan
            if part is None:
                return ""
            return (f"{'' if part.after is None else f'AND r.start_ns >= {part.after}'} "
                    f"{'' if part.before is None else f'AND r.start_ns < {part.before}'}")

        # a thread's ranges come with its first scan
        later = "" if part is None or part.after is None else "AND false"
        return f"""SELECT run_id, {scope_col} AS scope_id, 0 AS part, start_ns AS a, end_ns AS b, NULL::UBIGINT AS sig,
                          text
                   FROM nvtx WHERE {ranges} AND {user} AND start_ns IS NOT NULL AND end_ns IS NOT NULL
                     AND {scope_col} IS NOT NULL {only("")} {later}
                   UNION ALL
                   SELECT r.run_id, r.{scope_col}, 1, r.start_ns, a.activity_id, a.sig, NULL
                   FROM _activity_rows a JOIN runtime_api r
                     ON r.run_id = a.run_id AND r.global_pid = a.global_pid AND r.correlation_id = a.correlation_id
                   WHERE r.{scope_col} IS NOT NULL AND r.start_ns IS NOT NULL {only("r.")} {times()}"""

    size = window_rows()

    def windows() -> Iterator[tuple[tuple[str, int], Columns]]:
        """Each thread's launches, a piece of the scan at a time, with the thread's ranges (ranges first: part 0, by
        start and text; then launches, by time and activity)."""
        key, found, ranged = None, [], None
        for k, d in chain.from_iterable(
                _pieces(con, scan(threads), "part, a, text, b", by="scope_id", batch_rows=min(size, BATCH_ROWS))
                for threads in _launch_scans(con, scope_col)):
            if k != key:
                key, found, ranged = k, [], None
            n_ranges = int(np.searchsorted(d["part"], 1))
            if n_ranges:
                found.append({c: d[c][:n_ranges] for c in ("a", "b", "text")})
            if n_ranges == len(d["part"]):
                continue
            if ranged is None:  # the thread's ranges are all in: index them once
                if not found:
                    ranged = {}
                else:
                    r = _joined(found)
                    start, end, text = np.ma.getdata(r["a"]), np.ma.getdata(r["b"]), r["text"]
                    named = np.flatnonzero(text != None)  # noqa: E711 (elementwise on objects)
                    heads = np.flatnonzero(np.r_[True, start[1:] != start[:-1]])  # the distinct starts
                    ranged = {"start": start, "end": end, "text": text, "back": sweeps.previous_greater(end),
                              "named": named, "named_back": sweeps.previous_greater(end[named]),
                              "starts": start[heads], "latest_end": np.maximum.reduceat(end, heads)}
            if ranged:
                yield key, {"t": np.ma.getdata(d["a"][n_ranges:]), "act": np.ma.getdata(d["b"][n_ranges:]),
                            "sig": np.ma.getdata(d["sig"][n_ranges:]), "_ranges": ranged}

    def work(key, d):
        r, t, act = d["_ranges"], d["t"], d["act"]
        start, end, text, named = r["start"], r["end"], r["text"], r["named"]
        inner = sweeps.innermost(start, end, t, r["back"])
        if len(named) == len(start):
            inner_text = inner
        elif len(named) == 0:
            inner_text = np.full(len(t), -1)
        else:
            found = sweeps.innermost(start[named], end[named], t, r["named_back"])
            inner_text = np.where(found >= 0, named[np.maximum(found, 0)], -1)
        keep = inner >= 0
        out = {"activity_id": act[keep], "step_start_ns": start[inner[keep]], "step_end_ns": end[inner[keep]],
               "step_text": np.where(inner_text >= 0, text[np.maximum(inner_text, 0)], None)[keep]}
        if occurrence:
            sig = d["sig"][keep]
            # a range instance is counted by its start, so its counts are kept until the latest end of the ranges
            # of that start (ranges that share a start but end apart are one key: the earliest end would drop
            # counts the others still need in a later window)
            until = r["latest_end"][np.searchsorted(r["starts"], out["step_start_ns"])]
            out["occurrence"], out["_counts"] = sweeps.occurrence_and_counts(
                out["step_start_ns"], sig, t[keep], out["activity_id"], until)
            out["_first"], out["_sig"] = (t[0] if len(t) else None), sig
        return out

    def counted() -> Iterator[tuple[tuple[str, int], Columns]]:
        """The occurrence within each window, plus the launches of the same range instance and signature in the
        thread's earlier windows (those of ranges that ended before the window's first launch are dropped)."""
        key, before = None, None
        for k, out in _map(windows(), work):
            if occurrence:
                counts, first, sig = out.pop("_counts"), out.pop("_first"), out.pop("_sig")
                if k != key:
                    key, before = k, counts
                else:
                    if first is not None:
                        before = tuple(v[before[3] >= first] for v in before)
                    out["occurrence"] = out["occurrence"] + sweeps.counts_before(before, out["step_start_ns"], sig)
                    before = sweeps.merge_counts(before, counts)
            yield k, out

    schema = ENCLOSING_SCHEMA if occurrence else ENCLOSING_SCHEMA.remove(ENCLOSING_SCHEMA.get_field_index("occurrence"))
    return _fill(con, f"_materialized_{view}", counted(), schema, ())


class _LaunchScan(NamedTuple):
    """A part of the launch contexts' scan: the consecutive threads ``first`` to ``last`` of ``run``; or one thread
    (``first == last``) from the launch time ``after`` (with its first part: None, which reads its ranges too) to
    ``before`` (None: to its end)."""
    run: str
    first: int
    last: int
    after: int | None = None
    before: int | None = None


def _launch_scans(con: duckdb.DuckDBPyConnection, key: str) -> list[_LaunchScan | None]:
    """The launch contexts' scan (a join of every launch with its API call, sorted by thread) cut into scans of at
    most one launch per ``LAUNCH_BYTES`` of a memory cap each: consecutive threads of a run, and a thread with more
    cut by launch time (at approximate quantiles of its API calls' times: any cut gives the same rows, a scan after
    another of the same thread going on where it stopped); one scan of every thread (None) without a cap or below it.
    Under a 2 GB cap, DuckDB ran out of memory in that join and sort for 30 M launches at once; under 1.5 GB, for the
    12.5 M launches of one thread."""
    cap = duck.memory_limit_bytes()
    if not cap:
        return [None]
    limit = max(1, cap // LAUNCH_BYTES)
    counts = con.sql(f"SELECT run_id, {key}, count(*) FROM runtime_api WHERE {key} IS NOT NULL "
                     "GROUP BY ALL ORDER BY ALL").fetchall()
    if sum(n for _, _, n in counts) <= limit:
        return [None]
    out: list[_LaunchScan | None] = []
    first, last, rows = None, None, 0
    for run, tid, n in [*counts, (None, None, 0)]:
        if first is not None and (run != first[0] or rows + n > limit):
            out.append(_LaunchScan(first[0], first[1], last))
            first, rows = None, 0
        if run is not None and n > limit:  # a thread alone, in slices of its launch times
            out.extend(_time_slices(con, run, key, tid, -(-n // limit)))
        elif run is not None:
            first = first or (run, tid)
            last, rows = tid, rows + n
    return out


def _time_slices(con: duckdb.DuckDBPyConnection, run: str, key: str, tid: int, parts: int) -> list[_LaunchScan]:
    """``parts`` scans of one thread's launches, cut at approximate quantiles of its API calls' times."""
    [(cuts,)] = con.execute("SELECT approx_quantile(start_ns, $1::FLOAT[]) FROM runtime_api "
                            f"WHERE run_id = $2 AND {key} = $3",
                            [[i / parts for i in range(1, parts)], run, tid]).fetchall()
    bounds = [None, *sorted({int(c) for c in cuts or () if c is not None}), None]
    return [_LaunchScan(run, tid, tid, a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


# under a memory cap, a launch per this many bytes of the cap in one scan of the launch contexts
# (benchmarks/attribute_bench.py under 2 GB: 10 M launches at once fitted, 30 M did not; under 1.5 GB, 12.5 M did not)
LAUNCH_BYTES = 1 << 8


def _occurrence(con: duckdb.DuckDBPyConnection) -> None:
    """``_activity_occurrence``: each launch's innermost NVTX range (``traceql.launch``; ``sweeps.innermost``) and the
    launch's occurrence in that range instance (``sweeps.occurrence``)."""
    kept = _enclosing(con, "_activity_occurrence", "event_type IN ('push_pop', 'start_end')", occurrence=True)
    con.execute("CREATE OR REPLACE VIEW _activity_occurrence AS SELECT run_id, activity_id, scope_id, "
                f"step_start_ns, step_text, occurrence FROM {kept}")


def _groups(con: duckdb.DuckDBPyConnection) -> None:
    """``_activity_groups`` when attribution groups by NVTX (``attribution.group_by_nvtx`` left the glob in
    ``_nvtx_glob``): each launch's innermost range (``traceql.launch``) whose text matches the glob."""
    asked = con.sql("SELECT count(*) FROM duckdb_tables() WHERE table_name = '_nvtx_glob'").fetchall()[0][0]
    if not asked:
        return  # the view stays the empty one of queries/
    kept = _enclosing(con, "_activity_groups",
                      "event_type IN ('push_pop', 'start_end') AND text GLOB (SELECT pattern FROM _nvtx_glob)",
                      occurrence=False)
    con.execute("CREATE OR REPLACE VIEW _activity_groups AS SELECT run_id, activity_id, step_text AS nvtx, "
                f"step_start_ns AS nvtx_start_ns, step_end_ns AS nvtx_end_ns FROM {kept}")


ENCLOSING_SCHEMA = pa.schema([("run_id", pa.string()), ("scope_id", pa.int64()), ("activity_id", pa.int64()),
                              ("step_start_ns", pa.int64()), ("step_end_ns", pa.int64()), ("step_text", pa.string()),
                              ("occurrence", pa.int64())])


STAGES = {"_activity_rows": _activity_rows, "_activity_occurrence": _occurrence, "_activity_groups": _groups,
          "_instance_sweeps": _sweeps}
