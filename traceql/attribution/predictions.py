"""Stage 3 of the attribution: the predictions. What each contended resource (SMs, DRAM bandwidth, L2 reuse, the
clock, links) predicts for each overlapped instance with a baseline (``instance_predictions``), from the victim's
isolated behaviour, the co-runners' demand and the device, never from the victim's overlapped duration; their medians
per signature group (``_group_predictions``, the engine's pass over ``_prediction_inputs``); the device's DRAM
saturation they read (``_device_calibration``); and the groups' durations, slowdowns and witnesses
(``kernel_signatures``). The SQL lives in ``queries/``; ``docs/attribution.md`` gives the models."""

from __future__ import annotations

import duckdb

from .. import duck
from ..engine import medians
from ..queries_loader import materialize

VIEWS = ("_device_calibration", "kernel_signatures", "instance_predictions", "_group_predictions")
# kept only under a memory cap: _group_predictions is the one view that reads instance_predictions (a row per
# overlapped instance) in prepare, and computes it inline there (when kernel_attribution read it, inline took 10.4 s
# against 11.8 s for the views after the baselines at 10 M kernels; not measured again since)
CAPPED_ONLY = ("instance_predictions",)
# the engine's stages among them (the reference SQL of each is computed when prepare(sweeps="sql"))
ENGINE_STAGES = {"_group_predictions": medians.group_predictions}


def prepare(con: duckdb.DuckDBPyConnection, sweeps: str = "engine") -> None:
    """Compute the predictions on ``con``, after its baselines."""
    for view in VIEWS:
        if sweeps == "engine" and view in ENGINE_STAGES:
            ENGINE_STAGES[view](con)
        elif duck.memory_limit() or view not in CAPPED_ONLY:
            materialize(con, (view,))
