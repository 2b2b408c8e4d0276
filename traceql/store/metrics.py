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

import itertools
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
        # each GPU's last sample of the last batch, waiting for the next (which may hold more of its metrics)
        self._held: _Samples | None = None
        self._last: dict[int, int] = {}  # per GPU, the last sample time written
        self.ordered = True
        self.dropped = {"duplicate_metric": 0, "unnamed_metric": 0}

    def _columns(self, batch: pa.RecordBatch | pa.Table) -> tuple[np.ndarray, ...]:
        """The batch's device, time, metric column (-1: none) and value, and where the value is present (None:
        everywhere), as numpy arrays."""
        metric = batch.column("metric")
        if isinstance(metric, pa.ChunkedArray):
            metric = metric.combine_chunks()
        if pa.types.is_dictionary(metric.type):  # a code per distinct name, then per row
            lut = np.asarray(pc.index_in(metric.dictionary, self._lookup).fill_null(-1), np.int64)
            code = lut[np.asarray(metric.indices.fill_null(0))] if len(lut) else np.full(len(metric), -1)
            if metric.indices.null_count:
                code[np.asarray(metric.indices.is_null())] = -1
        else:
            code = np.asarray(pc.index_in(metric, self._lookup).fill_null(-1), np.int64)
        dev, ts, value = (batch.column(c) for c in ("device_id", "ts_ns", "value"))
        dev, ts, value = (c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in (dev, ts, value))
        valid = None if not value.null_count else np.asarray(value.is_valid())
        value = np.asarray((value.fill_null(np.nan) if value.null_count else value).cast(pa.float64()))
        keep = code >= 0
        if dev.null_count or ts.null_count:
            keep &= np.asarray(dev.is_valid()) & np.asarray(ts.is_valid())
        dev, ts = (np.asarray((c.fill_null(0) if c.null_count else c).cast(t))
                   for c, t in ((dev, pa.int32()), (ts, pa.int64())))
        if not keep.all():
            self.dropped["unnamed_metric"] += int(len(keep) - keep.sum())
            dev, ts, code, value = dev[keep], ts[keep], code[keep], value[keep]
            valid = None if valid is None else valid[keep]
        return dev, ts, code, value, valid

    def feed(self, batch: pa.RecordBatch | pa.Table) -> pa.Table | None:
        return _table(self.feed_samples(batch), self.names)

    def flush(self) -> pa.Table | None:
        return _table(self.flush_samples(), self.names)

    def feed_samples(self, batch: pa.RecordBatch | pa.Table) -> _Samples | None:
        """:meth:`feed`'s samples as numpy arrays (made a table once per row group by :func:`write_wide`)."""
        return self._emit(self._samples(*self._columns(batch)), last=False)

    def flush_samples(self) -> _Samples | None:
        return self._emit(None, last=True)

    def _samples(self, dev, ts, code, value, valid) -> _Samples | None:
        """The batch's rows as samples: one per (GPU, time), in time order per GPU."""
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
            dev, ts, code, value = dev[order], ts[order], code[order], value[order]
            valid = None if valid is None else valid[order]
            change[1:] = (dev[1:] != dev[:-1]) | (ts[1:] != ts[:-1])
            starts = np.flatnonzero(change)
        sample = np.cumsum(change) - 1  # each row's sample
        n, k = len(starts), len(self.names)
        flat = code * n + sample  # column-major: a metric's values together
        counts = np.bincount(flat, minlength=k * n)
        values = np.zeros(k * n)
        present = counts > 0
        if counts.max() > 1:  # where a (sample, metric) comes twice, the first value is kept
            self.dropped["duplicate_metric"] += int((counts[present] - 1).sum())
            flat, value = flat[::-1], value[::-1]
            valid = None if valid is None else valid[::-1]
        values[flat] = value
        if valid is not None:  # a value given as NULL is absent
            present = np.zeros(k * n, bool)
            present[flat] = valid
        return _Samples(dev[starts], ts[starts], values.reshape(k, n), present.reshape(k, n))

    def _emit(self, batch: _Samples | None, last: bool) -> _Samples | None:
        """The wide rows to write now: the samples held from the last batch (those this batch goes on merged into
        its own), then this batch's, each GPU's last held back unless ``last``."""
        held, self._held = self._held, None
        if held is not None and batch is not None:
            held = batch.merge_first(held, self.dropped)
        out = [s for s in (held, batch) if s is not None]
        if not out:
            return None
        samples = out[0] if len(out) == 1 else _Samples.concat(out)
        if not last:
            final = np.zeros(len(samples.dev), bool)
            final[_last_of_each(samples.dev)] = True
            self._held, samples = samples.take(final), samples.take(~final)
        if not len(samples.dev):
            return None
        for g in np.unique(samples.dev):
            times = samples.ts[samples.dev == g]
            if times[0] <= self._last.get(int(g), np.iinfo(np.int64).min):
                self.ordered = False
            self._last[int(g)] = int(times[-1])
        return samples


class _Samples:
    """Wide samples: device and time per sample, and a (metric, sample) matrix of values and of their presence."""

    def __init__(self, dev: np.ndarray, ts: np.ndarray, values: np.ndarray, present: np.ndarray):
        self.dev, self.ts, self.values, self.present = dev, ts, values, present

    def take(self, which: np.ndarray) -> _Samples:
        return _Samples(self.dev[which], self.ts[which], self.values[:, which], self.present[:, which])

    @staticmethod
    def concat(parts: Sequence[_Samples]) -> _Samples:
        return _Samples(*(np.concatenate([getattr(p, a) for p in parts], axis=-1)
                          for a in ("dev", "ts", "values", "present")))

    def merge_first(self, held: _Samples, dropped: dict[str, int]) -> _Samples | None:
        """Merge each ``held`` sample into this batch's first sample of its GPU where they are the same (GPU, time);
        return the held samples left (None: none)."""
        firsts = np.sort(np.unique(self.dev, return_index=True)[1])
        first_of = dict(zip(self.dev[firsts].tolist(), firsts.tolist(), strict=True))
        left = np.ones(len(held.dev), bool)
        for i, (g, t) in enumerate(zip(held.dev.tolist(), held.ts.tolist(), strict=True)):
            j = first_of.get(g)
            if j is None or self.ts[j] != t:
                continue
            both = held.present[:, i] & self.present[:, j]
            dropped["duplicate_metric"] += int(both.sum())
            self.values[:, j] = np.where(held.present[:, i], held.values[:, i], self.values[:, j])
            self.present[:, j] |= held.present[:, i]
            left[i] = False
        return held.take(left) if left.any() else None

    def table(self, names: Sequence[str]) -> pa.Table:
        arrays = [pa.array(self.dev, pa.int32()), pa.array(self.ts, pa.int64()),
                  *(pa.array(self.values[j], pa.float64(), mask=None if self.present[j].all() else ~self.present[j])
                    for j in range(len(names)))]
        return pa.table(arrays, names=[*KEYS, *names])


def _table(samples: _Samples | None, names: Sequence[str]) -> pa.Table | None:
    return None if samples is None else samples.table(names)


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
        held: list[_Samples] = []  # made one table per row group: a column per metric at a time costs per call
        count = 0

        def write(final: bool = False) -> None:
            nonlocal count
            if held and (final or count * (len(names) + 3) >= GROUP_VALUES):
                table = (held[0] if len(held) == 1 else _Samples.concat(held)).table(names)
                run = pa.DictionaryArray.from_arrays(pa.repeat(pa.scalar(0, pa.int32()), table.num_rows), run_ids)
                out.write_table(pa.Table.from_arrays([run, *table.columns], schema=target), row_group_size=1 << 30)
                held.clear()
                count = 0

        for batch in itertools.chain(batches or (), [None]):  # streamed: a batch at a time, then the end
            samples = w.flush_samples() if batch is None else w.feed_samples(batch) if batch.num_rows else None
            if samples is not None and len(samples.dev):
                held.append(samples)
                count += len(samples.dev)
                rows += len(samples.dev)
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
