"""A plain-words verdict per device: where the time went, what overlap cost compute and why, what it saved.

Computed from the attribution's tables: the device summary (unions of compute and communication) and the
signature rows (lost time = the overlapped instances' baseline time x their slowdown, with the slowdown's interval).
A row's loss goes to its class: all of it to the one cause that names it, a mixed row's split in proportion to its
predicted parts; rows the models leave unexplained stay unexplained, whatever their parts predicted. Conflated rows
and rows without a baseline are left out and counted. The loss of rows that communication overlapped is given
apart: other co-runners (another stream's kernels, copies) slow compute too.

Coverage is measured, not assumed: the share of the overlapped compute time and of the overlapped communication time
(the durations of their overlapped instances) whose rows got an answer, a cause or a significant "none", rather than
``conflated``, ``unexplained`` or no baseline. Where the run's collectives were matched across its devices
(``rank_waits``), the verdict says how long this device's communication waited for a late rank, and which. Where
kernels were held back from starting (``activity_delays``), it says how long, and by which co-runner. Where the
activities are grouped into steps (NVTX), it says how much of each cause's loss reached the steps' time on their
critical paths (``traceql.attribution.paths``), and on which other device's work the paths ran.
"""

from __future__ import annotations

import pyarrow as pa

from .classes import CAUSES, cause_shares

CAUSE_WORDS = {"sm": "SMs taken", "dram_bw": "DRAM bandwidth", "cache": "L2 cache", "clock": "a lower clock",
               "link": "shared links", "unexplained": "unexplained"}


def coverage(rows: list[dict]) -> dict[str, float | None]:
    """The share of overlapped compute and of overlapped communication kernel time (their overlapped instances'
    durations) in rows that got an answer: not conflated, with a baseline, and not unexplained (None: none overlapped).
    """
    out: dict[str, float | None] = {}
    for side in ("compute", "comm"):
        mine = [r for r in rows if r["activity"] == "kernel" and (r["kind"] == "comm") == (side == "comm")
                and r.get("n_overlapped") and r.get("sum_t1_ns")]
        total = sum(r["sum_t1_ns"] for r in mine)
        answered = sum(r["sum_t1_ns"] for r in mine if not r["conflated"] and r["t0_ns"] is not None
                       and r["class"] not in ("unexplained", "conflated"))
        out[f"coverage_{side}"] = answered / total if total else None
    return out


def verdicts(summary: pa.Table, kernels: pa.Table, waits: pa.Table | None = None,
             delays: pa.Table | None = None, paths: pa.Table | None = None) -> list[dict]:
    """One verdict per (run, device): numbers (ms) and a sentence."""
    rows = kernels.to_pylist()
    steps = {(r["run_id"], r["device_id"]): r for r in (paths.to_pylist() if paths is not None else [])
             if r["nvtx"] is None}
    held: dict[tuple, list[dict]] = {}
    for r in delays.to_pylist() if delays is not None else []:
        held.setdefault((r["run_id"], r["device_id"]), []).append(r)
    waited = {(w["run_id"], w["device_id"]): w for w in (waits.to_pylist() if waits is not None else [])
              if w["nvtx"] is None}
    out = []
    for d in summary.to_pylist():
        if d["nvtx"] is not None:
            continue
        mine = [r for r in rows if r["run_id"] == d["run_id"] and r["device_id"] == d["device_id"]]
        compute = [r for r in mine if r["activity"] == "kernel" and r["kind"] != "comm"]
        lost = lo = hi = comm_lost = 0.0
        by_cause = dict.fromkeys((*CAUSES, "unexplained"), 0.0)
        skipped = 0
        for r in compute:
            if not r["n_overlapped"]:
                continue
            if r["slowdown_lo"] is None or r["sum_t0_ns"] is None or r["conflated"]:
                skipped += r["n_overlapped"]  # no baseline, no interval (one Nsight Compute duration), or conflated
                continue
            base = r["sum_t0_ns"] / 1e6
            s = r["slowdown"]
            lost += base * s
            lo += base * r["slowdown_lo"]
            hi += base * r["slowdown_hi"]
            if r["comm_fraction"]:
                comm_lost += base * s
            if not r["significant"] or s <= 0:
                continue
            for c, share in cause_shares(r["class"], r).items():
                by_cause[c] += base * s * share
        hidden = (d["overlap_ns"] or 0) / 1e6
        v = dict(run_id=d["run_id"], device_id=d["device_id"], compute_ms=(d["compute_ns"] or 0) / 1e6,
                 comm_ms=(d["comm_ns"] or 0) / 1e6, hidden_comm_ms=hidden,
                 exposed_comm_ms=(d["exposed_comm_ns"] or 0) / 1e6, compute_lost_ms=lost, compute_lost_lo_ms=lo,
                 compute_lost_hi_ms=hi, compute_lost_beside_comm_ms=comm_lost, lost_by_cause_ms=by_cause,
                 saved_ms=hidden - lost,
                 instances_left_out=skipped, **coverage(mine))
        w = waited.get((d["run_id"], d["device_id"]), {})
        v.update({k: w.get(k) for k in ("wait_ms", "exposed_wait_ms", "late_run_id", "late_device_id")})
        mine_held = held.get((d["run_id"], d["device_id"]), [])
        v["held_back_ms"] = sum(r["delay_ms"] for r in mine_held) if mine_held else None
        v["held_back_n"] = sum(r["n"] for r in mine_held) if mine_held else None
        by = {}
        for r in mine_held:
            if r["held_by"] is not None:
                by[r["held_by"]] = by.get(r["held_by"], 0.0) + r["delay_ms"]
        v["held_back_by"] = max(by, key=lambda k: (by[k], k)) if by else None
        p = steps.get((d["run_id"], d["device_id"]))
        v["step_ms"] = p["step_ms"] if p else None
        v["reached_by_cause_ms"] = {c: p[f"reached_{c}_ms"] for c in (*CAUSES, "unexplained")} if p else None
        v["path_lost_by_cause_ms"] = {c: p[f"lost_{c}_ms"] for c in (*CAUSES, "unexplained")} if p else None
        v["path_other_devices_ms"] = p["path_other_devices_ms"] if p else None
        v["path_set_by_device_id"] = p["set_by_device_id"] if p else None
        v["path_wait_reached_ms"] = p["reached_wait_ms"] if p else None
        out.append(v)
    by_device = {(v["run_id"], v["device_id"]): v for v in out}
    for v in out:
        v["text"] = _sentence(v, by_device.get((v["late_run_id"], v["late_device_id"])))
    return out


def _sentence(v: dict, late: dict | None = None) -> str:
    causes = sorted(((ms, c) for c, ms in v["lost_by_cause_ms"].items() if ms > 0.0005), reverse=True)
    why = ", ".join(f"{ms:.3f} ms to {CAUSE_WORDS[c]}" for ms, c in causes) or "no significant slowdown"
    text = (f"device {v['device_id']} (run {v['run_id']}): {v['compute_ms']:.3f} ms of compute, {v['comm_ms']:.3f} ms "
            f"of communication, {v['hidden_comm_ms']:.3f} ms of it hidden under compute and "
            f"{v['exposed_comm_ms']:.3f} ms exposed. Running beside other GPU work cost compute "
            f"{v['compute_lost_ms']:.3f} ms [{v['compute_lost_lo_ms']:.3f}, {v['compute_lost_hi_ms']:.3f}] ({why}), "
            f"{v['compute_lost_beside_comm_ms']:.3f} ms of it in kernels that communication overlapped; against "
            f"running them one after the other it saved {v['saved_ms']:.3f} ms.")
    if v["instances_left_out"]:
        text += (f" {v['instances_left_out']} overlapped compute instances had no baseline with an interval (or were "
                 "conflated) and are not counted.")
    shares = [f"{v[f'coverage_{s}']:.0%} of overlapped {w} time" for s, w in (("compute", "compute"),
                                                                              ("comm", "communication"))
              if v.get(f"coverage_{s}") is not None]
    if shares:
        text += f" Answered (a cause, or no significant loss): {' and '.join(shares)}."
    if v.get("wait_ms") and v.get("late_device_id") is not None:
        text += (f" {v['wait_ms']:.3f} ms of its communication was waiting for device {v['late_device_id']} to arrive")
        if late is not None and late["compute_lost_ms"] > 0:
            causes = sorted(((ms, c) for c, ms in late["lost_by_cause_ms"].items() if ms > 0.0005), reverse=True)
            top = f", most of it to {CAUSE_WORDS[causes[0][1]]}" if causes else ""
            text += (f", which was late; its compute lost {late['compute_lost_ms']:.3f} ms beside other GPU "
                     f"work{top}")
        text += "."
        if v.get("exposed_wait_ms") is not None:
            text += (f" {v['exposed_wait_ms']:.3f} ms of that wait had no compute of its own beside it; the rest was "
                     "hidden under its compute.")
    if v.get("step_ms") is not None:
        reached = sorted(((ms, c) for c, ms in v["reached_by_cause_ms"].items() if ms > 0.0005), reverse=True)
        text += f" Its steps took {v['step_ms']:.3f} ms"
        if reached:
            text += ("; the losses on their critical paths, on any device, cost them " + ", ".join(
                f"{ms:.3f} ms to {CAUSE_WORDS[c]}" for ms, c in reached) + " (its own activities lost "
                + ", ".join(f"{v['path_lost_by_cause_ms'][c]:.3f} ms to {CAUSE_WORDS[c]}" for _, c in reached)
                + ")")
        else:
            text += "; no loss on their critical paths reached their time"
        if v.get("path_set_by_device_id") is not None:
            text += (f"; for {v['path_other_devices_ms']:.3f} ms their critical path ran on device "
                     f"{v['path_set_by_device_id']}'s work, which its steps waited for")
        if v.get("path_wait_reached_ms"):
            text += f"; waiting for other ranks at collectives cost them {v['path_wait_reached_ms']:.3f} ms"
        text += "."
    if v.get("held_back_ms"):
        text += (f" {v['held_back_n']} kernel launches were held back from starting, {v['held_back_ms']:.3f} ms in "
                 "all, with nothing they depended on pending")
        text += (f"; most of it until {v['held_back_by']} released the SMs." if v.get("held_back_by") else ".")
    return text
