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
import pyarrow.compute as pc

from .model import recommend, sm_loss

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


def comm_ctas(device: np.ndarray, ctas: np.ndarray, dur: np.ndarray, comm: np.ndarray) -> dict[int, float]:
    """Per device, the CTAs its collectives ran with (at most its SMs), weighted by their time."""
    out = {}
    for d in np.unique(device):
        on = (device == d) & comm & (ctas > 0)
        if on.any():
            out[int(d)] = float(np.average(ctas[on], weights=np.maximum(dur[on], 1)))
    return out


def loss_columns(facts: dict[str, np.ndarray], ks: Sequence[int], alpha: dict[str, float],
                 k_dev: dict[int, float]) -> np.ndarray:
    """Per activity (rows of ``facts``; ``ctas`` at most the SMs) and k, how much shorter it runs with k CTAs (ns;
    negative: longer); ``k_dev``: per device, its collectives' CTAs (:func:`comm_ctas`)."""
    n = len(facts["dur_ns"])
    sm, comm, ctas = facts["sm_count"].astype(np.float64), facts["is_comm"], facts["ctas"]
    dur = facts["dur_ns"]
    work = facts["work_ns"].astype(np.float64)
    a = np.array([alpha.get(op, alpha.get("*", 1.0)) for op in facts["op"]])
    devices, where = np.unique(facts["device_key"], return_inverse=True)
    kd = np.array([k_dev.get(int(d), np.inf) for d in devices])[where]
    over = np.nan_to_num(facts["comm_overlap_ns"])
    f = np.where(dur > 0, over / np.maximum(dur, 1), 0.0)
    held = np.where(over > 0, np.nan_to_num(facts["comm_sm_share"]) * sm * dur / np.maximum(over, 1), 0.0)
    x_d = np.where(sm > 0, sm_loss(sm, held), 0.0)
    out = np.zeros((n, len(ks)))
    for j, k in enumerate(ks):
        longer = comm & (ctas > k)
        work_k = np.where(longer, work * (np.maximum(ctas, 1) / k) ** a, work)
        x_k = np.where(sm > 0, sm_loss(sm, held * np.minimum(1.0, k / kd)), 0.0)
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
        cols = {c: pc.fill_null(ft.column(c).cast(pa.float64()), np.nan).to_numpy()
                for c in ("ctas", "comm_overlap_ns", "comm_sm_share", "sm_count", "dur_ns")}
        cols["sm_count"] = np.nan_to_num(cols["sm_count"]).astype(np.int64)
        cols["ctas"] = np.minimum(np.nan_to_num(cols["ctas"]), cols["sm_count"])
        is_comm = t.column("kind").to_numpy(zero_copy_only=False) == "comm"
        k_dev = comm_ctas(run.dev, cols["ctas"], cols["dur_ns"], is_comm)
        ops = [collective_op(nm) if c else "*" for nm, c in zip(ft.column("name").to_pylist(), is_comm, strict=True)]
        loss = loss_columns(cols | {"is_comm": is_comm, "work_ns": run.work, "device_key": run.dev, "op": ops},
                            ks, alpha, k_dev)
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
            best = recommend(preds, {"overlapped": margin}, key="predicted_ms")
            for i, p in enumerate(preds):
                b = 0.0 if p["predicted_ms"] == preds[0]["predicted_ms"] else band * p["predicted_ms"]
                rows.append(base | p | dict(predicted_lo_ms=p["predicted_ms"] - b,
                                            predicted_hi_ms=p["predicted_ms"] + b,
                                            gain_ms=preds[0]["predicted_ms"] - p["predicted_ms"],
                                            confident=i > 0 and p["predicted_ms"] + b < preds[0]["predicted_ms"],
                                            recommended=i == best))
    return pa.Table.from_pylist(rows, schema=SCHEMA)
