"""The attribution: how much each GPU activity slowed down while others ran beside it, and why.

Its modules are its stages, in the order the data flows through them:

1. :mod:`~traceql.attribution.instances`: one row per activity with what was measured about it (``instance_facts``);
2. :mod:`~traceql.attribution.baselines`: what each activity is compared with, and the slowdowns with intervals;
3. :mod:`~traceql.attribution.predictions`: what each resource predicts, from inputs that exclude the victim's
   overlapped duration;
4. :mod:`~traceql.attribution.classes`: the class of each signature group, and the device summary;
5. :mod:`~traceql.attribution.verdict`: a verdict per device in words;

and :mod:`~traceql.attribution.result`, what ``traceql attribute`` returns (:class:`Attribution`, the JSON
contract). :func:`prepare` runs stages 1-4 on a connection; ``traceql attribute`` (:mod:`traceql.attribute`, or
one run per unit of an executor: :mod:`traceql.attribute_map`), ``report`` and ``traceql sql`` call it, and notebooks
can too. Every view keeps one meaning: reading one that a stage computes before :func:`prepare` has run is an error
that says to run it (never an empty table, which would read as "no baselines"), and ``traceql sql`` runs it for any
query that names one of them (:func:`needs_prepare`).
"""

from __future__ import annotations

import re

import duckdb

from . import baselines, classes, instances, predictions
from .baselines import External
from .instances import group_by_nvtx
from .result import FACTORS, JSON_SCHEMA_VERSION, KERNEL_COLUMNS, Attribution

__all__ = ["FACTORS", "JSON_SCHEMA_VERSION", "KERNEL_COLUMNS", "Attribution", "External", "group_by_nvtx",
           "needs_prepare", "prepare"]

# views that read the baselines: a query that names one of them needs prepare()
NEEDS_PREPARE = ("_instance_baselines", "_signature_stats", "_prediction_inputs", *predictions.VIEWS, *classes.VIEWS,
                 *instances.WAITS)


def prepare(con: duckdb.DuckDBPyConnection, external: External | None = None, sweeps: str = "engine") -> None:
    """Compute the instances, baselines, predictions and classes on ``con`` (after NVTX grouping, if any).

    ``sweeps="sql"`` evaluates the reference SQL of the engine's stages instead (for comparisons).
    """
    ordered = instances.prepare(con, sweeps)
    baselines.register(con, external, ordered=ordered)
    predictions.prepare(con, sweeps)
    classes.prepare(con)
    instances.prepare_waits(con)


def needs_prepare(sql: str) -> bool:
    return any(re.search(rf"\b{re.escape(v)}\b", sql) for v in NEEDS_PREPARE)
