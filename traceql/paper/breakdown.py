"""Why each configuration slowed down: the attribution's per-instance predictions, summed per configuration.

Input: ``paper_instances`` rows of the overlapped mode (instances that overlapped other work and have a baseline
t0). Per instance, the factors combine as in ``kernel_attribution``: 1 + predicted = (1+sm)(1+dram_bw)(1+cache)
(1+clock)(1+link), each factor's part is predicted x ln(1+factor)/ln(1+predicted), and the residual is the
observed slowdown minus the prediction. A configuration's figures are t0-weighted sums over its instances, so its
parts and residual add up to its observed slowdown sum(dur - t0) / sum(t0); the observed slowdown's interval
resamples the instances. The cause follows the attribution's rule: the factor with at least half the prediction
when the observed interval meets the predicted one; mixed when none has half; unexplained when they do not meet;
none when the observed interval includes 0 or stays under 1%.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from .figures import N_BOOT, Est, key_of, resample_rows

FACTORS = (("sm", "sm"), ("dram_bw", "dram"), ("cache", "cache"), ("clock", "clock"), ("link", "link"))
SIDES = ("compute", "comm", "copy")
MIN_SLOWDOWN = 0.01  # the attribution's significance floor (kernel_attribution: |slowdown| >= 1%)


def _col(rows: list[dict], name: str) -> np.ndarray:
    return np.array([np.nan if r[name] is None else r[name] for r in rows], dtype=np.float64)


def side_breakdown(rows: list[dict], key: tuple, n_boot: int = N_BOOT) -> dict:
    dur = _col(rows, "dur_ns")
    obs = _col(rows, "observed")
    t0 = dur / (1.0 + obs)
    w = t0 / t0.sum()

    def product(suffix: str) -> np.ndarray:
        total = np.ones(len(rows))
        for _, src in FACTORS:
            total *= 1.0 + np.nan_to_num(_col(rows, f"{src}_{suffix}"))
        return total - 1.0

    pred = product("pt")
    log_total = np.log1p(pred)
    scale = np.divide(pred, log_total, out=np.zeros_like(pred), where=np.abs(log_total) > 1e-12)
    out: dict = {"instances": len(rows), "overlap_fraction": float(np.nansum(w * _col(rows, "f"))),
                 "held_sms": float(np.nansum(w * _col(rows, "held_sms")))}
    observed = float((dur - t0).sum() / t0.sum())
    reps = None
    if len(rows) >= 2:
        idx = resample_rows(len(rows), key=(*key, "breakdown"), n_boot=n_boot)
        reps = (dur[idx] - t0[idx]).sum(axis=1) / t0[idx].sum(axis=1)
    out["observed"] = Est(observed, reps)
    parts = {}
    for name, src in FACTORS:
        parts[name] = float(np.sum(w * scale * np.log1p(np.nan_to_num(_col(rows, f"{src}_pt")))))
    predicted = float(np.sum(w * pred))
    out.update(parts)
    out["predicted"] = predicted
    out["predicted_lo"] = float(np.sum(w * product("lo")))
    out["predicted_hi"] = float(np.sum(w * product("hi")))
    out["residual"] = observed - predicted
    lo, hi = out["observed"].interval()
    lo, hi = (observed, observed) if math.isnan(lo) else (lo, hi)
    if hi >= out["predicted_lo"] and lo <= out["predicted_hi"]:
        out["agreement"] = "agrees"
    else:
        out["agreement"] = "over" if hi < out["predicted_lo"] else "under"
    top = max(parts, key=lambda f: parts[f])
    if (lo <= 0 <= hi) or abs(observed) < MIN_SLOWDOWN or observed <= 0:
        out["cause"] = "none"
    elif out["agreement"] == "agrees" and predicted > 0:
        out["cause"] = top if parts[top] >= 0.5 * predicted else "mixed"
    else:
        out["cause"] = "unexplained"
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
