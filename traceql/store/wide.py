"""Long GPU-metric rows turned wide as they stream: one row per GPU and sample time, a column per metric.

The pivot alone (numpy over Arrow), below the store's schema: :mod:`traceql.store.metrics` writes its rows as the
store's files, and :mod:`traceql.store.schema` widens the long tables that writers give it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

KEYS = ("device_id", "ts_ns")
RESERVED = ("run_id", *KEYS)  # no metric column takes one of these names


def metric_names(names) -> list[str]:
    """The metric columns for ``names``: distinct, sorted, not NULL and not a key column's name."""
    return sorted({n for n in names if n is not None and n not in RESERVED})


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
        self._held: Samples | None = None
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

    def feed_samples(self, batch: pa.RecordBatch | pa.Table) -> Samples | None:
        """:meth:`feed`'s samples as numpy arrays (made a table once per row group by :func:`write_wide`)."""
        return self._emit(self._samples(*self._columns(batch)), last=False)

    def flush_samples(self) -> Samples | None:
        return self._emit(None, last=True)

    def _samples(self, dev, ts, code, value, valid) -> Samples | None:
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
        return Samples(dev[starts], ts[starts], values.reshape(k, n), present.reshape(k, n))

    def _emit(self, batch: Samples | None, last: bool) -> Samples | None:
        """The wide rows to write now: the samples held from the last batch (those this batch goes on merged into
        its own), then this batch's, each GPU's last held back unless ``last``."""
        held, self._held = self._held, None
        if held is not None and batch is not None:
            held = batch.merge_first(held, self.dropped)
        out = [s for s in (held, batch) if s is not None]
        if not out:
            return None
        samples = out[0] if len(out) == 1 else Samples.concat(out)
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


class Samples:
    """Wide samples: device and time per sample, and a (metric, sample) matrix of values and of their presence."""

    def __init__(self, dev: np.ndarray, ts: np.ndarray, values: np.ndarray, present: np.ndarray):
        self.dev, self.ts, self.values, self.present = dev, ts, values, present

    def take(self, which: np.ndarray) -> Samples:
        return Samples(self.dev[which], self.ts[which], self.values[:, which], self.present[:, which])

    @staticmethod
    def concat(parts: Sequence[Samples]) -> Samples:
        return Samples(*(np.concatenate([getattr(p, a) for p in parts], axis=-1)
                          for a in ("dev", "ts", "values", "present")))

    def merge_first(self, held: Samples, dropped: dict[str, int]) -> Samples | None:
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


def _table(samples: Samples | None, names: Sequence[str]) -> pa.Table | None:
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
    if parts:
        return pa.concat_tables(parts), w.dropped
    empty = pa.schema([("device_id", pa.int32()), ("ts_ns", pa.int64()), *((n, pa.float64()) for n in names)])
    return empty.empty_table(), w.dropped


