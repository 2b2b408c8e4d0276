"""``traceql advise --group-by-nvtx``: the step time of a training run under NCCL_MAX_CTAS k, predicted from the run.

Each step (an NVTX group's range instance on every device that ran it, as the critical path takes it:
:mod:`traceql.attribution.paths`) is replayed with each activity's duration changed to what k CTAs would give, the
step's dependencies as traced (stream order, launches, event waits, collectives ending after their last rank arrived):

- a collective's transfer with k CTAs instead of the k_d its grid had: transfer (k_d / k)^alpha (alpha per
  collective, calibrated on an overlap sweep: :mod:`traceql.advise`);
- a compute kernel that communication overlapped for a share f of its time, beside collectives holding h SMs on
  average: that part runs (1 + x(h_k)) / (1 + x(h)) times as long, x(h) = S / (S - h) - 1 (the SM model of a
  many-wave grid), with h_k = h min(1, k / k_dev), k_dev the CTAs of the device's collectives (time-weighted).

The replay moves what depends on the changed activities and keeps the slack that absorbs them; the step's predicted
time is its traced time less the replay's gain (a longer step: a negative gain).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from .model import sm_loss

SCHEMA = pa.schema([
    ("run_id", pa.string()), ("device_id", pa.int32()), ("nvtx", pa.string()), ("steps", pa.int64()),
    ("comm_ctas", pa.float64()), ("schedule", pa.string()), ("max_ctas", pa.int64()), ("step_ms", pa.float64()),
    ("predicted_ms", pa.float64()), ("predicted_lo_ms", pa.float64()), ("predicted_hi_ms", pa.float64()),
    ("gain_ms", pa.float64()), ("confident", pa.bool_()), ("recommended", pa.bool_()),
])
OPS = (("AllReduce", "all_reduce"), ("AllGather", "all_gather"), ("ReduceScatter", "reduce_scatter"))


def collective_op(name: str | None) -> str:
    """The collective a communication kernel runs, from NCCL's kernel name ('*' when it names none of them)."""
    for token, op in OPS:
        if name and token in name:
            return op
    return "*"


def loss_columns(facts: dict[str, np.ndarray], ks: Sequence[int], alpha: dict[str, float]) -> np.ndarray:
    """Per activity (rows of ``facts``) and k, how much shorter it runs with k CTAs (ns; negative: longer)."""
    n = len(facts["dur_ns"])
    sm = facts["sm_count"].astype(np.float64)
    comm = facts["is_comm"]
    ctas = np.minimum(np.nan_to_num(facts["ctas"].astype(np.float64)), sm)
    dur = facts["dur_ns"].astype(np.float64)
    work = facts["work_ns"].astype(np.float64)
    a = np.array([alpha.get(op, alpha.get("*", 1.0)) for op in facts["op"]])
    # the device's collectives: their CTAs, weighted by their time
    k_dev = np.full(n, np.nan)
    for d in np.unique(facts["device_key"]):
        on = (facts["device_key"] == d) & comm & (ctas > 0)
        if on.any():
            k_dev[facts["device_key"] == d] = np.average(ctas[on], weights=np.maximum(dur[on], 1))
    over = np.nan_to_num(facts["comm_overlap_ns"].astype(np.float64))
    f = np.where(dur > 0, over / np.maximum(dur, 1), 0.0)
    held = np.where(over > 0, np.nan_to_num(facts["comm_sm_share"].astype(np.float64)) * sm * dur
                    / np.maximum(over, 1), 0.0)
    x_d = np.array([sm_loss(int(s), h) if s else 0.0 for s, h in zip(sm, held, strict=True)])
    out = np.zeros((n, len(ks)))
    for j, k in enumerate(ks):
        longer = comm & (ctas > k)
        work_k = np.where(longer, work * (np.maximum(ctas, 1) / k) ** a, work)
        held_k = held * np.minimum(1.0, k / np.where(np.isnan(k_dev), np.inf, k_dev))
        x_k = np.array([sm_loss(int(s), h) if s else 0.0 for s, h in zip(sm, held_k, strict=True)])
        ratio = np.where(np.isfinite(x_d) & np.isfinite(x_k), (1 + x_k) / (1 + x_d), 1.0)
        dur_k = np.where(~comm & (f > 0), dur * ((1 - f) + f * ratio), dur)
        out[:, j] = np.where(comm, work - work_k, dur - dur_k)
    return out


def step_predictions(con, ks: Sequence[int], constants: tuple[dict, dict, dict]) -> pa.Table:
    """Per (run, device, NVTX group) of steps: the steps' traced time and, per k, their predicted time (ms); ``con``
    has the attribution's views prepared with NVTX groups."""
    from ..attribution.paths import run_replays

    alpha, bands, margins = constants
    facts = con.sql("""SELECT p.run_id, p.activity_id, f.ctas, f.comm_overlap_ns, f.comm_sm_share, f.sm_count,
                              f.dur_ns, f.name
                       FROM _path_activities p LEFT JOIN instance_facts f USING (run_id, activity_id)
                       ORDER BY p.run_id, p.global_pid, p.stream_id, p.correlation_id, p.activity_id"""
                    ).to_arrow_table()
    ks = sorted(set(ks))
    rows = []
    offset = 0
    for run_id, t, run in run_replays(con):
        ft = facts.slice(offset, t.num_rows)
        offset += t.num_rows
        kind = t.column("kind").to_numpy(zero_copy_only=False)
        names = ft.column("name").to_pylist()
        cols = {c: ft.column(c).to_numpy(zero_copy_only=False) for c in ("ctas", "comm_overlap_ns", "comm_sm_share",
                                                                          "sm_count", "dur_ns")}
        cols = {c: np.array([np.nan if v is None else v for v in a], dtype=np.float64) for c, a in cols.items()}
        cols["sm_count"] = np.nan_to_num(cols["sm_count"]).astype(np.int64)
        is_comm = kind == "comm"
        loss = loss_columns(cols | {"is_comm": is_comm, "work_ns": run.work, "device_key": run.dev,
                                    "op": [collective_op(nm) if c else "*" for nm, c in zip(names, is_comm,
                                                                                             strict=True)]},
                            ks, alpha)
        k_dev = {int(d): float(np.average(np.minimum(cols["ctas"][(run.dev == d) & is_comm], cols["sm_count"][
            (run.dev == d) & is_comm]), weights=np.maximum(cols["dur_ns"][(run.dev == d) & is_comm], 1)))
                 for d in np.unique(run.dev) if ((run.dev == d) & is_comm).any()}
        acc: dict[tuple, dict] = {}
        for code, steps in run.steps():
            gains = run.replay([m for _, m in steps], loss=loss, clip=False)
            for (dev, members), g in zip(steps, gains, strict=True):
                span = float(run.E[members].max() - run.S[members].min())
                a = acc.setdefault((dev, run.texts[code]), {"steps": 0, "span": 0.0, "gain": np.zeros(len(ks))})
                a["steps"] += 1
                a["span"] += span
                a["gain"] += g[:len(ks)]
        for (dev, nvtx), a in sorted(acc.items()):
            base = dict(run_id=run_id, device_id=dev, nvtx=nvtx, steps=a["steps"], comm_ctas=k_dev.get(dev),
                        step_ms=a["span"] / 1e6)
            preds = [dict(schedule="traced", max_ctas=None, predicted_ms=a["span"] / 1e6)]
            for j, k in enumerate(ks):
                if k_dev.get(dev) is None or k >= k_dev[dev]:
                    continue
                preds.append(dict(schedule="overlapped", max_ctas=k, predicted_ms=(a["span"] - a["gain"][j]) / 1e6))
            band = bands.get("steps", bands.get("*", 0.0))
            margin = margins.get("steps", margins.get("*", 0.0))
            best = min(range(len(preds)), key=lambda i: (preds[i]["predicted_ms"], i))
            if best and preds[0]["predicted_ms"] - preds[best]["predicted_ms"] <= margin * preds[best]["predicted_ms"]:
                best = 0
            for i, p in enumerate(preds):
                b = 0.0 if p["predicted_ms"] == preds[0]["predicted_ms"] else band * p["predicted_ms"]
                rows.append(base | p | dict(predicted_lo_ms=p["predicted_ms"] - b,
                                            predicted_hi_ms=p["predicted_ms"] + b,
                                            gain_ms=preds[0]["predicted_ms"] - p["predicted_ms"],
                                            confident=i > 0 and p["predicted_ms"] + b < preds[0]["predicted_ms"],
                                            recommended=i == best))
    return pa.Table.from_pylist(rows, schema=SCHEMA)
