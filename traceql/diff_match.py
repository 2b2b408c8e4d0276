"""The comparison behind ``traceql diff``: pair devices, match signatures, measure each change with its interval,
per-device metrics, the waterfall of the step-time change by cause, and a verdict per device (see traceql.diff)."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pyarrow as pa

from . import stats
from .attribution.verdict import CAUSES, verdicts
from .diff_model import (
    ABS_NOISE_NS,
    ATTR_FIELDS,
    DIFF_METRICS,
    FRACTION_NOISE,
    LEVEL,
    MAX_N,
    MIN_N,
    N_BOOT,
    PRACTICAL_SHARE,
    RUN_NOISE,
    SIDE_METRICS,
    STEP_NOISE,
    WATERFALL,
    Diff,
    Side,
    data_key,
)
from .errors import BadInputError, UsageError

NAN = float("nan")


# --- pairing ----------------------------------------------------------------------------------------------------

def pair_devices(a: Side, b: Side) -> tuple[list[dict], list[str]]:
    """(run_a, run_b, device_id, device label, gpu) for every device both sides ran work on; notes on the rest."""
    notes = []
    ra, rb = a.runs, b.runs
    by_name_a, by_name_b = {r["name"]: r for r in ra}, {r["name"]: r for r in rb}
    if len(ra) == 1 and len(rb) == 1:
        runs = [(ra[0], rb[0])]
    elif len(by_name_a) == len(ra) and len(by_name_b) == len(rb) and set(by_name_a) == set(by_name_b):
        runs = [(by_name_a[k], by_name_b[k]) for k in sorted(by_name_a)]
    elif len(ra) == len(rb):
        runs = list(zip(sorted(ra, key=lambda r: (r["name"], r["run_id"])),
                        sorted(rb, key=lambda r: (r["name"], r["run_id"])), strict=True))
        notes.append("runs paired in order of their names: " + ", ".join(f"{x['name']} with {y['name']}"
                                                                          for x, y in runs))
    else:
        raise UsageError(f"A has {len(ra)} runs and B has {len(rb)}: compare the same ranks on both sides "
                         "(PATH@RUN,RUN... picks runs of a run directory)")
    active_a = {(s["run_id"], s["device_id"]) for s in a.signatures}
    active_b = {(s["run_id"], s["device_id"]) for s in b.signatures}
    pairs, mismatched = [], []
    for x, y in runs:
        devs_a = sorted(d for r, d in active_a if r == x["run_id"])
        devs_b = sorted(d for r, d in active_b if r == y["run_id"])
        for d in sorted(set(devs_a) ^ set(devs_b)):
            side, run = ("A", x) if d in devs_a else ("B", y)
            notes.append(f"GPU {d} ran work only in {side} (run {run['name']}): not compared")
        for d in sorted(set(devs_a) & set(devs_b)):
            gpu_a, gpu_b = a.devices.get((x["run_id"], d)), b.devices.get((y["run_id"], d))
            if gpu_a != gpu_b:
                mismatched.append(f"GPU {d} is {gpu_a} in A (run {x['name']}) and {gpu_b} in B (run {y['name']})")
            label = f"GPU {d}" if len(runs) == 1 else f"{x['name']}/{y['name']} GPU {d}"
            pairs.append(dict(device=label, run_a=x["run_id"], run_b=y["run_id"], device_id=d, gpu=gpu_a))
    if mismatched:
        raise BadInputError(f"A ({a.spec}) and B ({b.spec}) ran on different GPU models: {'; '.join(mismatched)}; "
                            "a diff compares runs of the same program on the same GPU model")
    if not pairs:
        raise BadInputError(f"A ({a.spec}) and B ({b.spec}) have no GPU in common that ran work (A: "
                            f"{_devices(active_a)}; B: {_devices(active_b)})")
    return pairs, notes


def _devices(active: set) -> str:
    return ", ".join(f"GPU {d} of run {r}" for r, d in sorted(active)) or "none"


def run_label_changes(a: Side, b: Side) -> list[dict]:
    """Run labels (``traceql collect`` records NCCL_* variables, versions, the command) with one value on each side
    that differs: what changed between the runs, as recorded."""
    out = []
    for key in sorted({k for r in a.runs + b.runs for k in r["labels"]}):
        va, vb = {r["labels"].get(key) for r in a.runs}, {r["labels"].get(key) for r in b.runs}
        if len(va) == 1 and len(vb) == 1 and va != vb:
            out.append(dict(source="run label", key=key, a=va.pop(), b=vb.pop()))
    return out


def _nvtx_labels(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    return dict(p.split("=", 1) for p in text.split(";") if p.find("=") > 0)


def nvtx_label_changes(a: Side, b: Side) -> dict[str, tuple[str, str]]:
    """``key=value`` labels of NVTX texts (groups and steps) with one value throughout each side, different between
    them (``max_ctas=2`` against ``max_ctas=8``): they describe the change, not the step, so texts are matched
    without them."""
    def values(side: Side) -> dict[str, set]:
        texts = {s["nvtx"] for s in side.signatures} | {w["text"] for w in side.windows}
        out: dict[str, set] = defaultdict(set)
        for t in texts:
            for k, v in _nvtx_labels(t).items():
                out[k].add(v)
        return out

    va, vb = values(a), values(b)
    return {k: (next(iter(va[k])), next(iter(vb[k]))) for k in sorted(set(va) & set(vb))
            if len(va[k]) == 1 and len(vb[k]) == 1 and va[k] != vb[k]}


def normalizer(changed: dict[str, tuple[str, str]]):
    def norm(text: str | None) -> str | None:
        if text is None or not changed:
            return text
        return ";".join(p for p in text.split(";") if not (p.find("=") > 0 and p.split("=", 1)[0] in changed))
    return norm


# --- signatures -------------------------------------------------------------------------------------------------

def _sig_key(s: dict, norm) -> tuple:
    return (s["activity"], s["name"], s["grid"], s["block"], s["dynamic_smem_bytes"], s["bytes"], norm(s["nvtx"]))


def _launch(s: dict | None) -> str | None:
    if s is None:
        return None
    if s["activity"] != "kernel":
        return f"{s['bytes']} B"
    return f"grid {s['grid']} block {s['block']} smem {s['dynamic_smem_bytes'] or 0}"


def match_signatures(sa: list[dict], sb: list[dict], norm) -> list[tuple[str, dict | None, dict | None]]:
    """(match, A's signature, B's): exact (name and launch shape), name (what is left, paired by name in order of
    first occurrence), vanished (A only), new (B only)."""
    ka = {_sig_key(s, norm): s for s in sa}
    kb = {_sig_key(s, norm): s for s in sb}
    out = [("exact", ka[k], kb[k]) for k in ka if k in kb]
    left_a: dict[tuple, list] = defaultdict(list)
    left_b: dict[tuple, list] = defaultdict(list)
    for k, s in ka.items():
        if k not in kb:
            left_a[(k[0], k[1], k[6])].append(s)
    for k, s in kb.items():
        if k not in ka:
            left_b[(k[0], k[1], k[6])].append(s)
    for g in sorted(set(left_a) | set(left_b), key=repr):
        xs = sorted(left_a.get(g, []), key=lambda s: s["first_ns"])
        ys = sorted(left_b.get(g, []), key=lambda s: s["first_ns"])
        n = min(len(xs), len(ys))
        out += [("name", x, y) for x, y in zip(xs[:n], ys[:n], strict=True)]
        out += [("vanished", x, None) for x in xs[n:]] + [("new", None, y) for y in ys[n:]]
    return out


def shape_change(a: str | None, b: str | None) -> str:
    """Only the launch fields that differ: 'grid 2x1x1 -> 8x1x1'."""
    if a is None or b is None or a == b:
        return ""
    fa, fb = a.split(" "), b.split(" ")
    if len(fa) != len(fb) or len(fa) % 2:
        return f"{a} -> {b}"
    return ", ".join(f"{fa[i]} {fa[i + 1]} -> {fb[i + 1]}" for i in range(0, len(fa), 2) if fa[i + 1] != fb[i + 1])


def _attr_index(att_rows: list[dict]) -> dict[tuple, list[dict]]:
    index: dict[tuple, list[dict]] = defaultdict(list)
    for r in att_rows:
        index[(r["run_id"], r["device_id"], r["activity"], r["name"], r["grid"], r["block"], r["dynamic_smem_bytes"],
               r["bytes"], r["nvtx"])].append(r)
    return index


def _attr_of(index: dict, s: dict | None) -> tuple[dict, bool]:
    """One side's attribution of a signature, and whether it is several kinds of work (split into duration modes or
    conflated). Modes are summed: instances, and the slowdown and its bounds weighted by baseline time (the rule of
    the verdict's lost time); the class of the mode that lost the most."""
    empty = dict.fromkeys(ATTR_FIELDS)
    if s is None:
        return empty, False
    rows = index.get((s["run_id"], s["device_id"], s["activity"], s["name"], s["grid"], s["block"],
                      s["dynamic_smem_bytes"], s["bytes"], s["nvtx"]), [])
    if not rows:
        return empty, False
    mixture = any(r["mode"] is not None or r["conflated"] for r in rows)
    if len(rows) == 1:
        return {f: rows[0][f] for f in ATTR_FIELDS}, mixture
    out = dict(empty, n_overlapped=sum(r["n_overlapped"] or 0 for r in rows), **{"class": "mixed"})
    counted = [r for r in rows if r["sum_t0_ns"] and r["slowdown"] is not None and not r["conflated"]]
    base = sum(r["sum_t0_ns"] for r in counted)
    if base > 0:
        for f in ("slowdown", "slowdown_lo", "slowdown_hi", *CAUSES, "residual"):
            vals = [(r["sum_t0_ns"], r[f]) for r in counted]
            out[f] = None if any(v is None for _, v in vals) else sum(w * v for w, v in vals) / base
        out["class"] = max(counted, key=lambda r: r["sum_t0_ns"] * r["slowdown"])["class"]
    return out, mixture


def change_interval(da: np.ndarray, db: np.ndarray, mixture: bool,
                    noise: float = RUN_NOISE) -> tuple[str, float, float, float, float, float]:
    """(statistic, centre A, centre B, change, lo, hi): B over A - 1 with its 95% interval, widened on both sides by the
    run-to-run noise (``noise``, RUN_NOISE for a signature, or ABS_NOISE_NS of A's centre when that is larger).

    With MIN_N values or more a side: the ratio of medians (of means for several kinds of work) and its bootstrap
    interval. With fewer, where a bootstrap is too narrow: the median of the pairwise ratios and the exact Mann-Whitney
    interval (from 4 values a side); several kinds of work with fewer: no interval (NaN bounds).
    """
    key = ("diff", data_key(da, db))
    small = min(len(da), len(db)) < MIN_N
    if mixture:
        name, ca, cb = "mean", float(np.mean(da)), float(np.mean(db))
        s, lo, hi = stats.mean_ratio_ci(da, db, key=key, level=LEVEL, n_boot=N_BOOT, max_n=MAX_N)
        if small:
            lo = hi = NAN
    elif small:
        name, ca, cb = "pairwise median", float(np.median(da)), float(np.median(db))
        s, lo, hi = stats.shift_ratio_ci(da[:MAX_N], db[:MAX_N], LEVEL)
    else:
        name, ca, cb = "median", float(np.median(da)), float(np.median(db))
        s, lo, hi = stats.slowdown_ci(da, db, key=key, level=LEVEL, n_boot=N_BOOT, max_n=MAX_N)
    noise = max(noise, ABS_NOISE_NS / ca) if ca > 0 else NAN
    return name, ca, cb, s, lo - noise, hi + noise


def _significant(lo: float | None, hi: float | None) -> bool:
    return lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi) and (lo > 0 or hi < 0)


def _f(v) -> float | None:
    return None if v is None or not math.isfinite(float(v)) else float(v)


def signature_rows(pair: dict, matched: list, index_a: dict, index_b: dict, steps_a, steps_b,
                   step_ns: float | None = None) -> list[dict]:
    """A row per matched signature; ``step_ns``: A's step time (the GPU span, ungrouped), against which a change
    must weigh at least PRACTICAL_SHARE to count."""
    rows = []
    for match, sa, sb in matched:
        att_a, mix_a = _attr_of(index_a, sa)
        att_b, mix_b = _attr_of(index_b, sb)
        s = sa or sb
        row = dict(device=pair["device"], run_a=pair["run_a"], run_b=pair["run_b"], device_id=pair["device_id"],
                   nvtx=s["nvtx"], nvtx_b=sb["nvtx"] if sb else None, activity=s["activity"], kind=s["kind"],
                   name=s["name"], short_name=s["short_name"], match=match, launch_a=_launch(sa), launch_b=_launch(sb),
                   n_a=sa["n"] if sa else 0, n_b=sb["n"] if sb else 0, statistic=None, dur_a_ns=None, dur_b_ns=None,
                   change=None, change_lo=None, change_hi=None, significant=False,
                   direction=match if match in ("new", "vanished") else "same",
                   time_a_ns=_per_step(sa, steps_a), time_b_ns=_per_step(sb, steps_b),
                   clock_a_mhz=sa["clock_mhz"] if sa else None, clock_b_mhz=sb["clock_mhz"] if sb else None)
        row["time_delta_ns"] = (row["time_b_ns"] or 0) - (row["time_a_ns"] or 0) \
            if row["time_a_ns"] is not None or row["time_b_ns"] is not None else None
        if sa and sb:
            da, db = np.asarray(sa["durs"], dtype=float), np.asarray(sb["durs"], dtype=float)
            stat, ca, cb, c, lo, hi = change_interval(da, db, mix_a or mix_b)
            row.update(statistic=stat, dur_a_ns=ca, dur_b_ns=cb, change=_f(c), change_lo=_f(lo), change_hi=_f(hi))
            row["significant"] = _significant(row["change_lo"], row["change_hi"]) and (
                not step_ns or abs(row["time_delta_ns"] or 0) >= PRACTICAL_SHARE * step_ns)
            if row["significant"]:
                row["direction"] = "slower" if row["change"] > 0 else "faster"
        elif s:
            d = np.asarray(s["durs"], dtype=float)
            row["dur_a_ns" if sa else "dur_b_ns"] = float(np.median(d))
        for f in ATTR_FIELDS:
            row[f"{f}_a"], row[f"{f}_b"] = att_a[f], att_b[f]
        sd = (att_a["slowdown"], att_a["slowdown_lo"], att_a["slowdown_hi"], att_b["slowdown"], att_b["slowdown_lo"],
              att_b["slowdown_hi"])
        if att_a["slowdown"] is not None and att_b["slowdown"] is not None:
            d, lo, hi = stats.difference_interval(*(NAN if v is None else v for v in sd))
            row.update(slowdown_delta=_f(d), slowdown_delta_lo=_f(lo), slowdown_delta_hi=_f(hi))
        else:
            row.update(slowdown_delta=None, slowdown_delta_lo=None, slowdown_delta_hi=None)
        row["class_changed"] = bool(sa and sb and att_a["class"] is not None and att_b["class"] is not None
                                    and att_a["class"] != att_b["class"])
        rows.append(row)
    return rows


def _per_step(s: dict | None, steps: int | None) -> float | None:
    if s is None or not steps:
        return None
    return s["total_ns"] / steps


def kernel_order(r: dict) -> tuple:
    return (not r["significant"], r["direction"] not in ("new", "vanished"), -abs(r["time_delta_ns"] or 0),
            r["name"] or "", r["launch_a"] or "", r["launch_b"] or "")


# --- per device -------------------------------------------------------------------------------------------------

def window_arrays(windows: list[dict], run_id: str, device_id: int) -> dict[str, np.ndarray]:
    ws = [w for w in windows if w["run_id"] == run_id and w["device_id"] == device_id]
    length = np.array([w["end_ns"] - w["start_ns"] for w in ws], dtype=float)
    alone, ovl, exposed = (np.array([w[c] for w in ws], dtype=float)
                           for c in ("compute_alone_ns", "overlap_ns", "exposed_ns"))
    return dict(len=length, compute=alone + ovl, comm=ovl + exposed, overlap=ovl, exposed=exposed,
                other=length - alone - ovl - exposed, text=[w["text"] for w in ws])


def metric(a: np.ndarray | float | None, b: np.ndarray | float | None, key: tuple, *, scale: float = 1.0,
           a_int: tuple | None = None, b_int: tuple | None = None, noise: float | None = None) -> dict:
    """One summary metric: the mean over steps on each side (or one value per side), the change b - a and its 95%
    interval (MOVER from each side's interval when given; a bootstrap over steps when both sides have MIN_N or more;
    else the point: one measurement per run), widened by STEP_NOISE of the larger side; significant when the interval
    excludes 0."""
    va = _values(a)
    vb = _values(b)
    if va is None or vb is None:
        return dict(a=_f(np.mean(va) * scale) if va is not None else None,
                    b=_f(np.mean(vb) * scale) if vb is not None else None,
                    delta=None, rel=None, lo=None, hi=None, significant=None)
    ma, mb = float(np.mean(va)), float(np.mean(vb))
    if a_int is not None and b_int is not None and None not in (*a_int, *b_int):
        d, lo, hi = stats.difference_interval(ma, *a_int, mb, *b_int)
    elif len(va) >= MIN_N and len(vb) >= MIN_N:
        d, lo, hi = stats.mean_difference_ci(va, vb, key=(*key, data_key(va, vb)), level=LEVEL, n_boot=N_BOOT,
                                             max_n=MAX_N)
    else:
        d, lo, hi = mb - ma, mb - ma, mb - ma
    if noise is None:
        noise = STEP_NOISE * max(abs(ma), abs(mb))
    lo, hi = lo - noise, hi + noise
    return dict(a=ma * scale, b=mb * scale, delta=d * scale, rel=_f(mb / ma - 1) if ma else None,
                lo=_f(lo * scale), hi=_f(hi * scale), significant=_significant(lo, hi))


def _values(x) -> np.ndarray | None:
    if x is None:
        return None
    v = np.atleast_1d(np.asarray(x, dtype=float))
    v = v[np.isfinite(v)]
    return v if len(v) else None


def _rows_of(side: Side, which: str) -> list[dict]:
    """The attribution's ``kernels`` or ``summary`` rows, converted once per side."""
    if which not in side.cache:
        side.cache[which] = getattr(side.attribution, which).to_pylist()
    return side.cache[which]


def lost_time(side: Side, run_id: str, device_id: int, in_steps: bool) -> dict:
    """The attribution's lost compute time on one device (the verdict's rule): ``step`` over its NVTX groups when
    in_steps (else the whole run), ``run`` over the whole run, with the baseline time the latter is counted against."""
    summary = [r for r in _rows_of(side, "summary")
               if r["run_id"] == run_id and r["device_id"] == device_id and r["nvtx"] is None]
    if not summary:
        return {}
    mine = [r for r in _rows_of(side, "kernels") if r["run_id"] == run_id and r["device_id"] == device_id]
    summary_table = pa.Table.from_pylist(summary, schema=side.attribution.summary.schema)

    def verdict(rows: list[dict]) -> dict:
        return verdicts(summary_table, pa.Table.from_pylist(rows, schema=side.attribution.kernels.schema))[0]

    whole = verdict(mine)
    base = sum(r["sum_t0_ns"] for r in mine if r["activity"] == "kernel" and r["kind"] != "comm"
               and r["n_overlapped"] and r["slowdown_lo"] is not None and r["sum_t0_ns"] is not None
               and not r["conflated"]) / 1e6
    return dict(step=verdict([r for r in mine if r["nvtx"] is not None]) if in_steps else whole, run=whole,
                base_ms=base, compute_slowdown=summary[0]["compute_slowdown"],
                overlap_fraction=summary[0]["overlap_fraction"])


def device_metrics(pair: dict, a: Side, b: Side, grouped: bool) -> tuple[dict, dict, dict]:
    """(metrics by name, the waterfall's inputs, step counts) of one device pair."""
    wa = window_arrays(a.windows, pair["run_a"], pair["device_id"])
    wb = window_arrays(b.windows, pair["run_b"], pair["device_id"])
    sa = window_arrays(a.spans, pair["run_a"], pair["device_id"])
    sb = window_arrays(b.spans, pair["run_b"], pair["device_id"])
    key = ("diff-device", pair["device"])
    la, lb = lost_time(a, pair["run_a"], pair["device_id"], grouped), lost_time(b, pair["run_b"], pair["device_id"],
                                                                                 grouped)
    n_a, n_b = len(wa["len"]), len(wb["len"])
    m = {"steps": dict(a=n_a if grouped else None, b=n_b if grouped else None,
                       delta=(n_b - n_a) if grouped else None, rel=None, lo=None, hi=None, significant=None)}
    ms = 1e-6
    # the parts of a step move against each other: their run-to-run noise is a share of the step, not of themselves
    step_noise = STEP_NOISE * max([float(np.mean(x)) for x in (wa["len"], wb["len"]) if len(x)] or [0.0])
    m["step_ms"] = metric(wa["len"] if grouped and n_a else None, wb["len"] if grouped and n_b else None,
                          (*key, "step"), scale=ms)
    m["span_ms"] = metric(sa["len"], sb["len"], (*key, "span"), scale=ms)
    for name, part in (("compute_ms", "compute"), ("comm_ms", "comm"), ("overlap_ms", "overlap"),
                       ("exposed_comm_ms", "exposed"), ("other_ms", "other")):
        m[name] = metric(wa[part] if n_a else None, wb[part] if n_b else None, (*key, part), scale=ms,
                         noise=step_noise)
    m["hidden_comm_fraction"] = metric(_ratio(wa["overlap"], wa["comm"]), _ratio(wb["overlap"], wb["comm"]),
                                       (*key, "hidden"), noise=FRACTION_NOISE)
    ea = a.energy.get((pair["run_a"], pair["device_id"])) if n_a else None
    eb = b.energy.get((pair["run_b"], pair["device_id"])) if n_b else None
    per = [(n_a or 1) if grouped else 1, (n_b or 1) if grouped else 1]
    m["energy_j"] = metric(ea and ea[0] / per[0], eb and eb[0] / per[1], (*key, "energy"),
                           a_int=ea and (ea[1] / per[0], ea[2] / per[0]), b_int=eb and (eb[1] / per[1], eb[2] / per[1]))
    m["mean_power_w"] = metric(ea and ea[0] / (ea[3] / 1e9), eb and eb[0] / (eb[3] / 1e9), (*key, "power"),
                               a_int=ea and (ea[1] / (ea[3] / 1e9), ea[2] / (ea[3] / 1e9)),
                               b_int=eb and (eb[1] / (eb[3] / 1e9), eb[2] / (eb[3] / 1e9)))
    per_a, per_b = (n_a or None) if grouped else 1, (n_b or None) if grouped else 1
    lost = [_lost_per_step(la, per_a), _lost_per_step(lb, per_b)]
    m["compute_lost_ms"] = metric(lost[0][0], lost[1][0], (*key, "lost"), a_int=lost[0][1], b_int=lost[1][1],
                                  noise=step_noise * ms)
    cs = [_slowdown_interval(x) for x in (la, lb)]
    m["compute_slowdown"] = metric(cs[0][0], cs[1][0], (*key, "cs"), a_int=cs[0][1], b_int=cs[1][1],
                                   noise=FRACTION_NOISE)
    m["overlap_fraction"] = metric(la.get("overlap_fraction"), lb.get("overlap_fraction"), (*key, "of"),
                                   noise=FRACTION_NOISE)
    causes = {c: [_by_cause(x, c, p) for x, p in ((la, per_a), (lb, per_b))] for c in (*CAUSES, "unexplained")}
    return m, causes, {"a": per_a, "b": per_b}


def _ratio(num: np.ndarray, den: np.ndarray) -> float | None:
    return float(num.sum() / den.sum()) if len(den) and den.sum() > 0 else None


def _lost_per_step(lost: dict, per: int | None) -> tuple[float | None, tuple | None]:
    if not lost or not per:
        return None, None
    v = lost["step"]
    return v["compute_lost_ms"] / per, (v["compute_lost_lo_ms"] / per, v["compute_lost_hi_ms"] / per)


def _by_cause(lost: dict, cause: str, per: int | None) -> float | None:
    if not lost or not per:
        return None
    return lost["step"]["lost_by_cause_ms"][cause] / per


def _slowdown_interval(lost: dict) -> tuple[float | None, tuple | None]:
    """The device's compute slowdown, and an interval from the lost time's: its bounds over the baseline time."""
    cs = lost.get("compute_slowdown") if lost else None
    if cs is None or not lost.get("base_ms"):
        return cs, None
    base, v = lost["base_ms"], lost["run"]
    return cs, (cs + (v["compute_lost_lo_ms"] - v["compute_lost_ms"]) / base,
                cs + (v["compute_lost_hi_ms"] - v["compute_lost_ms"]) / base)


def waterfall(pair: dict, m: dict, causes: dict, grouped: bool) -> list[dict]:
    """From A's step time (the run's span without steps) to B's: compute work (compute time not lost to overlap),
    lost time by cause, exposed communication, other time. The items add up to the change exactly."""
    total = m["step_ms"] if grouped else m["span_ms"]
    if total["a"] is None or total["b"] is None or m["compute_ms"]["delta"] is None:
        return []
    lost = {c: (v[1] or 0.0) - (v[0] or 0.0) for c, v in causes.items()}
    items = [("compute work", m["compute_ms"]["delta"] - sum(lost.values()))]
    items += [(f"lost: {c}", lost[c]) for c in (*CAUSES, "unexplained")]
    items += [("exposed communication", m["exposed_comm_ms"]["delta"]), ("other", m["other_ms"]["delta"])]
    assert [i[0] for i in items] == list(WATERFALL)
    what = "step" if grouped else "span"
    rows = [dict(device=pair["device"], device_id=pair["device_id"], order=0, item=f"A {what}", delta_ms=None,
                 start_ms=0.0, end_ms=total["a"], kind="total", lo_ms=None, hi_ms=None)]
    level = total["a"]
    for i, (item, d) in enumerate(items, 1):
        rows.append(dict(device=pair["device"], device_id=pair["device_id"], order=i, item=item, delta_ms=d,
                         start_ms=level, end_ms=level + d, kind="increase" if d >= 0 else "decrease",
                         lo_ms=None, hi_ms=None))
        level += d
    rows.append(dict(device=pair["device"], device_id=pair["device_id"], order=len(items) + 1, item=f"B {what}",
                     delta_ms=total["delta"], start_ms=0.0, end_ms=total["b"], kind="total", lo_ms=total["lo"],
                     hi_ms=total["hi"]))
    return rows


def step_rows(pair: dict, a: Side, b: Side, norm) -> list[dict]:
    """Per step text (the changed labels left out): step time, median over its ranges, and its change."""
    wa = window_arrays(a.windows, pair["run_a"], pair["device_id"])
    wb = window_arrays(b.windows, pair["run_b"], pair["device_id"])
    out = []
    texts = sorted({norm(t) for t in wa["text"]} | {norm(t) for t in wb["text"]}, key=lambda t: t or "")
    for t in texts:
        ia = np.array([norm(x) == t for x in wa["text"]], dtype=bool)
        ib = np.array([norm(x) == t for x in wb["text"]], dtype=bool)
        row = dict(device=pair["device"], device_id=pair["device_id"], step=t, n_a=int(ia.sum()), n_b=int(ib.sum()),
                   step_a_ms=None, step_b_ms=None, change=None, change_lo=None, change_hi=None, significant=False,
                   exposed_comm_a_ms=_mean_ms(wa["exposed"][ia]), exposed_comm_b_ms=_mean_ms(wb["exposed"][ib]))
        if ia.any():
            row["step_a_ms"] = float(np.median(wa["len"][ia])) / 1e6
        if ib.any():
            row["step_b_ms"] = float(np.median(wb["len"][ib])) / 1e6
        if ia.any() and ib.any():
            _, _, _, c, lo, hi = change_interval(wa["len"][ia], wb["len"][ib], False, STEP_NOISE)
            row.update(change=_f(c), change_lo=_f(lo), change_hi=_f(hi))
            row["significant"] = _significant(row["change_lo"], row["change_hi"])
        out.append(row)
    return out


def _mean_ms(x: np.ndarray) -> float | None:
    return float(x.mean()) / 1e6 if len(x) else None


# --- all together -----------------------------------------------------------------------------------------------

def compare(a: Side, b: Side, group_by_nvtx: str | None) -> Diff:
    grouped = group_by_nvtx is not None
    pairs, notes = pair_devices(a, b)
    notes = [f"A: {n}" for n in a.notes] + [f"B: {n}" for n in b.notes] + notes
    label_changes = run_label_changes(a, b)
    nvtx_changed = nvtx_label_changes(a, b)
    label_changes += [dict(source="NVTX label", key=k, a=va, b=vb) for k, (va, vb) in nvtx_changed.items()]
    norm = normalizer(nvtx_changed)
    index_a = _attr_index(a.attribution.kernels.to_pylist())
    index_b = _attr_index(b.attribution.kernels.to_pylist())
    kernels, summary, metrics, steps, falls, verdict_rows = [], [], [], [], [], []
    for pair in pairs:
        m, causes, per = device_metrics(pair, a, b, grouped)
        if grouped and not (per["a"] and per["b"]):
            notes.append(f"{pair['device']}: no NVTX range matching {group_by_nvtx!r} launched work on it in "
                         f"{'A' if not per['a'] else 'B'}: no step metrics")
        sa = [s for s in a.signatures if s["run_id"] == pair["run_a"] and s["device_id"] == pair["device_id"]]
        sb = [s for s in b.signatures if s["run_id"] == pair["run_b"] and s["device_id"] == pair["device_id"]]
        total = m["step_ms" if grouped else "span_ms"]["a"]
        rows = sorted(signature_rows(pair, match_signatures(sa, sb, norm), index_a, index_b, per["a"], per["b"],
                                     total * 1e6 if total else None), key=kernel_order)
        kernels += rows
        counts = _counts(rows)
        row = dict(device=pair["device"], run_a=pair["run_a"], run_b=pair["run_b"], device_id=pair["device_id"],
                   gpu=pair["gpu"])
        for name in SIDE_METRICS:
            for part in ("a", "b", "delta", "rel", "lo", "hi", "significant"):
                row[f"{name}_{part}"] = m[name][part]
            metrics.append(dict(device=pair["device"], device_id=pair["device_id"], metric=name,
                                unit=SIDE_METRICS[name][0], **m[name]))
        row.update(counts)
        verdict = device_verdict(pair, m, counts, rows, grouped)
        row.update(changed=verdict["changed"], verdict=verdict["text"])
        summary.append(row)
        falls += waterfall(pair, m, causes, grouped)
        if grouped:
            steps += step_rows(pair, a, b, norm)
        verdict_rows.append(verdict)
    if not any(r["match"] in ("exact", "name") for r in kernels):
        raise BadInputError(f"A ({a.spec}) and B ({b.spec}) have no activity in common (no kernel name on the same "
                            "GPU): they are not runs of the same program; compare runs of one program before and "
                            "after a change")
    return Diff(a=a.describe(), b=b.describe(), kernels=_table(kernels, KERNEL_SCHEMA),
                summary=pa.Table.from_pylist(summary), metrics=_table(metrics, METRIC_SCHEMA),
                steps=_table(steps, STEP_SCHEMA), waterfall=_table(falls, WATERFALL_SCHEMA),
                label_changes=label_changes, verdicts=verdict_rows, notes=notes, group_by_nvtx=group_by_nvtx)


def _counts(rows: list[dict]) -> dict:
    matched = [r for r in rows if r["match"] in ("exact", "name")]
    return dict(matched_signatures=len(matched), slower_signatures=sum(r["direction"] == "slower" for r in rows),
                faster_signatures=sum(r["direction"] == "faster" for r in rows),
                new_signatures=sum(r["match"] == "new" for r in rows),
                vanished_signatures=sum(r["match"] == "vanished" for r in rows),
                shape_changes=sum(r["match"] == "name" for r in rows),
                class_changes=sum(bool(r["class_changed"]) for r in rows))


assert set(DIFF_METRICS) == set(_counts([]))

VERDICT_METRICS = ("step_ms", "span_ms", "compute_ms", "comm_ms", "exposed_comm_ms", "energy_j")


def device_verdict(pair: dict, m: dict, counts: dict, rows: list[dict], grouped: bool) -> dict:
    """A sentence per device: no significant change, or what changed, by how much and where."""
    moved = [k for k in VERDICT_METRICS if m[k]["significant"]]
    changed = bool(moved or counts["slower_signatures"] or counts["faster_signatures"] or counts["new_signatures"]
                   or counts["vanished_signatures"])
    total = m["step_ms"] if grouped else m["span_ms"]
    what = "step time" if grouped else "GPU span"
    parts = []
    if total["a"] is not None and total["b"] is not None:
        sig = "significant" if total["significant"] else "not significant"
        parts.append(f"{what} {total['a']:.3f} -> {total['b']:.3f} ms ({total['delta']:+.3f} ms "
                     f"[{_n(total['lo'])}, {_n(total['hi'])}], {sig})")
    for k in moved:
        if k not in ("step_ms", "span_ms"):
            parts.append(f"{k.removesuffix('_ms').removesuffix('_j').replace('_', ' ')} {m[k]['delta']:+.3f} "
                         f"{SIDE_METRICS[k][0]} [{_n(m[k]['lo'])}, {_n(m[k]['hi'])}]")
    sigs = [f"{counts[k]} {k.removesuffix('_signatures')}" for k in ("slower_signatures", "faster_signatures",
                                                                       "new_signatures", "vanished_signatures")
            if counts[k]]
    if sigs:
        parts.append("signatures: " + ", ".join(sigs))
    top = [r for r in rows if r["significant"]][:3]
    for r in top:
        shape = f" ({shape_change(r['launch_a'], r['launch_b'])})" if r["match"] == "name" else ""
        where = f" in {r['nvtx'][:50]}" if r["nvtx"] else ""
        parts.append(f"{(r['short_name'] or r['name'])[:60]}{where}{shape} {r['change']:+.1%} [{r['change_lo']:+.1%}, "
                     f"{r['change_hi']:+.1%}]")
    head = f"{pair['device']} ({pair['gpu']}): " + ("changed" if changed else "no significant change")
    return dict(device=pair["device"], device_id=pair["device_id"], changed=changed,
                text=head + (": " + "; ".join(parts) if parts else "") + ".")


def _n(v: float | None) -> str:
    return "-" if v is None else f"{v:+.3f}"


def _table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist([{k: r.get(k) for k in schema.names} for r in rows], schema=schema)


_s, _d, _i, _b = pa.string(), pa.float64(), pa.int64(), pa.bool_()
KERNEL_SCHEMA = pa.schema(
    [("device", _s), ("run_a", _s), ("run_b", _s), ("device_id", pa.int32()), ("nvtx", _s), ("nvtx_b", _s),
     ("activity", _s), ("kind", _s), ("name", _s), ("short_name", _s), ("match", _s), ("launch_a", _s),
     ("launch_b", _s), ("n_a", _i), ("n_b", _i), ("statistic", _s), ("dur_a_ns", _d), ("dur_b_ns", _d), ("change", _d),
     ("change_lo", _d), ("change_hi", _d), ("significant", _b), ("direction", _s), ("time_a_ns", _d),
     ("time_b_ns", _d), ("time_delta_ns", _d), ("clock_a_mhz", _d), ("clock_b_mhz", _d)]
    + [(f"{f}_{s}", _s if f == "class" else (_i if f == "n_overlapped" else _d)) for s in ("a", "b")
       for f in ATTR_FIELDS]
    + [("slowdown_delta", _d), ("slowdown_delta_lo", _d), ("slowdown_delta_hi", _d), ("class_changed", _b)])
METRIC_SCHEMA = pa.schema([("device", _s), ("device_id", pa.int32()), ("metric", _s), ("unit", _s), ("a", _d),
                           ("b", _d), ("delta", _d), ("rel", _d), ("lo", _d), ("hi", _d), ("significant", _b)])
STEP_SCHEMA = pa.schema([("device", _s), ("device_id", pa.int32()), ("step", _s), ("n_a", _i), ("n_b", _i),
                         ("step_a_ms", _d), ("step_b_ms", _d), ("change", _d), ("change_lo", _d), ("change_hi", _d),
                         ("significant", _b), ("exposed_comm_a_ms", _d), ("exposed_comm_b_ms", _d)])
WATERFALL_SCHEMA = pa.schema([("device", _s), ("device_id", pa.int32()), ("order", _i), ("item", _s),
                              ("delta_ms", _d), ("start_ms", _d), ("end_ms", _d), ("kind", _s), ("lo_ms", _d),
                              ("hi_ms", _d)])
