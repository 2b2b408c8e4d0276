"""The calibration experiments' traces (tests/data/calibration/*, collectors/residency.py): each case's victim row
beside a co-runner, as `traceql attribute --group-by-nvtx 'case:*'` gives it."""

from __future__ import annotations

from pathlib import Path

import duckdb

from traceql.attribute import attribute


def victim_rows(trace: Path, case: str, workdir: Path, con: duckdb.DuckDBPyConnection | None = None
                ) -> list[tuple[dict[str, str], dict]]:
    """(the range's labels, the row) of each victim in the ``case`` ranges of ``trace``: the kernel launched as many
    times as the range's ``reps`` label says (its co-runner, the co-runner's placement record and a GEMM's workspace
    memsets, which are not kernels, are not)."""
    doc = attribute(trace, group_by_nvtx="case:*", workdir=workdir, con=con).to_json()
    out = []
    for r in doc["kernels"]:
        head, *rest = (r["nvtx"] or "").split(";")
        labels = dict(p.split("=", 1) for p in rest if "=" in p)
        if head == f"case:{case}" and r["activity"] == "kernel" and r["n"] == int(labels["reps"]):
            out.append((labels, r))
    return out
