"""The HTML report of a diff: a recipe of kind ``diff`` whose queries read the diff's tables (``diff_summary``,
``diff_metrics``, ``diff_kernels``, ``diff_steps``, ``diff_waterfall``) instead of mapping over runs; the page is the
same as ``traceql report``'s (self-contained, every name escaped)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import duckdb
import pyarrow as pa

from .. import duck
from ..errors import BadInputError
from . import Report
from . import recipe as recipes
from .recipe import Recipe
from .sections import SectionResult


def load_diff_recipe(recipe: str | Path | Recipe = "diff") -> Recipe:
    """A diff recipe (built-in ``diff`` or a file), checked: every section compares A with B as a whole."""
    rec = recipe if isinstance(recipe, Recipe) else recipes.load_kind(recipe, "diff")
    for i, s in enumerate(rec.sections, 1):
        if s.scope != "all" or s.reduce is not None:
            raise BadInputError(f"{rec.source}: section {i} ({s.title!r}): a diff recipe's sections read the diff's "
                                "tables as a whole: scope = \"all\", no reduce")
    return rec


def _runs(d) -> pa.Table:
    rows = []
    for side, info in (("A", d.a), ("B", d.b)):
        for r in info["runs"]:
            rows.append(dict(run_id=r["run_id"], run=f"{side}: {r['name']}", source_path=r["source_path"],
                             format=r.get("format"), gpu_names=r["gpu_names"], labels_json=json.dumps(r["labels"]),
                             kernels=r["kernels"]))
    return pa.Table.from_pylist(rows)


def diff_report(d, recipe: str | Path | Recipe = "diff") -> Report:
    """The report of diff ``d`` (a :class:`traceql.diff.Diff`) with a diff recipe."""
    rec = load_diff_recipe(recipe)
    started = time.perf_counter()
    con = duck.connect()
    try:
        for name, table in d.tables().items():
            con.register(name, table)
        sections = []
        for s in rec.sections:
            tables = {}
            for q in s.queries:
                try:
                    tables[q.name] = con.sql(q.select(per_run=False)).to_arrow_table()
                except duckdb.Error as exc:
                    raise BadInputError(f"{rec.source}: section {s.title!r}, query {q.name!r}: "
                                        f"{str(exc).splitlines()[0]}") from None
            sections.append(SectionResult(s, tables))
    finally:
        con.close()
    return Report(rec, _runs(d), sections, [], time.perf_counter() - started)
