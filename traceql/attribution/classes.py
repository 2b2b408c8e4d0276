"""Stage 4 of the attribution: the classes. Per signature group, the observed slowdown against the prediction and
its band, and the class that follows (``kernel_attribution``: a factor, ``none``, ``conflated`` or ``unexplained``,
with the reason in words); per device, compute and communication alone and together (``device_summary``). The rule
is SQL (``queries/kernel_attribution.sql``); ``docs/attribution.md`` states it."""

from __future__ import annotations

import duckdb

from ..queries_loader import materialize

VIEWS = ("kernel_attribution", "device_summary")
CAUSES = ("sm", "dram_bw", "cache", "clock", "link")


def cause_shares(cls: str, parts: dict[str, float | None]) -> dict[str, float]:
    """How a slowed row's loss is shared among CAUSES and ``unexplained`` by its class: all to the cause that names
    the row, a mixed row's in proportion to its predicted parts (those above zero), anything else to unexplained.
    The verdict and the steps' critical paths (``traceql.attribution.paths``) share losses this one way."""
    share = dict.fromkeys((*CAUSES, "unexplained"), 0.0)
    if cls in CAUSES:
        share[cls] = 1.0
        return share
    positive = {c: max(0.0, parts.get(c) or 0.0) for c in CAUSES} if cls == "mixed" else {}
    total = sum(positive.values())
    if total > 0:
        share.update({c: v / total for c, v in positive.items()})
    else:  # unexplained, or a mixed row without a positive part (a mixed row has one by construction)
        share["unexplained"] = 1.0
    return share


def prepare(con: duckdb.DuckDBPyConnection) -> None:
    """Compute the classes on ``con``, after its predictions."""
    materialize(con, VIEWS)
