"""The schedule model of :mod:`traceql.advise`: a region's measured times, and the iteration time predicted
under sequential execution and NCCL_MAX_CTAS k (the model: the package's docstring)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

TRACED = "traced"


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


def comm_at(region: Region, k: int, alpha: float) -> float:
    """The collective alone with at most k CTAs: no faster than traced (a cap above the CTAs it used changes
    nothing)."""
    if k >= region.comm_sms:
        return region.comm_ns
    return region.comm_ns * (region.comm_sms / k) ** alpha


def sm_loss(sm_count, held):
    """In-overlap slowdown of a many-wave grid that loses ``held`` SMs: S / (S - held) - 1 (infinite when none is
    left); numbers, or arrays of them element by element."""
    sm, free = np.asarray(sm_count, dtype=np.float64), np.subtract(sm_count, held, dtype=np.float64)
    out = np.where(free > 0, sm / np.where(free > 0, free, 1.0) - 1, np.inf)
    return float(out) if out.ndim == 0 else out


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


def recommend(preds: list[dict], margins: dict[str, float], key: str = "predicted_ns") -> int:
    """The index of the recommended schedule: the shortest predicted time (``key``) among the traced one (index 0)
    and those predicted to gain more than the calibration's median error of their kind (``margins`` by schedule; a
    smaller gain is as likely noise)."""
    def gains(i: int) -> bool:
        p = preds[i]
        margin = margins.get(p["schedule"], margins.get("*", 0.0))
        return i == 0 or preds[0][key] - p[key] > margin * p[key]
    return min((i for i in range(len(preds)) if gains(i)), key=lambda i: (preds[i][key], i))
