"""Why each configuration slowed down: the attribution's per-instance predictions, summed per configuration.

Input: ``paper_instances`` rows of the overlapped mode (instances that overlapped other work and have a baseline
t0). A configuration's factor points and bands are the t0-weighted means of its instances' (each instance's band is
its factor's calibrated one, or the point's own size: ``instance_predictions``), and they combine as in
``kernel_attribution``: 1 + predicted = (1+sm)(1+memory)(1+clock)(1+link), memory being DRAM bandwidth or lost L2
reuse (the one nearer the observation in band units), each factor's part predicted x ln(1+factor)/ln(1+predicted),
the band the root sum of squares of the present factors' bands, and the residual the observed slowdown minus the
prediction. The observed slowdown is sum(dur - t0) / sum(t0), its interval resampling the instances, so parts and
residual add up to it. The cause follows kernel_attribution's class rule: none when the observed interval includes
0 or the slowdown stays under 1%; unexplained when no factor is present; within the band, the factor with at least
half the prediction (else mixed); a single present factor that misses its band, and the largest of several that
together predict between half and twice the observation, are named; else unexplained.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from .figures import N_BOOT, Est, key_of, resample_rows

FACTORS = (("sm", "sm"), ("dram_bw", "dram"), ("cache", "cache"), ("clock", "clock"), ("link", "link"))
SIDES = ("compute", "comm", "copy")
MIN_SLOWDOWN = 0.01  # the attribution's significance floor, and a factor's presence (kernel_attribution: 1%)


def _col(rows: list[dict], name: str) -> np.ndarray:
    return np.array([np.nan if r[name] is None else r[name] for r in rows], dtype=np.float64)


def combine(s: float, points: dict[str, float], bands: dict[str, float]) -> dict:
    """kernel_attribution's combination of factor points (and their bands) against an observed slowdown ``s``:
    the prediction, its band, each factor's part, which memory explanation is taken and how many factors are
    present."""
    on = {f: points[f] >= MIN_SLOWDOWN for f in points}
    base = (1 + points["sm"]) * (1 + points["clock"]) * (1 + points["link"])
    # the clock's band counts whenever it predicts; the others' when present
    base_var = bands["clock"] ** 2 + sum(bands[f] ** 2 for f in ("sm", "link") if on[f])
    totals = {m: (base * (1 + points[m]) - 1, math.sqrt(base_var + bands[m] ** 2)) for m in ("dram_bw", "cache")}
    present = [m for m in ("dram_bw", "cache") if on[m]]
    if len(present) == 2:  # the nearer in band units; a tie goes to DRAM bandwidth
        memory = min(present, key=lambda m: (abs(s - totals[m][0]) / totals[m][1], m == "cache"))
    else:
        memory = present[0] if present else None
    predicted, band = totals[memory] if memory else (base - 1, math.sqrt(base_var))
    used = {f: (points[f] if f not in ("dram_bw", "cache") or f == memory else 0.0) for f in points}
    log_total = math.log1p(predicted)
    scale = predicted / log_total if abs(log_total) > 1e-12 else 0.0
    parts = {f: scale * math.log1p(x) for f, x in used.items()}
    n_present = sum(on[f] for f in ("sm", "clock", "link")) + (memory is not None)
    return dict(predicted=predicted, band=band, parts=parts, memory=memory, n_present=n_present, on=on)


def cause(s: float, lo: float, hi: float, c: dict) -> tuple[str, str]:
    """(agreement, cause) of kernel_attribution's class rule, for an observed slowdown ``s`` [lo, hi]."""
    p, band, parts = c["predicted"], c["band"], c["parts"]
    if hi >= p - band and lo <= p + band:
        agreement = "agrees"
    else:
        agreement = "over" if hi < p - band else "under"
    top = max(parts, key=lambda f: (parts[f], -[name for name, _ in FACTORS].index(f)))
    single = None
    if c["n_present"] == 1:
        single = next(f for f in ("sm", "clock", "link") if c["on"][f]) if c["memory"] is None else c["memory"]
    if (lo <= 0 <= hi) or abs(s) < MIN_SLOWDOWN or s <= 0:
        return agreement, "none"
    if c["n_present"] == 0:
        return agreement, "unexplained"
    if agreement == "agrees" and p > 0:
        return agreement, top if parts[top] >= 0.5 * p else "mixed"
    if single is not None and (p > 0 or single == "clock"):
        return agreement, single
    if p > 0 and 0.5 * s <= p <= 2 * s:
        return agreement, top
    return agreement, "unexplained"


def side_breakdown(rows: list[dict], key: tuple, n_boot: int = N_BOOT) -> dict:
    dur = _col(rows, "dur_ns")
    obs = _col(rows, "observed")
    t0 = dur / (1.0 + obs)
    w = t0 / t0.sum()
    out: dict = {"instances": len(rows), "overlap_fraction": float(np.nansum(w * _col(rows, "f"))),
                 "held_sms": float(np.nansum(w * _col(rows, "held_sms")))}
    observed = float((dur - t0).sum() / t0.sum())
    reps = None
    if len(rows) >= 2:
        idx = resample_rows(len(rows), key=(*key, "breakdown"), n_boot=n_boot)
        reps = (dur[idx] - t0[idx]).sum(axis=1) / t0[idx].sum(axis=1)
    out["observed"] = Est(observed, reps)
    points = {name: float(np.sum(w * np.nan_to_num(_col(rows, f"{src}_pt")))) for name, src in FACTORS}
    bands = {name: float(np.sum(w * np.nan_to_num(_col(rows, f"{src}_hi") - _col(rows, f"{src}_pt"))))
             for name, src in FACTORS}
    c = combine(observed, points, bands)
    out.update(c["parts"])
    out["predicted"] = c["predicted"]
    out["predicted_lo"] = c["predicted"] - c["band"]
    out["predicted_hi"] = c["predicted"] + c["band"]
    out["residual"] = observed - c["predicted"]
    lo, hi = out["observed"].interval()
    lo, hi = (observed, observed) if math.isnan(lo) else (lo, hi)
    out["agreement"], out["cause"] = cause(observed, lo, hi, c)
    return out


def breakdowns(instances: list[dict], n_boot: int = N_BOOT) -> dict[tuple, dict[str, dict]]:
    """configuration key -> side -> breakdown, over the overlapped mode's instances."""
    grouped: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in instances:
        if r["mode"] == "overlapped" and r["observed"] is not None and r["dur_ns"]:
            grouped[key_of(r)][r["side"]].append(r)
    out: dict[tuple, dict[str, dict]] = {}
    for key, sides in grouped.items():
        out[key] = {}
        for side in SIDES:
            rows = sorted(sides.get(side, []), key=lambda r: (r["device_id"], r["activity_id"]))
            if rows:
                out[key][side] = side_breakdown(rows, (*key, side), n_boot)
    return out
