"""Reports compute batches of runs on one connection: the tables are those of one connection per run."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from conftest import H200

from traceql.report import _batches, report

SUITE = H200 / "suite"


def _same_rows(a: pa.Table, b: pa.Table) -> bool:
    """The same rows in any order; floats equal to 1e-9 relative (DuckDB sums on several threads in an order that
    changes from one query to the next, so two connections over the same runs differ in the last digits)."""
    def key(r: dict) -> tuple:
        return tuple(f"{v:.6g}" if isinstance(v, float) else repr(v) for v in r.values())

    ra, rb = sorted(a.to_pylist(), key=key), sorted(b.to_pylist(), key=key)
    return a.column_names == b.column_names and len(ra) == len(rb) and all(
        all(math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12) if isinstance(x, float) and isinstance(y, float)
            else x == y or (x != x and y != y) for x, y in zip(r.values(), q.values(), strict=True))
        for r, q in zip(ra, rb, strict=True))


@pytest.mark.parametrize("recipe", ["overlap", "kernels"])
def test_batched_sections_equal_one_run_per_connection(recipe):
    """The bundled suite (six traced runs of 2 x H200 and a profile): every section's rows, per run and reduced, equal
    between one batch of every run and one connection per run, signature group ids included."""
    alone = report(SUITE, recipe=recipe, batch_kernels=0)
    together = report(SUITE, recipe=recipe)
    assert [r["run_id"] for r in alone.runs.to_pylist()] == [r["run_id"] for r in together.runs.to_pylist()]
    assert len(alone.sections) == len(together.sections) > 0
    compared = 0
    for a, b in zip(alone.sections, together.sections, strict=True):
        assert sorted(a.tables) == sorted(b.tables)
        for name in a.tables:
            assert _same_rows(a.tables[name], b.tables[name]), (a.section.title, name)
            compared += a.tables[name].num_rows
        assert [label for label, _ in a.per_run] == [label for label, _ in b.per_run]
        for (_, ta), (_, tb) in zip(a.per_run, b.per_run, strict=True):
            for name in ta:
                assert _same_rows(ta[name], tb[name]), (a.section.title, name)
    assert compared > 0


def test_batches_take_consecutive_runs_up_to_the_kernel_budget():
    runs = [{"kernels": k} for k in (10, 20, 0, 5, 100, 1, 1)]
    assert _batches(runs, 30) == [[0, 1], [2], [3], [4], [5, 6]]
    assert _batches(runs, 0) == [[0], [1], [2], [3], [4], [5], [6]]
    assert _batches(runs, 10**9) == [[0, 1], [2], [3, 4, 5, 6]]
