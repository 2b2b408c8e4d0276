"""Stage 4 of the attribution: the classes. Per signature group, the observed slowdown against the prediction and
its band, and the class that follows (``kernel_attribution``: a factor, ``none``, ``conflated`` or ``unexplained``,
with the reason in words); per device, compute and communication alone and together (``device_summary``). The rule
is SQL (``queries/kernel_attribution.sql``); ``docs/attribution.md`` states it."""

from __future__ import annotations

import duckdb

from ..queries_loader import materialize

VIEWS = ("kernel_attribution", "device_summary")


def prepare(con: duckdb.DuckDBPyConnection) -> None:
    """Compute the classes on ``con``, after its predictions."""
    materialize(con, VIEWS)
