"""Generate docs/reproduction.md: the overlap characterization of Lee et al. (ISPASS 2025) from the committed runs.

    python benchmarks/reproduction.py [--write docs/reproduction.md] [--data suite|h200x2]

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
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "tests/data/h200/suite"
H200X2 = ROOT / "tests/data/h200x2"
sys.path.insert(0, str(ROOT))

from traceql.paper.figures import FIGURES  # noqa: E402
from traceql.paper.text import ci, number, with_interval  # noqa: E402

# The paper's setup as far as it can be read (../shared/reference/papers.md §1.2, from a reading note of the PDF).
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
    gpus = _distinct(lab.get("gpus", "").replace(";", ", ") for lab in labs)
    ranks = _distinct(c["gpus"] for c in configs)
    sizes = _distinct(f"{c['bytes'] >> 20} MiB" for c in configs if c["bytes"])
    extra = _distinct(c["config"] for c in configs)
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
                                      f", NCCL {lab.get('env.NCCL_VERSION', '?')}, nsys {lab.get('nsys', '?')}"
                                      for lab in labs})),
    }
    rows = [[k, PAPER_SETUP[k], ours[k]] for k in PAPER_SETUP]
    return _md(rows, ["", "the paper", "here"])


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
        rows.append([f"`{fig.name}`", fig.text, paper_avg, paper_max, ci(r, "avg"), ci(r, "max"), r["configs"]])
    text = [_md(rows, ["figure", "definition", "paper avg", "paper max", "here: average [95% CI]",
                       "here: maximum [95% CI]", "configurations"])]
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
                    f"{r['max_config']}, against the paper's {pct(fig.paper_max, False)}.")
    return "\n\n".join(text[:1]) + "\n\n" + "\n".join(text[1:])


def groups_section(result) -> str:
    rows = []
    shown = ("compute_slowdown", "seq_over_ovl", "comm_slowdown", "overlap_efficiency")
    by = defaultdict(dict)
    for r in result.headline.to_pylist():
        if r["group_by"] != "all" and r["figure"] in shown:
            by[(r["group_by"], r["group"])][r["figure"]] = r
    for (dim, group), figs in sorted(by.items()):
        n = max(f["configs"] for f in figs.values())
        rows.append([dim, group, n] + [ci(figs[f], "avg") if f in figs else "–" for f in shown])
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
    missing = len(modes) - len(measured)
    return (_md(rows, ["configuration", "mode", "time per iteration (ms)", "energy per iteration, all GPUs (J)",
                       "mean power per GPU (W)", "peak power (W)", "power limit (W)"])
            + (f"\n\n{missing} of {len(modes)} modes have no figure (too few counter changes inside them)."
               if missing else ""))


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
    return f"The covered share does not order all of them: {pairs}, and the intervals separate."


def findings_section(result) -> str:
    configs = result.configs.to_pylist()
    breakdown = {(b["run_id"], b["op"], b["dtype"], b["bytes"], b["max_ctas"], b["config"], b["side"]): b
                 for b in result.breakdown.to_pylist()}

    def bd(c, side):
        return breakdown.get((c["run_id"], c["op"], c["dtype"], c["bytes"], c["max_ctas"], c["config"], side))

    parts = []
    # 1. NCCL_MAX_CTAS: the SMs NCCL takes against the collective's speed
    groups = defaultdict(list)
    for c in configs:
        groups[(c["workload"], c["op"], c["dtype"], c["bytes"], c["config"])].append(c)
    sweeps = {k: sorted(v, key=lambda c: c["comm_sms"] or 0) for k, v in groups.items()
              if len({c["max_ctas"] for c in v}) > 1}
    text = ["### 1. NCCL_MAX_CTAS: SMs taken by NCCL against collective speed and compute slowdown\n"]
    if not sweeps:
        text.append("These runs hold no configuration measured at more than one NCCL_MAX_CTAS.")
    for key, cs in sorted(sweeps.items(), key=lambda kv: [str(v) for v in kv[0]]):
        rows = []
        for c in cs:
            b = bd(c, "compute")
            rows.append([c["max_ctas"], f"{c['comm_sms']:.0f}" if c["comm_sms"] else "–",
                         number(c["comm_iter_ns"], "ms"), f"{c['comm_only_gbps']:.0f}" if c["comm_only_gbps"] else "–",
                         ci(c, "comm_slowdown"), ci(c, "compute_slowdown"), ci(c, "seq_over_ovl"),
                         ci(c, "overlap_efficiency", signed=False), pct(b["sm"]) if b else "–"])
        lo, hi = cs[0], cs[-1]
        speed = (lo["comm_iter_ns"] / hi["comm_iter_ns"]) if lo["comm_iter_ns"] and hi["comm_iter_ns"] else None
        sep = _separated(lo, hi, "compute_slowdown")
        text.append(f"{key[1]} {key[2]}, {key[3] >> 20 if key[3] else '?'} MiB:\n\n" + _md(rows, [
            "NCCL_MAX_CTAS", "SMs held by NCCL", "collective alone (ms)", "algorithm bandwidth (GB/s)",
            "comm_slowdown", "compute_slowdown", "seq_over_ovl", "overlap_efficiency", "sm part (breakdown)"]))
        text.append(
            f"\nFrom {lo['comm_sms']:.0f} to {hi['comm_sms']:.0f} SMs held, the collective alone ran "
            f"{speed:.2f}x {'faster' if speed and speed > 1 else 'slower'} ({number(lo['comm_iter_ns'], 'ms')} -> "
            f"{number(hi['comm_iter_ns'], 'ms')} ms per iteration), while the GEMM beside it lost "
            f"{ci(lo, 'compute_slowdown')} -> {ci(hi, 'compute_slowdown')}: "
            + ("the intervals separate, so more NCCL CTAs cost measurably more compute."
               if sep else "the compute slowdowns' intervals overlap: at these iteration counts the SMs NCCL takes "
                           "do not measurably change the GEMM's loss, while its speed changes a lot.")
            + f" Overlapping saved {ci(lo, 'seq_over_ovl')} -> {ci(hi, 'seq_over_ovl')} of the sequential time."
            + _trend([bd(c, "compute") for c in cs], "sm", "the attribution's SM part of the GEMM's slowdown"))
    parts.append("\n".join(text))

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
            sigma = [c["in_overlap_slowdown"] for c in cs if c["in_overlap_slowdown"] is not None]
            bds = [bd(c, "compute") for c in cs if bd(c, "compute")]
            alone = [c["comm_iter_ns"] for c in cs if c["comm_iter_ns"]]
            stats[dtype] = dict(avg=head[dtype]["avg"], gemm=sum(c["compute_iter_ns"] for c in cs) / len(cs),
                                comm=sum(alone) / len(alone) if alone else None,
                                covered=sum(c["compute_covered"] for c in cs) / len(cs),
                                parts={f: sum(b[f] for b in bds) / len(bds) for f in (*FACTORS, "residual")}
                                if bds else None)
            rows.append([dtype, len(cs), number(stats[dtype]["gemm"], "ms"), number(stats[dtype]["comm"], "ms"),
                         pct(stats[dtype]["covered"], False),
                         ci(head[dtype], "avg"), pct(sum(sigma) / len(sigma)) if sigma else "– (covered < 20%)",
                         pct(stats[dtype]["parts"]["sm"]) if bds else "–",
                         _distinct(b["cause"] for b in bds)])
        text.append(_md(rows, ["dtype", "configurations", "compute alone per iteration (ms)",
                               "communication alone per iteration (ms)", "compute time covered by communication",
                               "compute_slowdown: average [95% CI]", "in-overlap slowdown (average)",
                               "sm part (breakdown, average)", "causes"]))
        order = sorted(stats, key=lambda d: stats[d]["avg"])
        worst, runner_up, least = order[-1], order[-2], order[0]
        sep = head[runner_up]["avg_hi"] is not None and head[worst]["avg_lo"] is not None \
            and head[runner_up]["avg_hi"] < head[worst]["avg_lo"]
        by_gemm = sorted(stats, key=lambda d: stats[d]["gemm"])
        covered = [stats[d]["covered"] for d in by_gemm]
        falling = all(b < a for a, b in zip(covered, covered[1:], strict=False))
        lossy = [d for d in stats if stats[d]["parts"] and stats[d]["avg"] > 0]
        sm_leads = lossy and all(stats[d]["parts"]["sm"] >= max(stats[d]["parts"][f] for f in FACTORS) for d in lossy)
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
            + (" Where a precision loses, the attribution's largest part is the SMs the collective's CTAs hold."
               if sm_leads else " The attribution's largest part differs between precisions (table).")
            + " The in-overlap slowdown (the loss of the covered time alone, DESIGN.md) is the per-unit-of-overlap "
            "comparison; it is left out where less than 20% of the compute time was covered.")
    else:
        text.append("These runs hold one data type only.")
    parts.append("\n".join(text))

    # 3. the communication side
    head_all = {r["figure"]: r for r in result.headline.to_pylist() if r["group_by"] == "all"}
    text = ["### 3. Communication slows down too\n"]
    comm = head_all.get("comm_slowdown")
    if comm:
        sides = [b for b in result.breakdown.to_pylist() if b["side"] == "comm"]
        causes = defaultdict(int)
        for b in sides:
            causes[b["cause"]] += 1
        text.append(
            f"The paper measures the compute side only. Here the collectives ran {ci(comm, 'avg')} slower on average "
            f"beside the GEMM than alone (at most {ci(comm, 'max')}, {comm['max_config']}). The attribution's causes "
            "for the collectives: " + ", ".join(f"{k} {v}" for k, v in sorted(causes.items())) + ".")
    else:
        text.append("No configuration here has both a communication-only and an overlapped mode.")
    parts.append("\n".join(text))

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
            f"{ci(meas, 'avg')}. Per configuration the derived value is {pct(sum(diffs) / len(diffs))} off on average "
            f"(from {pct(min(diffs))} to {pct(max(diffs))}) and falls inside the measured interval in {inside} of "
            f"{len(diffs)}.")
    parts.append("\n".join(text))
    return "\n\n".join(parts)


def generate(result, source: str) -> str:
    sections = [
        "# Reproducing the compute-communication overlap characterization (Lee et al., ISPASS 2025)",
        "Generated by `python benchmarks/reproduction.py --write docs/reproduction.md` from the committed runs; do not "
        "edit by hand (`tests/test_reproduction.py` regenerates it and fails when it differs). The same tables come "
        "from `traceql paper RUNS` and `traceql report RUNS --recipe paper`; docs/paper.md defines every figure.",
        *([PENDING] if source.endswith("suite") else []),
        "## Runs\n\n" + runs_section(result, source),
        "## Setup: the paper's and ours\n\n" + setup_section(result),
        "## Headline: the paper's numbers beside ours\n\n" + headline_section(result),
        "## Per collective, data type and NCCL_MAX_CTAS\n\n" + groups_section(result),
        "## Per configuration\n\n" + configs_section(result),
        "## Energy and power per mode\n\n" + power_section(result),
        "## Why each configuration slowed down\n\nThe attribution's per-instance predictions, summed over the "
        "overlapped mode's instances (t0-weighted): the parts add up to the observed slowdown of those instances "
        "against their own baselines (docs/attribution.md), which is close to, not the same as, `compute_slowdown` "
        "(the mode totals).\n\n" + breakdown_section(result),
        "## Findings the paper does not have\n\n" + findings_section(result),
    ]
    return "\n\n".join(sections) + "\n"


def compute(data: str):
    """(the paper's tables over the committed runs, a description of where they came from)."""
    from traceql.paper import paper

    if data == "h200x2":
        sys.path.insert(0, str(ROOT / "tests"))
        from h200x2 import build_store  # type: ignore[import-not-found]

        with tempfile.TemporaryDirectory(prefix="traceql-repro-") as tmp:
            store = build_store(Path(tmp) / "store")
            return paper(store), "tests/data/h200x2"
    return paper(SUITE), "tests/data/h200/suite"


def default_data() -> str:
    return "h200x2" if (H200X2 / "README.md").exists() else "suite"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--write", type=Path, help="write the generated markdown here")
    p.add_argument("--data", choices=("suite", "h200x2"), default=None,
                   help="which committed runs (default: tests/data/h200x2 when it is there, else the suite)")
    args = p.parse_args(argv)
    result, source = compute(args.data or default_data())
    text = generate(result, source)
    if args.write:
        from traceql.paper import write_text

        write_text(args.write, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

