"""A plain-words verdict per device: where the time went, what overlap cost compute and why, what it saved.

Computed from the attribution's tables: the device summary (unions of compute and communication) and the
signature rows (lost time = the overlapped instances' baseline time x their slowdown, with the slowdown's interval).
A row's loss goes to its class: all of it to the one cause that names it, a mixed row's split in proportion to its
predicted parts; rows the models leave unexplained stay unexplained, whatever their parts predicted. Conflated rows
and rows without a baseline are left out and counted. The loss of rows that communication overlapped is given
apart: other co-runners (another stream's kernels, copies) slow compute too.
"""

from __future__ import annotations

import pyarrow as pa

CAUSES = ("sm", "dram_bw", "cache", "clock", "link")
CAUSE_WORDS = {"sm": "SMs taken", "dram_bw": "DRAM bandwidth", "cache": "L2 cache", "clock": "a lower clock",
               "link": "shared links", "unexplained": "unexplained"}


def verdicts(summary: pa.Table, kernels: pa.Table) -> list[dict]:
    """One verdict per (run, device): numbers (ms) and a sentence."""
    rows = kernels.to_pylist()
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
            if r["class"] in CAUSES:
                by_cause[r["class"]] += base * s
            elif r["class"] == "mixed":
                parts = {c: max(0.0, r[c] or 0.0) for c in CAUSES}
                total = sum(parts.values()) or 1.0
                for c, part in parts.items():
                    by_cause[c] += base * s * part / total
            else:
                by_cause["unexplained"] += base * s
        hidden = (d["overlap_ns"] or 0) / 1e6
        v = dict(run_id=d["run_id"], device_id=d["device_id"], compute_ms=(d["compute_ns"] or 0) / 1e6,
                 comm_ms=(d["comm_ns"] or 0) / 1e6, hidden_comm_ms=hidden,
                 exposed_comm_ms=(d["exposed_comm_ns"] or 0) / 1e6, compute_lost_ms=lost, compute_lost_lo_ms=lo,
                 compute_lost_hi_ms=hi, compute_lost_beside_comm_ms=comm_lost, lost_by_cause_ms=by_cause,
                 saved_ms=hidden - lost,
                 instances_left_out=skipped)
        v["text"] = _sentence(v)
        out.append(v)
    return out


def _sentence(v: dict) -> str:
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
    return text
