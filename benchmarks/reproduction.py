"""Generate docs/reproduction.md: the overlap characterization of Lee et al. (ISPASS 2025) from the committed runs.

    python benchmarks/reproduction.py [--write docs/reproduction.md] [--data suite|h200x2]

With --data h200x2 (the default where it is there), the same programs on 4 ranks (tests/data/h200x4) stand beside
the 2-rank runs: every table gets a ``ranks`` column with the 4-rank rows after their 2-rank namesakes, every
sentence its 4-rank counterpart where it says something else, and "From 2 to 4 ranks" says how the figures move.

Everything in the page comes from `traceql.paper.paper` over the committed runs (and the runs' own labels): the
paper's numbers beside ours, the differences in setup, the breakdown per configuration, and findings the paper does
not have, each with the table it rests on. Sentences that compare numbers are chosen by the numbers (and their
intervals), never typed. tests/test_reproduction.py regenerates the page and fails when it differs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "tests/data/h200/suite"
H200X2 = ROOT / "tests/data/h200x2"
H200X4 = ROOT / "tests/data/h200x4"
# the 4-GPU runs beside the 2-GPU ones: the microbenchmark and the training programs with 4 ranks (the straggler run
# has an overlapped mode only, so none of the paper's figures: tests/test_straggler.py reads it)
H200X4_RUNS = ["overlap", "train_ddp", "train_fsdp2"]
sys.path.insert(0, str(ROOT))

from traceql.paper.figures import FIGURES, _size  # noqa: E402
from traceql.paper.text import ci, number, with_interval  # noqa: E402

# The paper's setup as far as it can be read (Lee et al., ISPASS 2025, §1.2, as read from the paper).
PAPER_SETUP = {
    "GPUs": "4 x H100 80 GB (NVLink + NVSwitch), 4 x A100 40 GB, 4 x MI250, 4 x MI210; one node",
    "ranks": "4",
    "workloads": "GPT-3 1.3B / 2.7B / 6.7B / 13B and LLaMA-2 13B; FSDP (DeepSpeed) and pipeline parallelism "
                 "(Megatron-LM); batch 8-64",
    "precision": "FP16 (main), FP32; TF32 for the tensor-core study",
    "power and clock caps": "swept down to 100 W",
    "timing": "PyTorch profiler and CUDA events",
    "power sampling": "NVML every 100 ms",
    "repetitions": "every configuration averaged over 25 runs",
    "software": "PyTorch 2.4, CUDA 12.4, NCCL (ROCm 6.2 / RCCL on AMD)",
}
FACTORS = ("sm", "dram_bw", "cache", "clock", "link")
PENDING = ("**Provisional.** This page is generated from the bundled suite (`tests/data/h200/suite`: the overlap "
           "microbenchmark at three NCCL_MAX_CTAS settings, 4 iterations per mode, modes too short for NVML energy). "
           "The reproduction experiment (`collectors/reproduction.sh`: fp8 and two message sizes, modes long enough "
           "for energy, GPT-style training with DDP, FSDP2 and a pipeline in overlapped, sequential and "
           "no-communication modes) is not among the committed runs yet; once `tests/data/h200x2` holds it, the "
           "script generates this page from it.")


def pct(v, signed: bool = True) -> str:
    return number(v, "%", signed)


def _labels(run: dict) -> dict:
    try:
        return json.loads(run.get("labels_json") or "{}")
    except json.JSONDecodeError:
        return {}


def _distinct(values) -> str:
    vals = sorted({str(v) for v in values if v not in (None, "")})
    return ", ".join(vals) if vals else "–"


def _md(rows: list[list[str]], header: list[str]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(out)


def _short(c: dict) -> str:
    parts = [c["run"]]
    parts += [str(c[k]) for k in ("op", "dtype") if c[k] is not None]
    if c["bytes"]:
        parts.append(_size(c["bytes"]))
    if c["max_ctas"] != "default":
        parts.append(f"ctas={c['max_ctas']}")
    return " ".join(parts)


def _separated(a: dict, b: dict, name: str) -> bool:
    """Do the intervals of ``name`` in rows a and b not overlap?"""
    lo_a, hi_a, lo_b, hi_b = (a[f"{name}_lo"], a[f"{name}_hi"], b[f"{name}_lo"], b[f"{name}_hi"])
    if any(v is None for v in (lo_a, hi_a, lo_b, hi_b)):
        return False
    return hi_a < lo_b or hi_b < lo_a


def runs_section(result, source: str) -> str:
    configs = result.configs.to_pylist()
    per_run = defaultdict(list)
    for c in configs:
        per_run[c["run_id"]].append(c)
    rows = []
    for r in sorted(result.runs, key=lambda r: r["run"]):
        lab = _labels(r)
        cs = per_run[r["run_id"]]
        rows.append([r["run"], lab.get("gpus", r["gpu_names"]).replace(";", ", "), len(cs),
                     _distinct(c["op"] for c in cs), _distinct(c["dtype"] for c in cs),
                     _distinct(c["max_ctas"] for c in cs), _distinct(c["iterations"] for c in cs),
                     f"`{lab.get('command', '–')}`"])
    return (f"The runs: `{source}` (collected with `traceql collect` on the machine the labels name). A "
            "configuration is one run's mode ranges with the same labels.\n\n"
            + _md(rows, ["run", "GPUs", "configurations", "collectives", "data types", "NCCL_MAX_CTAS",
                         "iterations per mode", "command"]))


def setup_section(result) -> str:
    labs = [_labels(r) for r in result.runs]
    configs = result.configs.to_pylist()
    modes = result.modes.to_pylist()
    gpus = _distinct(" + ".join(f"{n} x {g}" for g, n in sorted(Counter(lab["gpus"].split(";")).items()))
                     for lab in labs if lab.get("gpus"))
    ranks = _distinct(c["gpus"] for c in configs)
    sizes = _distinct(f"{c['bytes'] >> 20} MiB" for c in configs if c["bytes"])
    values = defaultdict(set)
    for c in configs:
        for kv in filter(None, (c["config"] or "").split(";")):
            k, _, v = kv.partition("=")
            values[k].add(v)
    extra = ", ".join(f"{k}={'/'.join(sorted(v))}" for k, v in sorted(values.items())) or "–"
    limits = _distinct(f"{m['power_limit_w']:.0f} W" for m in modes if m["power_limit_w"])
    ours = {
        "GPUs": gpus,
        "ranks": ranks,
        "workloads": f"{_distinct(c['workload'] for c in configs)} (NVTX case names); collectives of {sizes}; "
                     f"further labels: {extra}",
        "precision": _distinct(c["dtype"] for c in configs),
        "power and clock caps": "none: GPU settings must not be changed on the shared machines; power limit as found "
                                f"({limits})",
        "timing": "Nsight Systems kernel timestamps, per iteration on the GPU (traceql.paper)",
        "power sampling": "NVML every 15 ms requested; its energy counter and power reading change every "
                          f"{_update_period(result)}",
        "repetitions": f"{_distinct(c['iterations'] for c in configs)} iterations per mode in one run; 95% bootstrap "
                       "intervals over iterations",
        "software": "; ".join(sorted({f"torch {lab.get('version.torch', '?')}, CUDA {lab.get('env.CUDA_VERSION', '?')}"
                                      f", NCCL {_nccl(lab)}, nsys {lab.get('nsys', '?')}" for lab in labs})),
    }
    rows = [[k, PAPER_SETUP[k], ours[k]] for k in PAPER_SETUP]
    return _md(rows, ["", "the paper", "here"])


def _nccl(lab: dict) -> str:
    # the NCCL PyTorch loads is its pip package's; the image's NCCL_VERSION only says what the image ships
    pip = [v for k, v in sorted(lab.items()) if k.startswith("version.nvidia-nccl")]
    return pip[0] if pip else lab.get("env.NCCL_VERSION", "?")


def _update_period(result) -> str:
    import re

    periods = sorted({int(m.group(1)) for r in result.modes.to_pylist() if r["note"]
                      for m in [re.search(r"every (\d+) ms", r["note"])] if m})
    return f"~{'/'.join(map(str, periods))} ms (measured in these runs)" if periods else "(not measured here)"


def headline_section(result) -> str:
    head = {r["figure"]: r for r in result.headline.to_pylist() if r["group_by"] == "all"}
    rows = []
    for fig in FIGURES:
        paper_avg = pct(fig.paper_avg, False) if fig.paper_avg is not None else "–"
        paper_max = pct(fig.paper_max, False) if fig.paper_max is not None else "–"
        r = head.get(fig.name)
        if r is None:
            ours_avg = ours_max = "not measured (see below)" if "power" in fig.name or "energy" in fig.name else "–"
            rows.append([f"`{fig.name}`", fig.text, paper_avg, paper_max, ours_avg, ours_max, "–"])
            continue
        left = r.get("clock_left_out") or 0
        rows.append([f"`{fig.name}`", fig.text, paper_avg, paper_max, ci(r, "avg"), ci(r, "max"),
                     f"{r['configs']}" + (f" ({left} left out: clocks)" if left else "")])
    text = [_md(rows, ["figure", "definition", "paper avg", "paper max", "here: average [95% CI]",
                       "here: maximum [95% CI]", "configurations"]),
            "- Left out (clocks): configurations whose overlapped mode ran at a higher SM clock than the mode it is "
            "compared with (drift: doing more at once cannot raise the clock), enough to turn a figure's conclusion "
            "over on its own (taken at one clock, it lands on the other side of 0, or of 1 for the efficiency, from "
            "its whole measured interval; docs/paper.md)."]
    for name in ("compute_slowdown", "seq_over_ovl"):
        fig = next(f for f in FIGURES if f.name == name)
        r = head.get(name)
        if r is None:
            continue
        paper = pct(fig.paper_avg, False)
        where = (f"is above the paper's {paper} (its interval excludes it)" if r["avg_lo"] > fig.paper_avg
                 else f"is below the paper's {paper} (its interval excludes it)" if r["avg_hi"] < fig.paper_avg
                 else f"holds the paper's {paper} in its interval")
        text.append(f"- `{name}`: our average {ci(r, 'avg')} {where}; our maximum is {ci(r, 'max')}, in "
                    f"{r['max_config']}, against the paper's {pct(fig.paper_max, False)}."
                    + "".join(f" Workload `{w['group']}` alone ({w['configs']} configurations): {ci(w, 'avg')} on "
                              f"average, at most {ci(w, 'max')}." for w in result.headline.to_pylist()
                              if w["figure"] == name and w["group_by"] == "workload"))
    return "\n\n".join(text[:1]) + "\n\n" + "\n".join(text[1:])


def groups_section(result) -> str:
    rows = []
    shown = ("compute_slowdown", "seq_over_ovl", "comm_slowdown", "overlap_efficiency")
    by = defaultdict(dict)
    for r in result.headline.to_pylist():
        if r["group_by"] != "all" and r["figure"] in shown:
            by[(r["group_by"], r["group"])][r["figure"]] = r
    for (dim, group), figs in sorted(by.items(), key=lambda kv: (kv[0][0], int(kv[0][1]) if kv[0][0] == "bytes"
                                                                 else 0, kv[0][1])):
        n = max(f["configs"] for f in figs.values())
        rows.append([dim, _size(int(group)) if dim == "bytes" else group, n]
                    + [ci(figs[f], "avg") if f in figs else "–" for f in shown])
    return _md(rows, ["by", "value", "configurations", *(f"{f}: average" for f in shown)])


def configs_section(result) -> str:
    rows = []
    for c in result.configs.to_pylist():
        rows.append([_short(c), ci(c, "compute_slowdown"), ci(c, "compute_slowdown_vs_seq"), ci(c, "seq_over_ovl"),
                     pct(c["seq_over_ovl_derived"]), ci(c, "comm_slowdown"), ci(c, "overlap_efficiency", signed=False),
                     ci(c, "overlap_ratio", signed=False)])
    return (_md(rows, ["configuration", "compute_slowdown", "compute_slowdown_vs_seq", "seq_over_ovl",
                       "seq_over_ovl_derived", "comm_slowdown", "overlap_efficiency", "overlap_ratio"])
            + "\n\n–: undefined (overlap_efficiency: the possible gain T_seq - max(T_compute, T_comm) is not "
              "measurably above 0). Intervals: 95% bootstrap over iterations.")


def power_section(result) -> str:
    modes = result.modes.to_pylist()
    measured = [m for m in modes if m["mean_power_w"] is not None]
    if not measured:
        if all(m["note"] and m["note"].startswith("no NVML") for m in modes):
            return "No run here has NVML power samples (`traceql collect --power` records them)."
        spans = [m["iter_ns"] * m["iterations"] / 1e6 for m in modes if m["iter_ns"]]
        most = max((m["counter_updates"] or 0) for m in modes)
        return (f"No mode of these runs has an energy or power figure: NVML's energy counter changes every "
                f"{_update_period(result)}, and the modes lasted {min(spans):.0f}-{max(spans):.0f} ms of GPU time, "
                f"so the counter changed at most {most} time(s) inside any of them; energy needs two changes inside a "
                "mode. Each mode's own count is in `traceql paper RUNS --table modes`; `collectors/overlap.py "
                "--min-case-ms` makes modes long enough.")
    rows = [[_short(m), m["mode"], ci(m, "iter_ns", "ms", False), ci(m, "energy_per_iter_j", "J", False),
             ci(m, "mean_power_w", "W", False), ci(m, "peak_power_w", "W", False),
             f"{m['power_limit_w']:.0f}" if m["power_limit_w"] else "–"] for m in measured]
    missing = [m for m in modes if m["mean_power_w"] is None]
    spans = [m["iter_ns"] * m["iterations"] / 1e6 for m in missing if m["iter_ns"]]
    return (_md(rows, ["configuration", "mode", "time per iteration (ms)", "energy per iteration, all GPUs (J)",
                       "mean power per GPU (W)", "peak power (W)", "power limit (W)"])
            + (f"\n\n{len(missing)} of {len(modes)} modes have no figure: they lasted {min(spans):.0f}-"
               f"{max(spans):.0f} ms of GPU time, and NVML's energy counter, which changes every "
               f"{_update_period(result)}, changed fewer than three times inside them (each mode's count and reason: "
               "`traceql paper RUNS --table modes`)." if missing and spans else ""))


def breakdown_section(result) -> str:
    rows = []
    for b in result.breakdown.to_pylist():
        if b["side"] == "copy":
            continue
        rows.append([_short(b), b["side"], b["instances"], ci(b, "observed"),
                     with_interval(b["predicted"], b["predicted_lo"], b["predicted_hi"])]
                    + [pct(b[f]) for f in FACTORS] + [pct(b["residual"]), f"**{b['cause']}**"])
    causes = defaultdict(int)
    for b in result.breakdown.to_pylist():
        if b["side"] != "copy":
            causes[(b["side"], b["cause"])] += 1
    summary = "; ".join(f"{side} side {cause}: {n}" for (side, cause), n in sorted(causes.items()))
    copies = [b for b in result.breakdown.to_pylist() if b["side"] == "copy"]
    note = ""
    if copies:
        note = (f"\n\nCopies and sets beside the overlapped work ({sum(b['instances'] for b in copies)} instances in "
                f"{len(copies)} configurations, e.g. the library's memsets) are left out of the table; their causes: "
                + _distinct(b["cause"] for b in copies) + ".")
    return (f"Causes: {summary}.\n\n"
            + _md(rows, ["configuration", "side", "instances", "observed [95% CI]", "predicted [interval]",
                         *FACTORS, "residual", "cause"]) + note)


def _trend(rows: list, name: str, what: str) -> str:
    """A sentence on how ``name`` moves along ``rows`` (ordered): up, down or neither, with its values."""
    vals = [r[name] for r in rows if r is not None and r[name] is not None]
    if len(vals) < 2:
        return ""
    steps = [b - a for a, b in zip(vals, vals[1:], strict=False)]
    way = "grows with them" if all(d > 0 for d in steps) else "falls with them" if all(d < 0 for d in steps) \
        else "does not move one way with them"
    return f" {what[0].upper() + what[1:]} {way}: " + " -> ".join(pct(v) for v in vals) + "."


def _comm_note(stats: dict) -> str:
    comm = [stats[d]["comm"] for d in stats if stats[d]["comm"]]
    if not comm:
        return " "
    spread = max(comm) / min(comm)
    return (f" The collectives alone took {number(min(comm), 'ms')}-{number(max(comm), 'ms')} ms per iteration "
            f"across precisions ({'within' if spread < 1.5 else 'more than'} a factor 1.5), the GEMM alone "
            f"{number(min(stats[d]['gemm'] for d in stats), 'ms')}-{number(max(stats[d]['gemm'] for d in stats), 'ms')}"
            " ms. ")


def _spearman(x: list[float], y: list[float]) -> float | None:
    """Spearman's rank correlation (average ranks for ties); None below 3 pairs or without spread."""
    import numpy as np

    if len(x) < 3 or len(x) != len(y):
        return None

    def ranks(v):
        a = np.asarray(v, dtype=float)
        order = a.argsort(kind="stable")
        r = np.empty(len(a))
        r[order] = np.arange(len(a))
        for value in np.unique(a):  # ties share their average rank
            r[a == value] = r[a == value].mean()
        return r

    rx, ry = ranks(x), ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def _order_note(stats: dict, head: dict) -> str:
    """Do the losses follow the covered shares? Name the pairs that do not, and whether their intervals separate."""
    swapped = [(a, b) for a in stats for b in stats
               if stats[a]["covered"] > stats[b]["covered"] and stats[a]["avg"] < stats[b]["avg"]]
    if not swapped:
        return "The losses come in the same order as the covered shares."
    real = [(a, b) for a, b in swapped if head[a]["avg_hi"] is not None and head[b]["avg_lo"] is not None
            and head[a]["avg_hi"] < head[b]["avg_lo"]]
    pairs = ", ".join(f"{b} loses more than {a} though less covered" for a, b in sorted(swapped))
    if not real:
        return (f"The losses follow the covered shares except where the intervals overlap ({pairs}): the covered "
                "share orders what the data can order.")
    beyond = ", ".join(f"{b} loses more than {a}" for a, b in sorted(real))
    return (f"The covered share does not order them all: beyond the intervals, {beyond}, though less covered; "
            "something besides overlap costs those precisions.")


def findings_section(result) -> str:
    configs = result.configs.to_pylist()
    breakdown = {(b["run_id"], b["op"], b["dtype"], b["bytes"], b["max_ctas"], b["config"], b["side"]): b
                 for b in result.breakdown.to_pylist()}

    def bd(c, side):
        return breakdown.get((c["run_id"], c["op"], c["dtype"], c["bytes"], c["max_ctas"], c["config"], side))

    found = []
    # 1. NCCL_MAX_CTAS: the SMs NCCL takes against the collective's speed
    groups = defaultdict(list)
    for c in configs:
        groups[(c["workload"], c["op"], c["dtype"], c["bytes"], c["config"])].append(c)
    sweeps = [sorted(v, key=lambda c: (c["comm_sms"] or 0, c["max_ctas"])) for _, v in sorted(
        groups.items(), key=lambda kv: [str(x) for x in kv[0]]) if len({c["max_ctas"] for c in v}) > 1]
    text = ["### 1. NCCL_MAX_CTAS: SMs taken by NCCL against collective speed and compute slowdown\n"]
    if not sweeps:
        text.append("These runs hold no configuration measured at more than one NCCL_MAX_CTAS.")
    else:
        rows = []
        cells = defaultdict(list)
        for sw in sweeps:
            for c in sw:
                what = c["op"] if c["op"] is not None else f"{c['workload']} {c['config']}".strip()
                cells[(what, c["bytes"], c["max_ctas"])].append(c)
        for (op, size, ctas), cs in sorted(cells.items(), key=lambda kv: (
                str(kv[0][0]), kv[0][1] or 0, sum(c["comm_sms"] or 0 for c in kv[1]) / len(kv[1]))):
            sms = [c["comm_sms"] for c in cs if c["comm_sms"]]
            alone = [c["comm_iter_ns"] for c in cs if c["comm_iter_ns"]]
            sm_vals = [bd(c, "compute")["sm"] for c in cs if bd(c, "compute")]
            rows.append([op, f"{size >> 20} MiB" if size else "–", ctas, len(cs),
                         f"{sum(sms) / len(sms):.0f}" if sms else "–",
                         number(sum(alone) / len(alone), "ms") if alone else "–"]
                        + [ci(result.average(f, cs), "avg", signed=f != "overlap_efficiency")
                           for f in ("comm_slowdown", "compute_slowdown", "seq_over_ovl", "overlap_efficiency")]
                        + [pct(sum(sm_vals) / len(sm_vals)) if sm_vals else "–"])
        text.append(_md(rows, ["collective (or workload)", "size", "NCCL_MAX_CTAS", "configurations",
                               "SMs held by NCCL", "collective alone (ms)", "comm_slowdown: average",
                               "compute_slowdown: average", "seq_over_ovl: average", "overlap_efficiency: average",
                               "sm part (breakdown, average)"]))
        n = len(sweeps)
        speed = [sw[0]["comm_iter_ns"] / sw[-1]["comm_iter_ns"] for sw in sweeps
                 if sw[0]["comm_iter_ns"] and sw[-1]["comm_iter_ns"]]
        grew = sum(all(b["compute_slowdown"] > a["compute_slowdown"] for a, b in zip(sw, sw[1:], strict=False))
                   for sw in sweeps)
        sep = sum(_separated(sw[0], sw[-1], "compute_slowdown") and sw[-1]["compute_slowdown"] >
                  sw[0]["compute_slowdown"] for sw in sweeps)
        sep_down = sum(_separated(sw[0], sw[-1], "compute_slowdown") and sw[-1]["compute_slowdown"] <
                       sw[0]["compute_slowdown"] for sw in sweeps)
        sm_parts = [[bd(c, "compute") for c in sw] for sw in sweeps]
        sm_grew = sum(all(x is not None for x in bs) and all(b["sm"] > a["sm"] for a, b in zip(bs, bs[1:],
                                                                                                strict=False))
                      for bs in sm_parts)
        held = sorted({f"{c['comm_sms']:.0f}" for sw in sweeps for c in (sw[0], sw[-1]) if c["comm_sms"]}, key=float)
        settings = len({c["max_ctas"] for sw in sweeps for c in sw})
        delta = [sw[-1]["compute_slowdown"] - sw[0]["compute_slowdown"] for sw in sweeps]
        text.append(
            f"\n{n} sweep(s), each one configuration (the same collective, data type and size; or the same training "
            f"job) at up to {settings} NCCL_MAX_CTAS settings. "
            f"From the fewest to the most SMs held by NCCL ({' / '.join(held)}), the "
            f"collective alone ran {min(speed):.1f}-{max(speed):.1f}x faster. The GEMM beside it lost more at every "
            f"step in {grew} of {n}; between the fewest and the most CTAs its loss grew beyond the intervals in {sep} "
            f"and fell beyond them in {sep_down}; in the rest the intervals overlap. The attribution's SM part of the "
            f"GEMM's slowdown grew at every step in {sm_grew} of {n}. On average the collective ran "
            f"{sum(speed) / len(speed):.1f}x faster for {pct(sum(delta) / len(delta))} more GEMM slowdown."
            if speed else "")
    found.append("\n".join(text))

    # 2. which precision loses most, and why
    # one CTA setting (the one most configurations ran at), so that only the precision changes between rows
    ctas = max(sorted({c["max_ctas"] for c in configs}), key=lambda v: sum(c["max_ctas"] == v for c in configs))
    by_dtype = defaultdict(list)
    for c in configs:
        if c["dtype"] is not None and c["compute_slowdown"] is not None and c["max_ctas"] == ctas:
            by_dtype[c["dtype"]].append(c)
    head = {d: result.average("compute_slowdown", cs) for d, cs in by_dtype.items()}
    text = ["### 2. Which precision loses most when overlapped, and why\n",
            f"Configurations at NCCL_MAX_CTAS={ctas}, so that the precision is what changes between rows.\n"]
    if len(by_dtype) > 1:
        rows, stats = [], {}
        for dtype, cs in sorted(by_dtype.items()):
            bds = [bd(c, "compute") for c in cs if bd(c, "compute")]
            alone = [c["comm_iter_ns"] for c in cs if c["comm_iter_ns"]]
            stats[dtype] = dict(avg=head[dtype]["avg"], gemm=sum(c["compute_iter_ns"] for c in cs) / len(cs),
                                comm=sum(alone) / len(alone) if alone else None,
                                covered=sum(c["compute_covered"] for c in cs) / len(cs),
                                parts={f: sum(b[f] for b in bds) / len(bds) for f in (*FACTORS, "residual")}
                                if bds else None)
            part = stats[dtype]["parts"]
            rows.append([dtype, len(cs), number(stats[dtype]["gemm"], "ms"), number(stats[dtype]["comm"], "ms"),
                         pct(stats[dtype]["covered"], False), ci(head[dtype], "avg")]
                        + ([pct(part[f]) for f in ("sm", "clock", "residual")] if part else ["–"] * 3)
                        + [_distinct(b["cause"] for b in bds)])
        text.append(_md(rows, ["dtype", "configurations", "compute alone per iteration (ms)",
                               "communication alone per iteration (ms)", "compute time covered by communication",
                               "compute_slowdown: average [95% CI]", "sm part", "clock part", "residual",
                               "causes (breakdown)"]))
        order = sorted(stats, key=lambda d: stats[d]["avg"])
        worst, runner_up, least = order[-1], order[-2], order[0]
        sep = head[runner_up]["avg_hi"] is not None and head[worst]["avg_lo"] is not None \
            and head[runner_up]["avg_hi"] < head[worst]["avg_lo"]
        by_gemm = sorted(stats, key=lambda d: stats[d]["gemm"])
        covered = [stats[d]["covered"] for d in by_gemm]
        falling = all(b < a for a, b in zip(covered, covered[1:], strict=False))
        tops = {d: max((*FACTORS, "residual"), key=lambda f: stats[d]["parts"][f]) for d in stats
                if stats[d]["parts"] and stats[d]["avg"] > 0}
        text.append(
            f"\n{worst} loses most ({ci(head[worst], 'avg')} on average), {least} least ({ci(head[least], 'avg')}); "
            + (f"{worst}'s interval stays above {runner_up}'s." if sep
               else f"{worst}'s interval overlaps {runner_up}'s ({ci(head[runner_up], 'avg')}), so the data do not "
                    "separate the two.")
            + _comm_note(stats) + "The shorter the GEMM, the larger the share of it a collective covers"
            + (": ordered by GEMM time, " + ", ".join(f"{d} {number(stats[d]['gemm'], 'ms')} ms "
                                                     f"{stats[d]['covered']:.0%} covered" for d in by_gemm)
               + ". " + _order_note(stats, head) if falling
               else ", though here the covered shares do not fall with GEMM time ("
               + ", ".join(f"{d} {stats[d]['covered']:.0%}" for d in by_gemm) + ").")
            + (" The attribution's largest part of each losing precision's slowdown: "
               + ", ".join(f"{d} {f} ({pct(stats[d]['parts'][f])})" for d, f in sorted(tops.items())) + "."
               if tops else ""))
    else:
        text.append("These runs hold one data type only.")
    found.append("\n".join(text))

    # 3. the communication side
    head_all = {r["figure"]: r for r in result.headline.to_pylist() if r["group_by"] == "all"}
    text = ["### 3. Communication slows down too\n"]
    comm = head_all.get("comm_slowdown")
    with_comm = [c for c in configs if c["comm_slowdown"] is not None]
    if comm:
        text.append(
            f"The paper measures the compute side only. Here the collectives ran {ci(comm, 'avg')} slower on average "
            f"beside the GEMM than alone (at most {ci(comm, 'max')}, {comm['max_config']}).")
        cells = defaultdict(list)
        for c in with_comm:
            cells[(c["op"], c["bytes"], c["dtype"])].append(c)
        ratio = [c["compute_iter_ns"] / c["comm_iter_ns"] for c in with_comm
                 if c["compute_iter_ns"] and c["comm_iter_ns"]]
        rho = _spearman(ratio, [c["comm_slowdown"] for c in with_comm if c["compute_iter_ns"] and c["comm_iter_ns"]])
        rows = []
        for (op, size, dtype), cs in sorted(cells.items(), key=lambda kv: (str(kv[0][0]), kv[0][1] or 0,
                                                                           str(kv[0][2]))):
            gemm = sum(c["compute_iter_ns"] for c in cs) / len(cs)
            alone = sum(c["comm_iter_ns"] for c in cs) / len(cs)
            rows.append([op, _size(size) if size else "–", dtype, len(cs), number(alone, "ms"), number(gemm, "ms"),
                         f"{gemm / alone:.1f}", ci(result.average("comm_slowdown", cs), "avg")])
        text.append("\n" + _md(rows, ["collective", "size", "dtype", "configurations (CTA settings)",
                                      "collective alone (ms)", "GEMM alone (ms)", "GEMM / collective",
                                      "comm_slowdown: average [95% CI]"]))
        keys = {(c["run_id"], c["op"], c["dtype"], c["bytes"], c["max_ctas"], c["config"]) for c in with_comm}
        sides = [b for b in result.breakdown.to_pylist() if b["side"] == "comm"
                 and (b["run_id"], b["op"], b["dtype"], b["bytes"], b["max_ctas"], b["config"]) in keys]
        causes = defaultdict(int)
        for b in sides:
            causes[b["cause"]] += 1
        last = (
            f" The attribution gave the overlapped collectives a cause in {len(sides)} of {len(with_comm)} "
            "configurations" + (" (" + ", ".join(f"{k} {v}" for k, v in sorted(causes.items())) + ")" if sides
                                else "")
            + ("; in the others it had no baseline to compare the overlapped instances with (`traceql attribute`'s "
               "reason column says why for each signature), so their slowdown here rests on the modes alone."
               if len(sides) < len(with_comm) else "."))
        if rho is not None:
            text.append(
                f"\nAcross the {len(ratio)} configurations, the collective's slowdown has a rank correlation of "
                f"{rho:+.2f} with how much longer the GEMM beside it runs than the collective alone"
                + (": the longer the GEMM, the more the collective stretches." if rho >= 0.5 else
                   ": the GEMM's length does not order the collectives' slowdowns." if abs(rho) < 0.5 else
                   ": the longer the GEMM, the less the collective stretches.") + last)
        else:
            text.append("\n" + last.strip())
    else:
        text.append("No configuration here has both a communication-only and an overlapped mode.")
    found.append("\n".join(text))

    # 4. the paper's derived sequential time against a measured one
    text = ["### 4. Sequential: derived as the paper does, and measured\n"]
    meas, der = head_all.get("seq_over_ovl"), head_all.get("seq_over_ovl_derived")
    if meas and der:
        diffs = [c["seq_over_ovl_derived"] - c["seq_over_ovl"] for c in configs
                 if c["seq_over_ovl"] is not None and c["seq_over_ovl_derived"] is not None]
        inside = sum(1 for c in configs if c["seq_over_ovl_derived"] is not None and c["seq_over_ovl_lo"] is not None
                     and c["seq_over_ovl_lo"] <= c["seq_over_ovl_derived"] <= c["seq_over_ovl_hi"])
        text.append(
            "The paper's equation adds the hidden communication back to the overlapped time minus the compute "
            f"slowdown; a sequential run measures it. Derived: {ci(der, 'avg')} on average; measured: "
            f"{ci(meas, 'avg')}. Per configuration, derived minus measured is {pct(sum(diffs) / len(diffs))} on "
            f"average (from {pct(min(diffs))} to {pct(max(diffs))}); the derived value falls inside the measured "
            f"interval in {inside} of {len(diffs)}.")
    found.append("\n".join(text))
    found.append(_training_finding(result, configs, bd))
    found.append(_repeat_finding(result, configs))
    return "\n\n".join(found)


def _training_finding(result, configs: list[dict], bd) -> str:
    """Configurations without a collective label (whole training steps): per configuration, the figures the paper
    reports for training, the power figures, and the cause of the overlapped compute's slowdown."""
    train = [c for c in configs if c["op"] is None]
    text = ["### 5. Training steps: the paper's figures per parallelism\n"]
    if not train:
        text.append("These runs hold no training steps marked with modes.")
        return "\n".join(text)
    rows = []
    for c in sorted(train, key=lambda c: (c["config"], c["run"])):
        b = bd(c, "compute")
        rows.append([c["run"], c["config"] or "–", c["modes"], ci(c, "compute_slowdown"), ci(c, "seq_over_ovl"),
                     ci(c, "overlap_ratio", signed=False), ci(c, "mean_power_ovl_over_seq"),
                     ci(c, "energy_seq_over_ovl"), f"{b['cause']} (sm {pct(b['sm'])}, clock {pct(b['clock'])})"
                     if b else "–"])
    text.append(_md(rows, ["run", "labels", "modes", "compute_slowdown", "seq_over_ovl", "overlap_ratio",
                           "mean_power_ovl_over_seq", "energy_seq_over_ovl", "cause of the overlapped compute's "
                           "slowdown"]))
    # one job per set of labels, at the NCCL_MAX_CTAS most of them ran with (the CTA sweep is finding 1)
    ctas = max(sorted({c["max_ctas"] for c in train}), key=lambda v: sum(c["max_ctas"] == v for c in train))
    by = defaultdict(list)
    for c in train:
        if c["max_ctas"] == ctas:
            by[c["config"] or c["workload"]].append(c)
    # a job whose every configuration's compute slowdown its modes' clocks alone explain has no average
    avg = {k: a for k, a in ((k, result.average("compute_slowdown", cs)) for k, cs in by.items())
           if a["avg"] is not None}
    if len(avg) > 1:
        order = sorted(avg, key=lambda k: avg[k]["avg"])
        hi, lo = order[-1], order[0]
        sep = avg[lo]["avg_hi"] is not None and avg[hi]["avg_lo"] is not None and avg[lo]["avg_hi"] < avg[hi]["avg_lo"]
        text.append(f"\nAt NCCL_MAX_CTAS={ctas}, {hi} loses most to overlap ({ci(avg[hi], 'avg')}), {lo} least "
                    f"({ci(avg[lo], 'avg')}); "
                    + ("the intervals separate." if sep else "the intervals overlap, so these runs do not order them.")
                    + " (The paper reports FSDP slowing more than pipeline parallelism, per papers.md §1.4.)")
    return "\n".join(text)


def _repeat_finding(result, configs: list[dict]) -> str:
    """Runs of the same command (run-to-run noise): do their figures' intervals overlap?"""
    by_cmd = defaultdict(list)  # the same command in the same environment (NCCL_* and the like)
    for r in result.runs:
        lab = _labels(r)
        if lab.get("command"):
            by_cmd[(lab["command"], *sorted((k, v) for k, v in lab.items() if k.startswith("env.")))].append(
                r["run_id"])
    pairs = [ids for ids in by_cmd.values() if len(ids) > 1]
    text = ["### 6. The same command twice: run-to-run noise against the intervals\n"]
    if not pairs:
        text.append("No command was run twice here.")
        return "\n".join(text)
    figures = ("compute_slowdown", "seq_over_ovl", "overlap_ratio", "mean_power_ovl_over_seq")
    rows, total, overlapping = [], 0, 0
    for ids in pairs:
        runs = [[c for c in configs if c["run_id"] == i] for i in ids]
        for a in runs[0]:
            for other in runs[1:]:
                b = next((x for x in other if (x["workload"], x["op"], x["dtype"], x["bytes"], x["max_ctas"],
                                               x["config"]) == (a["workload"], a["op"], a["dtype"], a["bytes"],
                                                                a["max_ctas"], a["config"])), None)
                if b is None:
                    continue
                for f in figures:
                    if a[f] is None or b[f] is None:
                        continue
                    total += 1
                    overlapping += not _separated(a, b, f)
                    rows.append([f"{a['run']} / {b['run']}", _short(a).split(" ", 1)[-1] if a["op"] else a["config"],
                                 f"`{f}`", ci(a, f), ci(b, f), pct(b[f] - a[f])])
    if not rows:
        text.append("No configuration was measured by both runs of a command.")
        return "\n".join(text)
    text.append(_md(rows, ["runs", "configuration", "figure", "first", "second", "difference"]))
    text.append(f"\nIn {overlapping} of {total} comparisons the two runs' intervals overlap: "
                + ("the intervals cover the run-to-run noise here." if overlapping == total
                   else "in the rest, run-to-run noise exceeds the within-run intervals; compare runs with that in "
                        "mind."))
    return "\n".join(text)


# what moves from 2 to 4 ranks: (figure, how the page says it, unit)
RANK_FIGURES = (
    ("compute_slowdown", "the overlapped slowdown of compute (`compute_slowdown`)", "%"),
    ("seq_over_ovl", "the gain of overlapping over running one after the other (`seq_over_ovl`)", "%"),
    ("comm_alone_ns", "communication alone per iteration (ms)", "ms"),
    ("comm_ovl_ns", "communication beside compute per iteration (ms)", "ms"),
    ("comm_slowdown", "the collectives' slowdown beside compute (`comm_slowdown`)", "%"),
    ("exposed_comm_ns", "exposed communication per iteration, not covered by compute (ms)", "ms"),
    ("exposed_comm_share", "exposed communication as a share of the overlapped iteration", "%"),
)
# 2-rank runs without a 4-rank counterpart, and why
TWO_ONLY = {"parallel=pp": "a pipeline of 2 stages, one per GPU",
            "train_ddp_repeat": "the DDP job run a second time, for run-to-run noise: finding 6",
            "train_ddp_ctas2": "the DDP job at NCCL_MAX_CTAS=2: finding 1"}
PARALLEL = {"ddp": "DDP", "fsdp2": "FSDP2", "pp": "pipeline"}


def _match_key(c: dict) -> tuple:
    """A configuration's name without its run and world size: the same program and arguments on 2 and on 4 ranks."""
    config = ";".join(kv for kv in (c["config"] or "").split(";") if kv and not kv.startswith("world="))
    return (c["run"], c["workload"], c["op"], c["dtype"], c["bytes"], c["max_ctas"], config)


def _fmt(a: dict, unit: str, fig: str = "") -> str:
    return ci(a, "avg", unit, signed=unit == "%" and fig != "exposed_comm_share")


def _change(a2: dict, a4: dict) -> tuple[float, float, float] | None:
    """4 ranks minus 2 ranks, with the interval of the difference (the two runs are independent), or None."""
    from traceql.stats import difference_interval

    if a2["avg"] is None or a4["avg"] is None:
        return None
    lo2, hi2, lo4, hi4 = (v if v is not None else float("nan") for v in (a2["avg_lo"], a2["avg_hi"], a4["avg_lo"],
                                                                        a4["avg_hi"]))
    return difference_interval(a2["avg"], lo2, hi2, a4["avg"], lo4, hi4)


def _way(d: tuple[float, float, float] | None) -> str:
    if d is None:
        return "–"
    _, lo, hi = d
    return "up" if lo > 0 else "down" if hi < 0 else "within the intervals" if lo == lo and hi == hi else "no interval"


def _diff_text(d: tuple[float, float, float] | None, unit: str) -> str:
    if d is None:
        return "–"
    fmt = (lambda v: number(v, "%")) if unit == "%" else (lambda v: f"{v / 1e6:+.3f}")
    return f"{fmt(d[0])} [{fmt(d[1])}, {fmt(d[2])}]" if d[1] == d[1] and d[2] == d[2] else f"{fmt(d[0])} [no interval]"


def ranks_section(r2, r4, source2: str, source4: str) -> str:
    """The same configurations on 2 and on 4 ranks: how each figure moves, chosen by the interval of the change."""
    c2 = {_match_key(c): c for c in r2.configs.to_pylist()}
    c4 = {_match_key(c): c for c in r4.configs.to_pylist()}
    both = [k for k in c2 if k in c4]
    micro = [k for k in both if c2[k]["op"] is not None]
    train = sorted((k for k in both if c2[k]["op"] is None), key=lambda k: k[-1])
    groups = []  # (workload, group, keys)
    if micro:
        groups.append(("microbenchmark", "all", micro))
        for dim, i, show in (("collective", 2, str), ("size", 4, _size), ("dtype", 3, str)):
            for v in sorted({k[i] for k in micro}, key=lambda v: (v is None, v)):
                groups.append(("microbenchmark", f"{dim} {show(v)}", [k for k in micro if k[i] == v]))
    for k in train:
        par = dict(kv.split("=", 1) for kv in k[-1].split(";") if "=" in kv).get("parallel", k[0])
        groups.append((PARALLEL.get(par, par), k[0], [k]))
    rows, moves = [], {}
    for workload, group, keys in groups:
        for fig, _, unit in RANK_FIGURES:
            a2 = r2.average(fig, [c2[k] for k in keys])
            a4 = r4.average(fig, [c4[k] for k in keys])
            if a2["avg"] is None or a4["avg"] is None:
                continue
            d = _change(a2, a4)
            moves[(workload, group, fig)] = (a2, a4, d)
            rows.append([workload, group, f"`{fig}`", a2["configs"], _fmt(a2, unit, fig), _fmt(a4, unit, fig),
                         _diff_text(d, unit), _way(d)])
    text = [f"The configurations run with the same program and arguments on 2 ranks (`{source2}`) and on 4 "
            f"(`{source4}`, the same kind of GPU): {len(micro)} configuration(s) of the microbenchmark and "
            f"{len(train)} training job(s) ({', '.join(k[0] for k in train) or 'none'}). Each figure is the average "
            "over the group's configurations, as the tables above average them, with its 95% interval; the change "
            "4 - 2 has the interval of a difference of two independent estimates (MOVER), and it is \"up\" or "
            "\"down\" only where that interval excludes 0."]
    text.append(_md(rows, ["workload", "group", "figure", "configurations", "2 ranks [95% CI]", "4 ranks [95% CI]",
                           "4 - 2 [95% CI]", "moved"]))
    what = {f: w for f, w, _ in RANK_FIGURES}
    lines = []
    for workload, group, _ in groups:
        if group != "all" and workload == "microbenchmark":
            continue
        said = []
        for fig, _, unit in RANK_FIGURES:
            if (workload, group, fig) not in moves:
                continue
            a2, a4, d = moves[(workload, group, fig)]
            way = _way(d)
            verb = {"up": "rose", "down": "fell"}.get(way, "moved")
            said.append(f"{what[fig]} {verb} from {_fmt(a2, unit, fig)} to {_fmt(a4, unit, fig)}"
                        + (" (beyond the intervals)" if way in ("up", "down") else
                           " (the change's interval holds 0)" if way == "within the intervals" else " (no interval)"))
        name = f"{workload} (all {len(micro)} configurations)" if workload == "microbenchmark" else workload
        lines.append(f"- {name}: " + "; ".join(said) + ".")
    if micro:
        per_group = []
        for fig in ("compute_slowdown", "comm_alone_ns", "exposed_comm_ns"):
            up = [g for (w, g, f), (_, _, d) in moves.items() if w == "microbenchmark" and g != "all" and f == fig
                  and _way(d) == "up"]
            down = [g for (w, g, f), (_, _, d) in moves.items() if w == "microbenchmark" and g != "all" and f == fig
                    and _way(d) == "down"]
            n = sum(1 for (w, g, f) in moves if w == "microbenchmark" and g != "all" and f == fig)
            per_config = [_change(r2.average(fig, [c2[k]]), r4.average(fig, [c4[k]])) for k in micro]
            cu = sum(_way(d) == "up" for d in per_config)
            cd = sum(_way(d) == "down" for d in per_config)
            per_group.append(
                f"`{fig}` rose beyond the intervals in {len(up)} of {n} groups" + (f" ({', '.join(up)})" if up else "")
                + f" and fell in {len(down)}" + (f" ({', '.join(down)})" if down else "")
                + f"; per configuration, it rose in {cu} of {len(per_config)} and fell in {cd}")
        lines.append("- microbenchmark by collective, size and data type: " + "; ".join(per_group) + ".")
    text.append("\n".join(lines))
    names4 = {k[0] for k in c4}
    only2 = sorted({c["run"] for k, c in c2.items() if k not in c4})
    notes = []
    for run in only2:
        cfg = next(c["config"] or "" for c in c2.values() if c["run"] == run)
        why = TWO_ONLY.get(run) or next((v for k, v in TWO_ONLY.items() if k in cfg.split(";")), None)
        notes.append(f"`{run}` ({why})" if why else f"`{run}`")
    if notes:
        text.append("On 2 ranks only: " + ", ".join(notes) + "; their rows above have no 4-rank row beside them."
                    + (f" On 4 ranks only: {', '.join(f'`{n}`' for n in sorted(names4 - {k[0] for k in c2}))}."
                       if names4 - {k[0] for k in c2} else ""))
    return "\n\n".join(text)


def _cells(line: str) -> list[str]:
    return line.strip()[2:-2].split(" | ")


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _key_width(*tables: list[list[str]]) -> int:
    """The fewest leading columns that tell every row of each table apart (the configuration, the mode, ...)."""
    width = max(len(r) for t in tables for r in t)
    for k in range(1, width):
        if all(len({tuple(r[:k]) for r in t}) == len(t) for t in tables):
            return k
    return width


def _merge_table(t2: str, t4: str) -> str:
    """One table of the 2-rank and the 4-rank rows: a ``ranks`` column after the columns that name a row, each
    4-rank row right after the 2-rank row of the same name (one row "2, 4" where every cell is the same), the
    4-rank rows without a 2-rank one last."""
    l2, l4 = t2.split("\n"), t4.split("\n")
    head = _cells(l2[0])
    rows2, rows4 = [_cells(x) for x in l2[2:]], [_cells(x) for x in l4[2:]]
    k = _key_width(rows2, rows4)
    out = [_row([*head[:k], "ranks", *head[k:]]), "|" + "---|" * (len(head) + 1)]
    used = set()
    for r in rows2:
        same = [i for i, x in enumerate(rows4) if x[:k] == r[:k] and i not in used]
        if len(same) == 1 and rows4[same[0]] == r:
            out.append(_row([*r[:k], "2, 4", *r[k:]]))
            used.add(same[0])
            continue
        out.append(_row([*r[:k], "2", *r[k:]]))
        for i in same:
            out.append(_row([*rows4[i][:k], "4", *rows4[i][k:]]))
            used.add(i)
    out += [_row([*x[:k], "4", *x[k:]]) for i, x in enumerate(rows4) if i not in used]
    return "\n".join(out)


def _on_four(block: str) -> str:
    if block.startswith("- "):
        return "On 4 ranks:\n\n" + block
    first = block[0].lower() if len(block) > 1 and block[1].islower() else block[0]
    return f"On 4 ranks: {first}{block[1:]}"


def beside(text2: str, text4: str | None) -> str:
    """A section generated from the 2-rank runs with the 4-rank one's beside it: each table of the two merged
    (:func:`_merge_table`), each paragraph of the 4-rank text that says something else after its 2-rank one
    ("On 4 ranks: ..."). Both texts come from the same function, so their blocks come in the same order."""
    if text4 is None:
        return text2
    if "\n\n### " in text2:  # subsections (the findings): each beside its namesake
        parts2, parts4 = text2.split("\n\n### "), text4.split("\n\n### ")
        named4 = {p.split("\n", 1)[0]: p for p in parts4[1:]}
        merged = [beside(parts2[0], parts4[0])]
        for part in parts2[1:]:
            title = part.split("\n", 1)[0]
            merged.append(beside(part, named4.pop(title)) if title in named4 else part)
        return "\n\n### ".join(m.strip("\n") for m in merged + list(named4.values()))
    b2, b4 = text2.split("\n\n"), text4.split("\n\n")
    tables4 = [b for b in b4 if b.startswith("|")]
    paras4 = [b for b in b4 if not b.startswith("|")]
    out, t, p = [], 0, 0
    for b in b2:
        if b.startswith("|"):
            if t < len(tables4) and _cells(b.split("\n")[0]) == _cells(tables4[t].split("\n")[0]):
                out.append(_merge_table(b, tables4[t]))
                t += 1
            else:
                out.append(b)
            continue
        out.append(b)
        if p < len(paras4):
            if paras4[p] != b:
                out.append(_on_four(paras4[p]))
            p += 1
    out += [x if x.startswith("|") else _on_four(x) for x in tables4[t:] + paras4[p:]]
    return "\n\n".join(out)


def generate(result, source: str, four=None) -> str:
    """The page. ``four``: (the 4-rank runs' tables, their source), set beside the 2-rank ones, or None."""
    r4, source4 = four if four is not None else (None, None)

    def both(fn, *args):
        return beside(fn(result, *args), fn(r4, *args) if r4 is not None else None)

    sections = [
        "# Reproducing the compute-communication overlap characterization (Lee et al., ISPASS 2025)",
        "Generated by `python benchmarks/reproduction.py --write docs/reproduction.md` from the committed runs; do not "
        "edit by hand (`tests/test_reproduction.py` regenerates it and fails when it differs). The same tables come "
        "from `traceql paper RUNS` and `traceql report RUNS --recipe paper`; docs/paper.md defines every figure.",
        *([PENDING] if source.endswith("suite") else []),
        "## Runs\n\n" + beside(runs_section(result, source), runs_section(r4, source4) if r4 is not None else None),
        "## Setup: the paper's and ours\n\n" + both(setup_section),
        "## Headline: the paper's numbers beside ours\n\n" + both(headline_section),
        "## Per collective, data type and NCCL_MAX_CTAS\n\n" + both(groups_section),
        "## Per configuration\n\n" + both(configs_section),
        "## Energy and power per mode\n\n" + both(power_section),
        "## Why each configuration slowed down\n\nThe attribution's per-instance predictions, t0-weighted over the "
        "overlapped mode's instances and combined by its rule (docs/paper.md): the parts and the residual add up to "
        "the observed slowdown of those instances against their own baselines (docs/attribution.md), which is close "
        "to, not the same as, `compute_slowdown` (the mode totals).\n\n" + both(breakdown_section),
        "## Findings the paper does not have\n\n" + both(findings_section),
        *(["## From 2 to 4 ranks\n\n" + ranks_section(result, r4, source, source4)] if r4 is not None else []),
    ]
    return "\n\n".join(sections) + "\n"


def compute(data: str, store: Path | None = None):
    """(the paper's tables over the committed runs, a description of where they came from). ``store``: the runs of
    ``data`` already ingested (the tests' fixture), else they are ingested into a temporary store."""
    from traceql.paper import paper

    if data == "h200x2":
        if store is not None:
            return paper(store), "tests/data/h200x2"
        sys.path.insert(0, str(ROOT / "tests"))
        from h200x2 import build_store  # type: ignore[import-not-found]

        with tempfile.TemporaryDirectory(prefix="traceql-repro-") as tmp:
            return paper(build_store(Path(tmp) / "store")), "tests/data/h200x2"
    return paper(SUITE), "tests/data/h200/suite"


def compute4(data: str, store: Path | None = None):
    """(the paper's tables over the 4-rank runs of tests/data/h200x4, their source), set beside the 2-rank ones of
    tests/data/h200x2; None for the suite or where tests/data/h200x4 is not there. ``store``: those runs already
    ingested (the tests' fixture: ``build_store(out, H200X4_RUNS, H200X4)``)."""
    from traceql.paper import paper

    if data != "h200x2" or not (H200X4 / "runs.json").exists():
        return None
    if store is not None:
        return paper(store), "tests/data/h200x4"
    sys.path.insert(0, str(ROOT / "tests"))
    from h200x2 import build_store  # type: ignore[import-not-found]

    with tempfile.TemporaryDirectory(prefix="traceql-repro4-") as tmp:
        return paper(build_store(Path(tmp) / "store", H200X4_RUNS, H200X4)), "tests/data/h200x4"


def default_data() -> str:
    return "h200x2" if (H200X2 / "README.md").exists() else "suite"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--write", type=Path, help="write the generated markdown here")
    p.add_argument("--data", choices=("suite", "h200x2"), default=None,
                   help="which committed runs (default: tests/data/h200x2 when it is there, else the suite)")
    args = p.parse_args(argv)
    data = args.data or default_data()
    result, source = compute(data)
    text = generate(result, source, compute4(data))
    if args.write:
        from traceql.paper import write_text

        write_text(args.write, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

