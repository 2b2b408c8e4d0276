"""GPU metrics stored wide: one row per GPU and sample time, one column per metric.

nsys writes a sample as one row per metric (``GPU_METRICS``: time, GPU, metric id, value): about 30 rows per sample
on an H100 or H200, each repeating the time and the GPU. The store keeps a sample as one row instead: ``run_id``,
``device_id``, ``ts_ns``, then a ``DOUBLE`` column per metric, named as nsys names it (``SMs Active [Throughput
%]``). A metric a sample lacks is NULL there. The set of metrics depends on the GPU and the nsys version, so the
columns of ``gpu_metrics.parquet`` differ between runs; every other table's are fixed. Readers get both forms: the
view ``gpu_metrics_wide`` (every run's file, columns by name) and the long view ``gpu_metrics`` (one row per sample
and metric, as before: the wide rows unpivoted, NULLs left out).

The rows come long, in the export's order, and are turned wide as they stream (:class:`Widener`): a batch's rows are
grouped by (GPU, time), and each GPU's last sample waits for the next batch, which may hold more of its metrics. A
GPU whose sample times go back (an export not in time order) makes the file be sorted and merged once written
(:func:`write_wide`), so that a file always holds one row per GPU and time, in time order per GPU. Two values of one
metric at one GPU and time cannot both be stored: the first is kept, and the others counted
(``gpu_metrics.duplicate_metric`` in the run's repairs).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import schema

KEYS = ("device_id", "ts_ns")
TABLE = "gpu_metrics"
# values (rows x columns) of wide rows held before they are written as a row group
GROUP_VALUES = 1 << 22


def metric_names(names: Iterable[str | None]) -> list[str]:
    """The metric columns for ``names``: distinct, sorted, not NULL and not a key column's name."""
    return sorted({n for n in names if n is not None and n not in schema.TABLES[TABLE].names})


def wide_schema(names: Sequence[str]) -> pa.Schema:
    """The schema of a wide GPU-metrics file with these metric columns (run_id dictionary-encoded, as written)."""
    keys = [pa.field("run_id", pa.dictionary(pa.int32(), pa.string())), *(f for f in schema.TABLES[TABLE]
                                                                          if f.name != "run_id")]
    return pa.schema([*keys, *(pa.field(n, pa.float64()) for n in names)])


class Widener:
    """Long GPU-metric rows (``device_id``, ``ts_ns``, ``metric``, ``value``) in, wide rows out, batch by batch.

    ``feed`` returns the wide rows of the samples complete so far; ``flush`` the rest. ``dropped`` counts what
    could not be stored by reason (``duplicate_metric``; ``unnamed_metric``: a metric with no name, or named as a
    key column); ``ordered`` stays true while every GPU's sample times only go forward, so that no (GPU, time) has
    been written twice."""

    def __init__(self, names: Sequence[str]):
        self.names = list(names)
        self._lookup = pa.array(self.names, pa.string())
        # each GPU's last sample of the last batch (device, time, metric code, value, valid), waiting for the next
        self._held: tuple[np.ndarray, ...] | None = None
        self._last: dict[int, int] = {}  # per GPU, the last sample time written
        self.ordered = True
        self.dropped = {"duplicate_metric": 0, "unnamed_metric": 0}

    def _columns(self, batch: pa.RecordBatch | pa.Table) -> tuple[np.ndarray, ...]:
        metric = batch.column("metric")
        if isinstance(metric, pa.ChunkedArray):
            metric = metric.combine_chunks()
        if pa.types.is_dictionary(metric.type):  # a code per distinct name, then per row
            code = pc.take(pc.index_in(metric.dictionary, self._lookup), metric.indices)
        else:
            code = pc.index_in(metric, self._lookup)
        dev, ts, value = (batch.column(c) for c in ("device_id", "ts_ns", "value"))
        keep = pc.and_(pc.is_valid(code), pc.and_(pc.is_valid(dev), pc.is_valid(ts)))
        if (dropped := len(keep) - (pc.sum(keep).as_py() or 0)):
            self.dropped["unnamed_metric"] += dropped
            code, dev, ts, value = (pc.filter(c, keep) for c in (code, dev, ts, value))
        return (np.asarray(dev.cast(pa.int32())), np.asarray(ts.cast(pa.int64())),
                np.asarray(code.cast(pa.int32())), pc.fill_null(value.cast(pa.float64()), np.nan).to_numpy(),
                np.asarray(pc.is_valid(value)))

    def feed(self, batch: pa.RecordBatch | pa.Table) -> pa.Table | None:
        cols = self._columns(batch)
        if self._held is not None:
            cols = tuple(np.concatenate(pair) for pair in zip(self._held, cols, strict=True))
            self._held = None
        return self._wide(cols, last=False)

    def flush(self) -> pa.Table | None:
        held, self._held = self._held, None
        return None if held is None else self._wide(held, last=True)

    def _wide(self, cols: tuple[np.ndarray, ...], last: bool) -> pa.Table | None:
        dev, ts, code, value, valid = cols
        if not len(dev):
            return None
        change = np.empty(len(dev), bool)
        change[0] = True
        np.not_equal(dev[1:], dev[:-1], out=change[1:])
        change[1:] |= ts[1:] != ts[:-1]
        starts = np.flatnonzero(change)
        # each (GPU, time) one run of rows, in time order per GPU? (the export's order, as nsys writes it) else sort
        by_dev = np.argsort(dev[starts], kind="stable")
        d, t = dev[starts][by_dev], ts[starts][by_dev]
        if np.any((d[1:] == d[:-1]) & (t[1:] <= t[:-1])):
            order = np.lexsort((ts, dev))
            dev, ts, code, value, valid = (c[order] for c in (dev, ts, code, value, valid))
            change[1:] = (dev[1:] != dev[:-1]) | (ts[1:] != ts[:-1])
            starts = np.flatnonzero(change)
        sample = np.cumsum(change) - 1  # each row's wide row
        n = len(starts)
        if not last:  # each GPU's last sample may go on in the next batch: held back until then
            final = np.zeros(n, bool)
            final[_last_of_each(dev[starts])] = True
            hold = final[sample]
            self._held = tuple(c[hold] for c in (dev, ts, code, value, valid))
            dev, ts, code, value, valid = (c[~hold] for c in (dev, ts, code, value, valid))
            sample = (np.cumsum(~final) - 1)[sample[~hold]]  # the samples left, numbered again
            n = n - int(final.sum())
            if not n:
                return None
            starts = np.flatnonzero(np.r_[True, sample[1:] != sample[:-1]])
        sdev, sts = dev[starts], ts[starts]
        for g in np.unique(sdev):
            first = sts[sdev == g][0]
            if first <= self._last.get(int(g), np.iinfo(np.int64).min):
                self.ordered = False
            self._last[int(g)] = int(sts[sdev == g][-1])
        k = len(self.names)
        flat = code.astype(np.int64) * n + sample  # column-major: a metric's values together
        counts = np.bincount(flat, minlength=k * n)
        self.dropped["duplicate_metric"] += int(np.maximum(counts - 1, 0).sum())
        values = np.zeros(k * n)
        present = np.zeros(k * n, bool)
        values[flat[::-1]] = value[::-1]  # where a (sample, metric) comes twice, the first value is kept
        present[flat[::-1]] = valid[::-1]
        values, present = values.reshape(k, n), present.reshape(k, n)
        arrays = [pa.array(sdev, pa.int32()), pa.array(sts, pa.int64()),
                  *(pa.array(values[j], pa.float64(), mask=~present[j]) for j in range(k))]
        return pa.table(arrays, names=[*KEYS, *self.names])


def _last_of_each(keys: np.ndarray) -> np.ndarray:
    """Positions of the last occurrence of each distinct value of ``keys``."""
    rev = keys[::-1]
    _, first_in_rev = np.unique(rev, return_index=True)
    return len(keys) - 1 - first_in_rev


def widen(long: pa.Table, names: Sequence[str] | None = None) -> tuple[pa.Table, dict[str, int]]:
    """A whole long table of GPU metrics as wide rows (keys and metric columns, no run_id), and what was dropped.
    ``names``: the metric columns (by default the table's metric names)."""
    names = metric_names(long.column("metric").unique().to_pylist()) if names is None else names
    w = Widener(names)
    parts = [t for t in (w.feed(long), w.flush()) if t is not None]
    return (pa.concat_tables(parts) if parts else wide_schema(names).remove(0).empty_table()), w.dropped


def write_wide(batches: Iterable[pa.RecordBatch | pa.Table] | None, names: Sequence[str], run_id: str,
               path: Path) -> tuple[int, dict[str, int]]:
    """Write long GPU-metric ``batches`` as the wide file ``path`` of run ``run_id``, streamed; the wide rows written
    and the values dropped by reason (:class:`Widener`)."""
    names = list(names)
    target = wide_schema(names)
    w = Widener(names)
    rows = 0
    run_ids = pa.array([run_id], pa.string())
    with pq.ParquetWriter(path, target, compression="zstd", store_schema=False, use_dictionary=["run_id"],
                          write_statistics=list(KEYS)) as out:
        held: list[pa.Table] = []

        def write(final: bool = False) -> None:
            if held and (final or sum(t.num_rows for t in held) * (len(names) + 3) >= GROUP_VALUES):
                table = pa.concat_tables(held)
                run = pa.DictionaryArray.from_arrays(pa.repeat(pa.scalar(0, pa.int32()), table.num_rows), run_ids)
                out.write_table(pa.Table.from_arrays([run, *table.columns], schema=target), row_group_size=1 << 30)
                held.clear()

        for batch in [*(batches or ()), None]:
            wide = w.flush() if batch is None else w.feed(batch) if batch.num_rows else None
            if wide is not None and wide.num_rows:
                held.append(wide)
                rows += wide.num_rows
            write(final=batch is None)
        out.add_key_value_metadata(schema.metadata(TABLE))
    if not w.ordered:
        rows = _merge(path, names, w.dropped)
    return rows, w.dropped


def _merge(path: Path, names: Sequence[str], dropped: dict[str, int]) -> int:
    """Rewrite the wide file ``path`` with one row per GPU and time, in time order per GPU (its rows out of order:
    a sample written in two rows); the rows left. DuckDB sorts, within its memory limit."""
    from .. import duck

    con = duck.connect()
    src = "'" + str(path).replace("'", "''") + "'"
    cols = [duck.identifier(n) for n in names]
    dup = " + ".join(f"greatest(count({c}) - 1, 0)" for c in cols) or "0"
    select = ", ".join(f"any_value({c}) AS {c}" for c in cols)
    tmp = path.with_name(f".{path.name}.merging")
    try:
        with pq.ParquetWriter(tmp, wide_schema(names), compression="zstd", store_schema=False,
                              use_dictionary=["run_id"], write_statistics=list(KEYS)) as out:
            [(extra,)] = con.sql(f"SELECT coalesce(sum(d), 0) FROM (SELECT {dup} AS d FROM read_parquet({src}) "
                                 "GROUP BY run_id, device_id, ts_ns)").fetchall()
            dropped["duplicate_metric"] += int(extra)
            reader = con.sql(f"SELECT run_id, device_id, ts_ns{', ' if cols else ''}{select} FROM read_parquet({src}) "
                             "GROUP BY run_id, device_id, ts_ns ORDER BY device_id, ts_ns").to_arrow_reader(1 << 18)
            rows = 0
            for b in reader:
                out.write_table(pa.Table.from_batches([b]).cast(wide_schema(names)), row_group_size=1 << 30)
                rows += b.num_rows
            out.add_key_value_metadata(schema.metadata(TABLE))
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        con.close()
    os.replace(tmp, path)
    return rows


def is_long(path: Path) -> bool:
    """Whether the GPU-metrics file ``path`` is of a store layout before 4 (one row per sample and metric)."""
    return "metric" in pq.read_schema(path).names and "value" in pq.read_schema(path).names
