"""``traceql advise``: which schedule of a GEMM-and-collective region, and how many NCCL CTAs, predicted from one run.

A region is one configuration of a run whose NVTX ranges mark the modes of the overlap experiment (``docs/paper.md``:
compute alone, communication alone, overlapped, sequential; :mod:`traceql.paper` measures each). From the modes
measured at the NCCL_MAX_CTAS the run was traced with (k_d CTAs: the SMs its collectives held), it predicts the
iteration time of the region under other schedules: sequential (the collective after the compute, on one stream), and
overlapped with NCCL limited to k CTAs, for each k below k_d. The model (``docs/advise.md``):

- **communication with k CTAs** takes M_k = M_d (k_d / k)^alpha: with fewer CTAs, fewer channels move the data.
  alpha (1: each CTA moves data at a fixed rate; less: latency and the per-CTA rate that grows as CTAs are fewer) is
  calibrated per collective on a sweep measured at several NCCL_MAX_CTAS (``traceql/_advise_calibration.py``,
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

from . import store
from .errors import BadInputError, UsageError

DEFAULT_CTAS = (1, 2, 4, 8, 16, 32)
TRACED = "traced"

SCHEMA = pa.schema([
    ("run_id", pa.string()), ("run", pa.string()), ("op", pa.string()), ("dtype", pa.string()),
    ("bytes", pa.int64()), ("config", pa.string()), ("traced_ctas", pa.string()), ("traced_sms", pa.float64()),
    ("schedule", pa.string()), ("max_ctas", pa.int64()), ("predicted_ns", pa.float64()),
    ("predicted_lo_ns", pa.float64()), ("predicted_hi_ns", pa.float64()), ("comm_ns", pa.float64()),
    ("compute_slowdown", pa.float64()), ("gain_ns", pa.float64()), ("confident", pa.bool_()),
    ("recommended", pa.bool_()),
])


@dataclass
class Region:
    """What the traced configuration measured (times in ns): compute alone C, the collective alone M with the SMs its
    CTAs held (k), the overlapped iteration T, in it compute's slowdown (over the whole, and in the part the
    collective covered) and the share of it covered, the collective's slowdown, the collective time that compute hid
    (H); the device's SM count."""

    key: dict
    compute_ns: float
    comm_ns: float
    comm_sms: float
    overlapped_ns: float
    compute_slowdown: float
    covered: float
    x: float
    y: float
    hidden_ns: float
    sm_count: int


@dataclass
class Advice:
    """Per region and schedule, the predicted iteration time with its band, and which one is recommended."""

    table: pa.Table
    notes: list[str] = field(default_factory=list)
    steps: pa.Table | None = None  # with NVTX groups: per (run, device, step) and k (traceql.advise_steps)

    def to_json(self) -> dict:
        def rows(t: pa.Table | None) -> list[dict]:
            return [] if t is None else [
                {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
                for r in t.to_pylist()]
        return {"schema_version": 1, "predictions": rows(self.table), "steps": rows(self.steps), "notes": self.notes}


def comm_at(region: Region, k: int, alpha: float) -> float:
    """The collective alone with at most k CTAs: no faster than traced (a cap above the CTAs it used changes
    nothing)."""
    if k >= region.comm_sms:
        return region.comm_ns
    return region.comm_ns * (region.comm_sms / k) ** alpha


def sm_loss(sm_count: int, held: float) -> float:
    """In-overlap slowdown of a many-wave grid that loses ``held`` SMs: S / (S - held) - 1."""
    free = sm_count - held
    return math.inf if free <= 0 else sm_count / free - 1


def predict(region: Region, ks: Sequence[int], alpha: float) -> list[dict]:
    """The traced schedule (measured), sequential, and overlapped with NCCL_MAX_CTAS k for each k below the CTAs the
    traced collectives used: predicted iteration times (ns), each the measured one plus the change the model predicts.

    Traced, compute ran C_o = C (1 + s) and the collective M_o = M (1 + y); compute hid H of the collective, and the
    collective covered C_c = f C_o of compute, slowing it 1 + x times there. Sequential: the hidden collective is
    exposed and neither side is slowed: T + H - C_c x / (1 + x) - (M_o - M). With k CTAs: the collective takes
    dM = (M_k - M)(1 + y) more; compute hides the same share h = H / M_o of it as traced, at most the compute time
    that ran uncovered (C_o - C_c); the covered compute is slowed 1 + x_k times instead: T + dM - hidden +
    C_c (x_k - x) / (1 + x)."""
    r = region
    c_o, m_o = r.compute_ns * (1 + r.compute_slowdown), r.comm_ns * (1 + r.y)
    c_c = r.covered * c_o
    out = [dict(schedule=TRACED, max_ctas=None, predicted_ns=r.overlapped_ns, comm_ns=r.comm_ns, compute_slowdown=r.x)]
    seq = r.overlapped_ns + r.hidden_ns - c_c * r.x / (1 + r.x) - (m_o - r.comm_ns)
    out.append(dict(schedule="sequential", max_ctas=None, predicted_ns=seq, comm_ns=r.comm_ns, compute_slowdown=0.0))
    share = min(1.0, r.hidden_ns / m_o) if m_o > 0 else 0.0
    for k in sorted(set(ks)):
        if k >= r.comm_sms:
            continue
        m_k = comm_at(r, k, alpha)
        grown = (m_k - r.comm_ns) * (1 + r.y)
        hidden = min(share * grown, max(0.0, c_o - c_c))
        x_k = max(0.0, r.x + sm_loss(r.sm_count, k) - sm_loss(r.sm_count, r.comm_sms))
        t_k = r.overlapped_ns + grown - hidden + c_c * (x_k - r.x) / (1 + r.x)
        out.append(dict(schedule="overlapped", max_ctas=k, predicted_ns=t_k, comm_ns=m_k, compute_slowdown=x_k))
    return out


def recommend(preds: list[dict], margins: dict[str, float]) -> int:
    """The index of the recommended schedule: the shortest predicted time among the traced one (index 0) and those
    predicted to gain more than the calibration's median error of their kind (a smaller gain is as likely noise)."""
    def gains(i: int) -> bool:
        p = preds[i]
        margin = margins.get(p["schedule"], margins.get("*", 0.0))
        return i == 0 or preds[0]["predicted_ns"] - p["predicted_ns"] > margin * p["predicted_ns"]
    return min((i for i in range(len(preds)) if gains(i)), key=lambda i: (preds[i]["predicted_ns"], i))


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


def _finite(v) -> float:
    return 0.0 if v is None or not math.isfinite(v) else float(v)


def calibration() -> tuple[dict[str, float], dict[str, float], dict[str, float], str]:
    """alpha per collective; per schedule kind (sequential, overlapped), the relative bands and median errors; and
    where they come from."""
    from . import _advise_calibration as cal

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
    NCCL_MAX_CTAS k (:mod:`traceql.advise_steps`)."""
    from .attribute import as_store, input_paths

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
        from .paper import paper

        result = paper(dirs)
        con = store.connect(dirs, views=False)
        try:
            sm_counts = dict(con.sql("SELECT run_id, max(sm_count) FROM devices GROUP BY run_id").fetchall())
        finally:
            con.close()
    found = regions(result.configs, sm_counts)
    if not found:
        raise BadInputError(f"{', '.join(map(str, inputs))}: no configuration measured compute alone, communication "
                            "alone and overlapped, with the SMs its collectives held: nothing to predict from (for "
                            "training steps, give --group-by-nvtx)")
    return Advice(advise_regions(found, ctas, tuple(constants)), notes)


def _steps(dirs: list[Path], ctas: Sequence[int], group_by_nvtx: str, nvtx_scope: str, constants) -> pa.Table:
    import duckdb

    from .advise_steps import step_predictions
    from .attribute import attribute

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

    from .paper.text import aligned

    if fmt == "json":
        return json.dumps(result.to_json(), indent=1, default=str) + "\n"
    if fmt == "csv":
        sink = pa.BufferOutputStream()
        pacsv.write_csv(result.steps if result.steps is not None else result.table, sink)
        return sink.getvalue().to_pybytes().decode()
    rows = []
    for r in (result.steps.to_pylist() if result.steps is not None else []):
        label = r["schedule"] if r["max_ctas"] is None else f"ctas={r['max_ctas']}"
        rows.append({"run": r["run_id"], "device": r["device_id"], "step": r["nvtx"], "schedule": label,
                     "predicted_ms": f"{r['predicted_ms']:.1f}",
                     "band_ms": f"{r['predicted_lo_ms']:.1f}-{r['predicted_hi_ms']:.1f}",
                     "gain_ms": f"{r['gain_ms']:+.1f}",
                     "advice": ("recommended" + (" (gain beyond the band)" if r["confident"] else ""))
                     if r["recommended"] else ""})
    for r in result.table.to_pylist():
        label = r["schedule"] if r["max_ctas"] is None else f"ctas={r['max_ctas']}"
        rows.append({"run": r["run"], "region": f"{r['op']} {r['dtype']} {r['bytes']} B", "traced": r["traced_ctas"],
                     "schedule": label, "predicted_ms": f"{r['predicted_ns'] / 1e6:.3f}",
                     "band_ms": f"{r['predicted_lo_ns'] / 1e6:.3f}-{r['predicted_hi_ns'] / 1e6:.3f}",
                     "gain_ms": f"{r['gain_ns'] / 1e6:+.3f}",
                     "advice": ("recommended" + (" (gain beyond the band)" if r["confident"] else ""))
                     if r["recommended"] else ""})
    out = io.StringIO()
    out.write(aligned(pa.Table.from_pylist(rows)) if rows else "(no rows)\n")
    out.write("".join(f"note: {n}\n" for n in result.notes))
    return out.getvalue()
