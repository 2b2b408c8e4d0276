"""Per-configuration figures of the overlap characterization (Lee et al., ISPASS 2025) and their headline.

Input: the rows of ``paper_iterations`` (one per mode range, GPU and iteration). A configuration is one run's mode
ranges with the same labels (workload, op, dtype, bytes, max_ctas, config). Within a configuration, each mode's
per-iteration GPU times are averaged per GPU, then over GPUs. Every figure carries a 95% percentile-bootstrap
interval over iterations: each (mode, GPU) is resampled on its own, and the GPUs of one mode together (iteration i
on every GPU is one unit) when they ran the same number of iterations, since collectives tie them together.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from ..stats import seed_for

NAN = float("nan")
MODES = ("compute", "comm", "overlapped", "sequential")
KEY = ("run_id", "workload", "op", "dtype", "bytes", "max_ctas", "config")
DIMENSIONS = ("workload", "op", "dtype", "bytes", "max_ctas")  # headline groups, besides all configurations
QUANTITIES = ("wall_ns", "compute_ns", "comm_ns", "hidden_comm_ns", "compute_ovl_ns")
N_BOOT = 2000
IN_OVERLAP_MIN_F = 0.2  # docs/attribution.md (in-overlap slowdown): below it the covered part is too small to divide by


@dataclass(frozen=True)
class Figure:
    name: str
    text: str
    paper_avg: float | None = None  # the paper's value, where it reports one (papers.md §1.1)
    paper_max: float | None = None


FIGURES = (
    Figure("compute_slowdown", "compute kernel time per iteration, overlapped / compute only - 1", 0.189, 0.400),
    Figure("compute_slowdown_vs_seq", "compute kernel time per iteration, overlapped / sequential - 1"),
    Figure("seq_over_ovl", "iteration time, sequential / overlapped - 1 (both measured)", 0.102, 0.266),
    Figure("seq_over_ovl_derived", "the paper's equation: (communication hidden under compute - compute time "
                                   "overlap added) / overlapped iteration time"),
    Figure("comm_slowdown", "communication time per iteration, overlapped / communication only - 1"),
    Figure("overlap_efficiency", "(T_seq - T_ovl) / (T_seq - max(T_compute, T_comm)): 1 = communication hidden "
                                 "at no cost, 0 = no gain over sequential; undefined where the possible gain "
                                 "T_seq - max(T_compute, T_comm) is not measurably above 0"),
    Figure("overlap_ratio", "communication hidden under compute / overlapped iteration time"),
    Figure("mean_power_ovl_over_seq", "mean power, overlapped / sequential - 1 (NVML energy counter)"),
    Figure("peak_power_ovl_over_seq", "peak power sample, overlapped / sequential - 1", None, 0.25),
    Figure("energy_seq_over_ovl", "energy per iteration, sequential / overlapped - 1"),
)


def resample_rows(n: int, *, key: tuple, n_boot: int = N_BOOT) -> np.ndarray:
    """(n_boot, n) row indices of bootstrap resamples of n units, seeded by ``key`` (traceql.stats.seed_for).

    One index matrix serves every quantity measured on the same units, so the resamples keep what they share.
    """
    if n < 1 or n_boot < 1:
        raise ValueError("n and n_boot must be >= 1")
    return np.random.default_rng(seed_for(*key, "resample", n)).integers(0, n, size=(n_boot, n))


def percentile_interval(replicates: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """(lo, hi): percentile interval of bootstrap replicates (order statistics); NaN when any replicate is NaN."""
    r = np.asarray(replicates, dtype=np.float64).ravel()
    if r.size == 0 or np.isnan(r).any():
        return NAN, NAN
    lo, hi = np.quantile(r, [(1.0 - level) / 2.0, (1.0 + level) / 2.0], method="inverted_cdf")
    return float(lo), float(hi)


@dataclass
class Est:
    """A point estimate and its bootstrap replicates (None: too few iterations for an interval)."""

    point: float
    reps: np.ndarray | None = None

    def interval(self) -> tuple[float, float]:
        if self.reps is None or math.isnan(self.point):
            return NAN, NAN
        return percentile_interval(self.reps)


def combine(fn: Callable[..., object], *ests: Est | None) -> Est:
    """``fn`` applied to the points and, where every input has replicates, to the replicates."""
    if any(e is None for e in ests):
        return Est(NAN)
    with np.errstate(divide="ignore", invalid="ignore"):  # x / 0 is inf or NaN (undefined, below), never an error
        point = float(fn(*(np.float64(e.point) for e in ests)))
        reps = None
        if all(e.reps is not None for e in ests):
            reps = np.asarray(fn(*(e.reps for e in ests)), dtype=np.float64)
            reps = np.where(np.isfinite(reps), reps, np.nan)
    return Est(point if math.isfinite(point) else NAN, reps)


def key_of(row: dict) -> tuple:
    return tuple(row.get(k) for k in KEY)


def _sort_key(key: tuple) -> tuple:
    return tuple((v is None, str(v) if v is not None else "") for v in key)


def mode_stats(rows: list[dict], key: tuple, n_boot: int = N_BOOT) -> dict[str, object]:
    """Per-iteration means of QUANTITIES for one (configuration, mode), averaged over GPUs, with replicates."""
    strata: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        strata[(r["global_pid"], r["device_id"])].append(r)
    arrays = []
    for s in sorted(strata):
        its = sorted(strata[s], key=lambda r: (r["mode_start_ns"], r["first_start_ns"], r["iter_start_ns"]))
        arrays.append(np.array([[r[q] or 0 for q in QUANTITIES] for r in its], dtype=np.float64))
    counts = [a.shape[0] for a in arrays]
    point = np.mean([a.mean(axis=0) for a in arrays], axis=0)
    reps = None
    if min(counts) >= 2:
        if len(set(counts)) == 1:  # the same iterations on every GPU: resample them together
            idx = resample_rows(counts[0], key=key, n_boot=n_boot)
            reps = np.mean([a[idx].mean(axis=1) for a in arrays], axis=0)
        else:
            reps = np.mean([a[resample_rows(a.shape[0], key=(*key, i), n_boot=n_boot)].mean(axis=1)
                            for i, a in enumerate(arrays)], axis=0)
    out: dict[str, object] = {q: Est(float(point[j]), None if reps is None else reps[:, j])
                              for j, q in enumerate(QUANTITIES)}
    out["iterations"] = min(counts)
    out["gpus"] = len(arrays)
    comm = sum(r["comm_ns"] or 0 for r in rows)
    out["comm_sms"] = sum(r["comm_sm_ns"] or 0 for r in rows) / comm if comm else None
    # the GPC clock its compute kernels ran at (GPU metrics, weighted by their time; None without metrics)
    clocked = sum(r.get("compute_clocked_ns") or 0 for r in rows)
    out["compute_clock_mhz"] = (sum(r.get("compute_clock_mhz_ns") or 0 for r in rows) / clocked) if clocked else None
    return out


def config_figures(modes: dict[str, dict], power: dict[str, dict] | None = None) -> dict[str, Est]:
    """Every figure of one configuration from its modes' stats (and per-mode power, where measured)."""
    def q(mode: str, name: str) -> Est | None:
        return modes[mode][name] if mode in modes else None

    base = "compute" if "compute" in modes else "sequential"
    figs = {
        "compute_slowdown": combine(lambda o, c: o / c - 1, q("overlapped", "compute_ns"), q("compute", "compute_ns")),
        "compute_slowdown_vs_seq": combine(lambda o, s: o / s - 1, q("overlapped", "compute_ns"),
                                           q("sequential", "compute_ns")),
        "seq_over_ovl": combine(lambda s, o: s / o - 1, q("sequential", "wall_ns"), q("overlapped", "wall_ns")),
        "seq_over_ovl_derived": combine(lambda h, o, c, w: (h - (o - c)) / w, q("overlapped", "hidden_comm_ns"),
                                        q("overlapped", "compute_ns"), q(base, "compute_ns"),
                                        q("overlapped", "wall_ns")),
        "comm_slowdown": combine(lambda o, c: o / c - 1, q("overlapped", "comm_ns"), q("comm", "comm_ns")),
        "overlap_efficiency": combine(lambda s, o, c, m: (s - o) / (s - np.maximum(c, m)), q("sequential", "wall_ns"),
                                      q("overlapped", "wall_ns"), q("compute", "wall_ns"), q("comm", "wall_ns")),
        "overlap_ratio": combine(lambda h, w: h / w, q("overlapped", "hidden_comm_ns"), q("overlapped", "wall_ns")),
        "compute_covered": combine(lambda c, t: c / t, q("overlapped", "compute_ovl_ns"),
                                   q("overlapped", "compute_ns")),
    }
    # the in-overlap slowdown of docs/attribution.md: the slowdown of the covered part alone, sigma = 1/rho - 1 with
    # rho = (1/(1+s) - (1-f))/f, where f is the share of compute time communication covered (defined for f >= 0.2)
    covered = figs["compute_covered"]
    figs["in_overlap_slowdown"] = (combine(lambda s, f: 1 / ((1 / (1 + s) - (1 - f)) / f) - 1,
                                           figs["compute_slowdown"], covered)
                                   if covered.point >= IN_OVERLAP_MIN_F else Est(NAN))
    # the efficiency divides by what overlapping could gain at best; where that is not measurably above zero (a
    # collective far shorter than the compute beside it) the ratio is noise over noise: left undefined
    potential = combine(lambda s, c, m: s - np.maximum(c, m), q("sequential", "wall_ns"), q("compute", "wall_ns"),
                        q("comm", "wall_ns"))
    lo, _ = potential.interval()
    if not (lo > 0 or (math.isnan(lo) and potential.point > 0)):
        figs["overlap_efficiency"] = Est(NAN)
    # times per iteration, for comparisons between runs (docs/reproduction.md, from 2 to 4 ranks): the collectives
    # alone, the collectives beside the compute, and the part of those that no compute covered (exposed), also as a
    # share of the overlapped iteration
    figs["comm_alone_ns"] = combine(lambda c: c, q("comm", "comm_ns"))
    figs["comm_ovl_ns"] = combine(lambda c: c, q("overlapped", "comm_ns"))
    figs["exposed_comm_ns"] = combine(lambda c, h: c - h, q("overlapped", "comm_ns"), q("overlapped", "hidden_comm_ns"))
    figs["exposed_comm_share"] = combine(lambda c, h, w: (c - h) / w, q("overlapped", "comm_ns"),
                                         q("overlapped", "hidden_comm_ns"), q("overlapped", "wall_ns"))
    power = power or {}

    def p(mode: str, name: str) -> Est | None:
        e = power.get(mode, {}).get(name)
        return e if e is not None and not math.isnan(e.point) else None

    figs["mean_power_ovl_over_seq"] = combine(lambda o, s: o / s - 1, p("overlapped", "mean_power_w"),
                                              p("sequential", "mean_power_w"))
    figs["peak_power_ovl_over_seq"] = combine(lambda o, s: o / s - 1, p("overlapped", "peak_power_w"),
                                              p("sequential", "peak_power_w"))
    figs["energy_seq_over_ovl"] = combine(lambda s, o: s / o - 1, p("sequential", "energy_per_iter_j"),
                                          p("overlapped", "energy_per_iter_j"))
    return figs


# figures that compare the GPU time of modes doing compute: a mode run at another SM clock than the one it is compared
# with moves them by the clock ratio alone (a compute-bound GEMM's time scales as 1/clock)
CLOCKED = ("compute_slowdown", "compute_slowdown_vs_seq", "seq_over_ovl", "overlap_efficiency")


def at_equal_clock(modes: dict[str, dict], clocks: dict[str, float | None]) -> dict[str, float]:
    """The points of the CLOCKED figures with every mode's compute and wall time taken at one SM clock (times x
    clock: cycles, as a compute-bound mode would take at the same clock); the collectives alone are taken as they were
    (link-bound). NaN where a mode the figure needs has no clock reading."""
    known = [c for c in clocks.values() if c]
    ref = max(known) if known else NAN

    def t(mode: str, name: str) -> float:
        if mode not in modes:
            return NAN
        if mode == "comm":
            return modes[mode][name].point
        c = clocks.get(mode)
        return modes[mode][name].point * c / ref if c else NAN

    with np.errstate(divide="ignore", invalid="ignore"):
        s, o, c, m = (t(x, "wall_ns") for x in ("sequential", "overlapped", "compute", "comm"))
        out = {"compute_slowdown": t("overlapped", "compute_ns") / t("compute", "compute_ns") - 1,
               "compute_slowdown_vs_seq": t("overlapped", "compute_ns") / t("sequential", "compute_ns") - 1,
               "seq_over_ovl": s / o - 1,
               "overlap_efficiency": (s - o) / (s - max(c, m))}
    return {k: float(v) if math.isfinite(v) else NAN for k, v in out.items()}


# the values whose side a CLOCKED figure's conclusion rests on: a loss or a gain (0); for the efficiency, also
# whether it exceeds what hiding communication can give at best (1)
BOUNDS = {"overlap_efficiency": (0.0, 1.0)}


# the mode each CLOCKED figure sets the overlapped mode against
AGAINST = {"compute_slowdown": "compute", "compute_slowdown_vs_seq": "sequential", "seq_over_ovl": "sequential",
           "overlap_efficiency": "compute"}


def clock_biased(figs: dict[str, Est], equal: dict[str, float], clocks: dict[str, float | None]) -> list[str]:
    """The CLOCKED figures of a configuration whose conclusion the clock difference between its modes alone turns
    over: the measured 95% interval lies on one side of a bound (0; for the efficiency 0 or 1) and the figure taken
    at one clock on the other, and the overlapped mode ran at the higher clock. Doing more at once, the overlapped
    mode draws as much power or more, so a lower clock there may be the overlap's own effect (the attribution's
    `clock` cause) and is left standing; a higher one is drift between the modes (a GPU warming up, a mode run first).
    Such a figure measures the clocks, not the overlap; the headline leaves it out."""
    out = []
    for name in CLOCKED:
        lo, hi = figs[name].interval()
        v = equal.get(name, NAN)
        ovl, other = clocks.get("overlapped"), clocks.get(AGAINST[name])
        if math.isnan(lo) or math.isnan(v) or not (ovl and other and ovl > other):
            continue
        if any(hi < b < v or v < b < lo for b in BOUNDS.get(name, (0.0,))):
            out.append(name)
    return out


def group_iterations(rows: Iterable[dict]) -> dict[tuple, dict[str, list[dict]]]:
    """configuration key -> mode -> its iteration rows."""
    out: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        out[key_of(r)][r["mode"]].append(r)
    return {k: dict(out[k]) for k in sorted(out, key=_sort_key)}


def clock_left_out(config: dict, figure: str) -> bool:
    """Whether a configuration row names ``figure`` in its ``clock_biased`` (:func:`clock_biased`)."""
    return figure in (config.get("clock_biased") or "").split(",")


def headline(configs: list[dict], figs: dict[tuple, dict[str, Est]]) -> list[dict]:
    """Average and maximum of each figure over configurations: all of them, and per value of each dimension.

    The average's interval averages the configurations' replicates (their iterations are independent); the maximum
    is the configuration with the highest point estimate, with that configuration's interval and name. A dimension
    with a single value (or none) is left out: its group would repeat 'all'. A configuration's figure that its modes'
    clocks alone turn over (its row's ``clock_biased``) is left out and counted (``clock_left_out``).
    """
    rows = []
    groups: list[tuple[str, str, list[dict]]] = [("all", "all", configs)]
    for dim in DIMENSIONS:
        values = sorted({str(c[dim]) for c in configs if c[dim] is not None})
        if len(values) > 1:
            groups += [(dim, v, [c for c in configs if str(c[dim]) == v]) for v in values]
    for fig in FIGURES:
        for dim, value, members in groups:
            ests = [(c, figs[c["_key"]][fig.name]) for c in members]
            ests = [(c, e) for c, e in ests if not math.isnan(e.point)]
            left_out = sum(clock_left_out(c, fig.name) for c, _ in ests)
            ests = [(c, e) for c, e in ests if not clock_left_out(c, fig.name)]
            if not ests:
                continue
            avg = Est(float(np.mean([e.point for _, e in ests])),
                      np.mean([e.reps for _, e in ests], axis=0) if all(e.reps is not None for _, e in ests)
                      else None)
            top_c, top = max(ests, key=lambda ce: ce[1].point)
            (alo, ahi), (mlo, mhi) = avg.interval(), top.interval()
            paper = fig.paper_avg is not None or fig.paper_max is not None
            rows.append(dict(figure=fig.name, group_by=dim, group=value, configs=len(ests), clock_left_out=left_out,
                             avg=avg.point,
                             avg_lo=alo, avg_hi=ahi, max=top.point, max_lo=mlo, max_hi=mhi,
                             max_config=top_c["label"],
                             paper_avg=fig.paper_avg if paper and dim == "all" else None,
                             paper_max=fig.paper_max if paper and dim == "all" else None))
    return rows


def config_label(c: dict) -> str:
    """``run: op dtype size ctas=N extra-labels``; the workload too when it says more than the run's name."""
    run = c.get("run") or c["run_id"]
    parts = [str(c[k]) for k in ("op", "dtype") if c[k] is not None]
    if c["workload"] not in ("mode", run):
        parts.insert(0, c["workload"])
    if c["bytes"] is not None:
        parts.append(_size(c["bytes"]))
    parts.append(f"ctas={c['max_ctas']}")
    if c["config"]:
        parts.append(c["config"])
    return f"{run}: " + " ".join(parts)


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"
