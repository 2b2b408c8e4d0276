"""GPU metrics stored wide: one row per GPU and sample time, one column per metric.

nsys writes a sample as one row per metric (``GPU_METRICS``: time, GPU, metric id, value): about 30 rows per sample
on an H100 or H200, each repeating the time and the GPU. The store keeps a sample as one row instead: ``run_id``,
``device_id``, ``ts_ns``, then a ``DOUBLE`` column per metric, named as nsys names it (``SMs Active [Throughput
%]``). A metric a sample lacks is NULL there. The set of metrics depends on the GPU and the nsys version, so the
columns of ``gpu_metrics.parquet`` differ between runs; every other table's are fixed. Readers get both forms: the
view ``gpu_metrics_wide`` (every run's file, columns by name) and the long view ``gpu_metrics`` (one row per sample
and metric, as before: the wide rows unpivoted, NULLs left out).

The rows come long, in the export's order, and are turned wide as they stream (:class:`traceql.store.wide.Widener`,
the pivot alone, which the schema's ``conform`` uses too): a batch's rows are
grouped by (GPU, time), and each GPU's last sample waits for the next batch, which may hold more of its metrics. A
GPU whose sample times go back (an export not in time order) makes the file be sorted and merged once written
(:func:`write_wide`), so that a file always holds one row per GPU and time, in time order per GPU. Two values of one
metric at one GPU and time cannot both be stored: the first is kept (one of them, where the file is merged), and
the others counted (``gpu_metrics.duplicate_metric`` in the run's repairs).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from . import schema
from .wide import KEYS, Samples, Widener

TABLE = "gpu_metrics"
# values (rows x columns) of wide rows held before they are written as a row group
GROUP_VALUES = 1 << 22


def wide_schema(names: Sequence[str]) -> pa.Schema:
    """The schema of a wide GPU-metrics file with these metric columns (run_id dictionary-encoded, as written)."""
    stored = schema.stored(TABLE, names)
    return stored.set(stored.get_field_index("run_id"), pa.field("run_id", pa.dictionary(pa.int32(), pa.string())))


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
        held: list[Samples] = []  # made one table per row group: a column per metric at a time costs per call
        count = 0

        def write(final: bool = False) -> None:
            nonlocal count
            if held and (final or count * (len(names) + 3) >= GROUP_VALUES):
                table = (held[0] if len(held) == 1 else Samples.concat(held)).table(names)
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
