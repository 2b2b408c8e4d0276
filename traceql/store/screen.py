"""Odd rows of a normalized table, dropped at ingest and counted, never silently.

A profiler's export can hold rows no GPU produced as written: an activity whose end precedes its start or that has
no time at all (a record cut off when the collection stopped, a damaged file), at a time 2^62 ns or more from zero
(no clock gives it; its duration, or a sum over it, would not fit 64 bits), the same row twice (an export merged or
appended twice), an activity on a negative device id. Each such row would bend every sum downstream (a negative
duration shortens a union, a duplicate overlaps its own copy), so ingest drops it and counts it under a stable key
``<table>.<reason>``; the counts go to the run's ``repairs`` (run.json, the manifest and the ``runs`` table) and to
the ingest's warnings. Nothing here depends on which trace is read.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# tables of GPU activities: a row needs both times and a device
ACTIVITIES = ("kernels", "memcpy", "memset")
# tables of intervals with a start; an end may be missing where the table allows it (NVTX marks, open ranges)
INTERVALS = {"kernels": True, "memcpy": True, "memset": True, "runtime_api": True, "nvtx": False}
# tables where a row repeated exactly is a duplicated record, not two events (a second launch differs in its times)
DEDUPLICATED = ("kernels", "memcpy", "memset", "runtime_api")
FAR_NS = 1 << 62  # a time this far from zero or farther is no clock's (146 years of nanoseconds)

REASONS = {
    "no_time": "without a start or end time",
    "end_before_start": "ending before they start",
    "beyond_range": "at times no clock gives (lasting longer than 64-bit nanoseconds hold, or 2^62 ns, 146 years, or "
                    "more from the clock's zero)",
    "duplicate": "duplicated",
    "no_device": "on a negative or missing device id",
    "unknown_metric": "of a metric the export does not describe",
    "no_value": "without a time or value",
    "duplicate_metric": "repeating a metric at one GPU and time (the first value is kept)",
    "unnamed_metric": "of a metric without a name of its own",
}


def screen(table: str, data: pa.Table) -> tuple[pa.Table, dict[str, int]]:
    """``data`` without its odd rows, and how many of each kind were dropped (keys ``table.reason``)."""
    counts: dict[str, int] = {}
    if data.num_rows == 0 or table not in INTERVALS:
        return data, counts
    start, end = data.column("start_ns"), data.column("end_ns")
    odd = {"no_time": pc.is_null(start)}
    if INTERVALS[table]:
        odd["no_time"] = pc.or_(odd["no_time"], pc.is_null(end))
    odd["end_before_start"] = pc.fill_null(pc.less(end, start), False)
    # a time 2^62 ns or more from zero, either way: end - start would wrap around 64 bits past 2^63 - 1 (a start far
    # below zero), and a time plus another time or a duration (an offset, an end, a sum) would overflow in SQL. Any
    # difference or sum of two times within it fits 64 bits
    odd["beyond_range"] = pc.or_(_far(start), _far(end))
    if table in ACTIVITIES:
        odd["no_device"] = pc.fill_null(pc.less(data.column("device_id"), 0), True)
    keep = None
    for reason, mask in odd.items():  # a row is counted once, under its first reason
        fresh = mask if keep is None else pc.and_(mask, keep)
        if n := pc.sum(fresh).as_py():
            counts[f"{table}.{reason}"] = n
        keep = pc.invert(mask) if keep is None else pc.and_not(keep, mask)
    if counts:
        data = data.filter(keep)
    if table in DEDUPLICATED and data.num_rows > 1:
        data, dupes = _deduplicated(data)
        if dupes:
            counts[f"{table}.duplicate"] = dupes
    return data, counts


def _far(times: pa.ChunkedArray) -> pa.ChunkedArray:
    """Whether each time is 2^62 ns or more from zero (False where it is missing)."""
    return pc.fill_null(pc.or_(pc.greater_equal(times, FAR_NS), pc.less_equal(times, -FAR_NS)), False)


def _deduplicated(data: pa.Table) -> tuple[pa.Table, int]:
    """The first of every set of identical rows, in the original order, and how many were left out.

    Identical rows share their start and end, so only rows whose (start, end) pair occurs more than once (rare:
    two activities rarely begin and end on the same nanoseconds) are compared on every column."""
    start = np.asarray(pc.fill_null(data.column("start_ns"), np.iinfo(np.int64).min))
    end = np.asarray(pc.fill_null(data.column("end_ns"), np.iinfo(np.int64).min))
    order = np.lexsort((end, start))
    same = (start[order][1:] == start[order][:-1]) & (end[order][1:] == end[order][:-1])
    if not same.any():
        return data, 0
    candidate = np.zeros(data.num_rows, bool)
    candidate[order[1:][same]] = candidate[order[:-1][same]] = True
    rows = np.flatnonzero(candidate)
    some = data.take(rows)
    cols = [c for c in some.column_names if not pa.types.is_nested(some.schema.field(c).type)]
    indexed = some.select(cols).append_column("_row", pa.array(np.arange(len(rows), dtype=np.int64)))
    firsts = indexed.group_by(cols, use_threads=False).aggregate([("_row", "min")]).column("_row_min").to_numpy()
    dupes = len(rows) - len(firsts)
    if dupes == 0:
        return data, 0
    keep = ~candidate
    keep[rows[firsts]] = True
    return data.filter(pa.array(keep)), dupes


def describe(counts: dict[str, int]) -> str:
    """``counts`` in words: '3 kernels rows ending before they start, 2 memcpy rows duplicated'."""
    parts = []
    for key, n in sorted(counts.items()):
        table, _, reason = key.partition(".")
        unit = "sample" if table == "gpu_metrics" else "row"
        parts.append(f"{n:,} {table} {unit}{'' if n == 1 else 's'} {REASONS.get(reason, reason)}")
    return ", ".join(parts)
