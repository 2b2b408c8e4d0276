"""``traceql advise``: which schedule of a GEMM-and-collective region, and how many NCCL CTAs, predicted from one run.

A region is one configuration of a run whose NVTX ranges mark the modes of the overlap experiment (``docs/paper.md``:
compute alone, communication alone, overlapped, sequential; :mod:`traceql.paper` measures each). From the modes
measured at the NCCL_MAX_CTAS the run was traced with (k_d CTAs: the SMs its collectives held), it predicts the
iteration time of the region under other schedules: sequential (the collective after the compute, on one stream), and
overlapped with NCCL limited to k CTAs, for each k below k_d. The model (``docs/advise.md``):

- **communication with k CTAs** takes M_k = M_d (k_d / k)^alpha: with fewer CTAs, fewer channels move the data.
  alpha (1: each CTA moves data at a fixed rate; less: latency and the per-CTA rate that grows as CTAs are fewer) is
  calibrated per collective on a sweep measured at several NCCL_MAX_CTAS (``traceql/advise/calibrated.py``,
  written by ``benchmarks/validate_advise.py``);
- **compute beside k CTAs** loses the SMs they hold: its in-overlap slowdown x_k = x_d + S/(S - k) - S/(S - k_d) (the
  SM model of many-wave grids, the rest of the slowdown measured at k_d kept), at least 0;
- **the two streams** start together: compute C runs 1 + x times slower while the collective runs, the collective
  1 + y times slower while compute runs (y measured at k_d); the iteration ends when both have (fluid);
- **anchored to what was measured**: every prediction is the measured overlapped iteration plus the change the model
  predicts from the traced schedule to the other, so launch gaps and what the model leaves out cancel.

Each prediction carries its calibrated band (the 90% quantile of the relative error on the calibration sweep). The
recommendation is the schedule with the shortest predicted time among the traced one and those predicted to gain more
than the model's median error of their kind; it is ``confident`` where its whole band lies below the traced time.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from .. import store
from ..errors import BadInputError, UsageError
from .model import TRACED, Region, comm_at, predict, recommend, sm_loss

__all__ = ["DEFAULT_CTAS", "TRACED", "Advice", "Region", "advise", "advise_regions", "calibration", "comm_at",
           "predict", "recommend", "regions", "render", "sm_loss", "sweep_regions"]

DEFAULT_CTAS = (1, 2, 4, 8, 16, 32)

SCHEMA = pa.schema([
    ("run_id", pa.string()), ("run", pa.string()), ("op", pa.string()), ("dtype", pa.string()),
    ("bytes", pa.int64()), ("config", pa.string()), ("traced_ctas", pa.string()), ("traced_sms", pa.float64()),
    ("schedule", pa.string()), ("max_ctas", pa.int64()), ("predicted_ns", pa.float64()),
    ("predicted_lo_ns", pa.float64()), ("predicted_hi_ns", pa.float64()), ("comm_ns", pa.float64()),
    ("compute_slowdown", pa.float64()), ("gain_ns", pa.float64()), ("confident", pa.bool_()),
    ("recommended", pa.bool_()),
])


@dataclass
class Advice:
    """Per region and schedule, the predicted iteration time with its band, and which one is recommended."""

    table: pa.Table
    notes: list[str] = field(default_factory=list)
    steps: pa.Table | None = None  # with NVTX groups: per (run, device, step) and k (traceql.advise.steps)

    def to_json(self) -> dict:
        def rows(t: pa.Table | None) -> list[dict]:
            return [] if t is None else [
                {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
                for r in t.to_pylist()]
        return {"schema_version": 1, "predictions": rows(self.table), "steps": rows(self.steps), "notes": self.notes}


def regions(configs: pa.Table, sm_counts: dict[str, int]) -> list[Region]:
    """One region per configuration of ``traceql.paper``'s configs table that measured all four modes."""
    out = []
    for c in configs.to_pylist():
        need = (c["compute_iter_ns"], c["comm_iter_ns"], c["overlapped_iter_ns"], c["comm_sms"])
        if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in need) or not c["comm_sms"]:
            continue
        sm = sm_counts.get(c["run_id"])
        if not sm:
            continue
        key = {k: c[k] for k in ("run_id", "run", "op", "dtype", "bytes", "config")} | {"traced_ctas": c["max_ctas"]}
        t = c["overlapped_iter_ns"]
        out.append(Region(key=key, compute_ns=c["compute_iter_ns"], comm_ns=c["comm_iter_ns"],
                          comm_sms=float(c["comm_sms"]), overlapped_ns=t,
                          compute_slowdown=_finite(c["compute_slowdown"]), covered=_finite(c["compute_covered"]),
                          x=_finite(c["in_overlap_slowdown"]), y=_finite(c["comm_slowdown"]),
                          hidden_ns=_finite(c["overlap_ratio"]) * t, sm_count=sm))
    return out


def sweep_regions(dirs: list[Path]):
    """The overlap experiment's figures over the run directories ``dirs`` (:func:`traceql.paper.paper`), and the
    regions its configurations give."""
    from ..paper import paper

    result = paper(dirs)
    con = store.connect(dirs, views=False)
    try:
        sm_counts = dict(con.sql("SELECT run_id, max(sm_count) FROM devices GROUP BY run_id").fetchall())
    finally:
        con.close()
    return result, regions(result.configs, sm_counts)


def _finite(v) -> float:
    return 0.0 if v is None or not math.isfinite(v) else float(v)


def calibration() -> tuple[dict[str, float], dict[str, float], dict[str, float], str]:
    """alpha per collective; per schedule kind (sequential, overlapped), the relative bands and median errors; and
    where they come from."""
    from . import calibrated as cal

    return dict(cal.ALPHA), dict(cal.BANDS), dict(cal.MEDIAN_ERRORS), cal.SOURCE


def advise_regions(found: list[Region], ks: Sequence[int] = DEFAULT_CTAS,
                   constants: tuple[dict, dict, dict] | None = None) -> pa.Table:
    """The predictions table for ``found`` regions; ``constants``: (alpha, bands, median errors), the bundled
    calibration unless given."""
    alpha, bands, margins = constants or calibration()[:3]
    rows = []
    for r in found:
        a = alpha.get(r.key["op"] or "", alpha.get("*", 1.0))
        preds = predict(r, ks, a)
        for p in preds:
            band = 0.0 if p["schedule"] == TRACED else bands.get(p["schedule"], bands.get("*", 0.0))
            p["predicted_lo_ns"] = p["predicted_ns"] * (1 - band)
            p["predicted_hi_ns"] = p["predicted_ns"] * (1 + band)
        pick = recommend(preds, margins)
        for i, p in enumerate(preds):
            gain = r.overlapped_ns - p["predicted_ns"]
            rows.append(r.key | {"traced_sms": r.comm_sms} | p | {
                "gain_ns": gain, "confident": i > 0 and p["predicted_hi_ns"] < r.overlapped_ns,
                "recommended": i == pick})
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def advise(inputs: Sequence[str | Path] | str | Path, *, ctas: Sequence[int] = DEFAULT_CTAS,
           group_by_nvtx: str | None = None, nvtx_scope: str = "process",
           workdir: str | Path | None = None) -> Advice:
    """Predict, per region of ``inputs`` (runs with the overlap experiment's mode ranges), the iteration time under
    sequential execution and under NCCL_MAX_CTAS k for each k in ``ctas``, and recommend one. With
    ``group_by_nvtx`` (a glob, as ``attribute`` takes it): per step of those NVTX groups instead, the step time under
    NCCL_MAX_CTAS k (:mod:`traceql.advise.steps`)."""
    from ..attribute import as_store, input_paths

    if not ctas or any(k < 1 for k in ctas):
        raise UsageError(f"--ctas {','.join(map(str, ctas))}: give CTA counts of at least 1")
    inputs = input_paths(inputs)
    *constants, source = calibration()
    notes = [f"communication time per CTA count calibrated on {source}",
             "NCCL_MAX_CTAS at or above the CTAs the traced collectives used changes nothing: not listed"]
    with tempfile.TemporaryDirectory(prefix="traceql-advise-") as tmp:
        dirs = as_store(inputs, Path(workdir or tmp) / "runs")
        if group_by_nvtx is not None:
            steps = _steps(dirs, ctas, group_by_nvtx, nvtx_scope, tuple(constants))
            if steps.num_rows == 0:
                raise BadInputError(f"{', '.join(map(str, inputs))}: no GPU work in NVTX ranges matching "
                                    f"{group_by_nvtx!r}: no steps to predict")
            return Advice(pa.Table.from_pylist([], schema=SCHEMA), notes, steps)
        _, found = sweep_regions(dirs)
    if not found:
        raise BadInputError(f"{', '.join(map(str, inputs))}: no configuration measured compute alone, communication "
                            "alone and overlapped, with the SMs its collectives held: nothing to predict from (for "
                            "training steps, give --group-by-nvtx)")
    return Advice(advise_regions(found, ctas, tuple(constants)), notes)


def _steps(dirs: list[Path], ctas: Sequence[int], group_by_nvtx: str, nvtx_scope: str, constants) -> pa.Table:
    import duckdb

    from ..attribute import attribute
    from .steps import step_predictions

    con = duckdb.connect()
    try:
        attribute(dirs, group_by_nvtx=group_by_nvtx, nvtx_scope=nvtx_scope, con=con)
        return step_predictions(con, ctas, constants)
    finally:
        con.close()


def render(result: Advice, fmt: str) -> str:
    """``result`` as text: ``table`` (one line per region and schedule, times in ms), ``json`` or ``csv``."""
    import io
    import json

    import pyarrow.csv as pacsv

    from ..paper.text import aligned

    if fmt == "json":
        return json.dumps(result.to_json(), indent=1, default=str) + "\n"
    if fmt == "csv":
        sink = pa.BufferOutputStream()
        pacsv.write_csv(result.steps if result.steps is not None else result.table, sink)
        return sink.getvalue().to_pybytes().decode()
    def line(r: dict, where: dict, ms: float, lo: float, hi: float, gain: float, digits: int) -> dict:
        return where | {"schedule": r["schedule"] if r["max_ctas"] is None else f"ctas={r['max_ctas']}",
                        "predicted_ms": f"{ms:.{digits}f}", "band_ms": f"{lo:.{digits}f}-{hi:.{digits}f}",
                        "gain_ms": f"{gain:+.{digits}f}",
                        "advice": ("recommended" + (" (gain beyond the band)" if r["confident"] else ""))
                        if r["recommended"] else ""}

    rows = [line(r, {"run": r["run_id"], "device": r["device_id"], "step": r["nvtx"]}, r["predicted_ms"],
                 r["predicted_lo_ms"], r["predicted_hi_ms"], r["gain_ms"], 1)
            for r in (result.steps.to_pylist() if result.steps is not None else [])]
    rows += [line(r, {"run": r["run"], "region": f"{r['op']} {r['dtype']} {r['bytes']} B", "traced": r["traced_ctas"]},
                  *(r[c] / 1e6 for c in ("predicted_ns", "predicted_lo_ns", "predicted_hi_ns", "gain_ns")), 3)
             for r in result.table.to_pylist()]
    out = io.StringIO()
    out.write(aligned(pa.Table.from_pylist(rows)) if rows else "(no rows)\n")
    out.write("".join(f"note: {n}\n" for n in result.notes))
    return out.getvalue()
