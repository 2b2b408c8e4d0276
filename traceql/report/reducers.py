"""Reducers: Python steps a recipe section runs on the rows of every run after the per-run queries.

A section with ``reduce = "NAME"`` (scope ``all``) hands its queries' concatenated tables to the reducer and may show
the tables it gives (``table = ...``, a chart's needs) besides its queries'. Sections with the same queries and
reducer share one result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class ReducerDef:
    fn: Callable[[dict[str, pa.Table]], dict[str, pa.Table]]
    needs: tuple[str, ...]
    gives: tuple[str, ...]
    help: str


def _paper(tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    from ..paper import reduce
    from ..paper.text import headline_text, intervals_text

    out = reduce(tables)
    ids = ("label", "side", "mode", "instances", "gpus", "iterations", "modes")
    return {**out, "headline_text": headline_text(out["headline"]),
            "configs_text": intervals_text(out["configs"], ("label", "modes", "gpus", "iterations", "comm_only_gbps")),
            "modes_text": intervals_text(out["modes"], (*ids, "power_samples", "counter_updates", "note")),
            "breakdown_text": intervals_text(out["breakdown"], (*ids, "sm", "dram_bw", "cache", "clock",
                                                                "link", "residual", "agreement", "cause"))}


REDUCERS: dict[str, ReducerDef] = {
    "paper": ReducerDef(_paper, needs=("iterations",),
                        gives=("headline", "configs", "modes", "breakdown", "headline_text", "configs_text",
                               "modes_text", "breakdown_text"),
                        help="the overlap characterization of Lee et al. (traceql.paper): iterations from "
                             "paper_iterations, and optionally power from paper_power and instances from "
                             "paper_instances"),
}
