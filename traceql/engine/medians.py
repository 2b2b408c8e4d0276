"""Medians per group that SQL would take over every instance at once, taken from one scan in group order.

DuckDB's ``median`` is a holistic aggregate: grouped, it holds every value of every group until the end, which under
a memory cap it cannot spill (kernel_attribution's 18 medians per group ran out of a 2 GB cap at 30 M kernels). Here
DuckDB sorts the instances by group (a sort spills) and the medians are taken a few whole groups at a time, as
:func:`traceql.stats.segment_medians` computes SQL's median, to the bit.

Replaced view, its reference SQL kept in ``queries/`` (``tests/test_engine.py`` compares the two):

- ``_group_predictions``: per group, the medians of ``_prediction_inputs`` (what each contended resource predicts
  for each overlapped instance), and its witnesses.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import duck, stats
from ..queries_loader import point_view

BATCH_ROWS = 1 << 20  # rows per Arrow batch read from DuckDB

# the columns of _group_predictions and how each is taken from _prediction_inputs' (its SQL says the same)
ANY_OF = ("memory_bound", "footprint", "clock_power")  # bool_or
FIRST = ("dram_sat_pct",)  # any_value: the same on every instance of a group
EVIDENCE = ("ncu_working_set", "footprint", "extra_traffic")  # cache_evidence: the first that some instance has


def group_predictions(con: duckdb.DuckDBPyConnection) -> None:
    """``_group_predictions`` from ``_prediction_inputs`` read in group order."""
    schema = con.sql("SELECT * FROM _group_predictions LIMIT 0").arrow().schema
    reader = con.sql("SELECT * FROM _prediction_inputs ORDER BY group_id").to_arrow_reader(BATCH_ROWS)
    pieces = (_reduced(t, schema) for t in _whole_groups(reader))
    point_view(con, "_group_predictions",
               duck.keep_pieces(con, "_materialized__group_predictions", schema.empty_table(), pieces))


def _whole_groups(reader: pa.RecordBatchReader) -> Iterator[pa.Table]:
    """The rows of a scan ordered by ``group_id``, as tables of whole groups (a group may span batches)."""
    carry: list[pa.RecordBatch] = []
    for batch in reader:
        if batch.num_rows == 0:
            continue
        ids = batch.column("group_id").to_numpy(zero_copy_only=False)
        last = int(np.searchsorted(ids, ids[-1]))  # where the batch's last group begins
        if last > 0:
            yield pa.Table.from_batches([*carry, batch.slice(0, last)])
            carry = []
        carry.append(batch.slice(last))
    if carry:
        yield pa.Table.from_batches(carry)


def _reduced(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """One row per group of ``t`` (whole groups, in group order), the columns of ``schema``."""
    ids = t.column("group_id").to_numpy()
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    out: dict[str, pa.Array] = {"group_id": pa.array(ids[starts], pa.int64())}
    for name in schema.names[1:]:
        column = t.column(name)
        present = pc.is_valid(column).to_numpy(zero_copy_only=False)
        if name == "cache_evidence":
            text = pc.fill_null(column, "").to_numpy(zero_copy_only=False)
            has = [np.add.reduceat(text == e, starts) > 0 for e in EVIDENCE]
            first = np.full(len(starts), None, dtype=object)
            for e, h in reversed(list(zip(EVIDENCE, has, strict=True))):
                first = np.where(h, e, first)
            out[name] = pa.array(first, pa.string())
            continue
        if name in ANY_OF:
            true = pc.fill_null(column, False).to_numpy(zero_copy_only=False)
            out[name] = pa.array(np.add.reduceat(true, starts) > 0, mask=np.add.reduceat(present, starts) == 0)
            continue
        values = pc.fill_null(column, np.nan).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        if name in FIRST:
            where = np.r_[np.flatnonzero(present), len(ids)]  # the rows with a value, then past the end
            first = where[np.searchsorted(where, starts)]  # each group's first row with a value, if in the group
            found = first < np.r_[starts[1:], len(ids)]
            out[name] = pa.array(np.where(found, values[np.minimum(first, len(ids) - 1)], np.nan), mask=~found)
            continue
        medians, found = stats.segment_medians(values, starts, present)
        out[name] = pa.array(medians, mask=~found)
    return pa.table(out).cast(schema)
