"""The overlap characterization of Lee et al. (ISPASS 2025) for any run that marks its modes with NVTX ranges.

``paper(RUNS)`` reads the mode ranges (``paper_ranges``: traceql's ``case:NAME;mode=...`` labels or plain
``mode:NAME`` ranges, docs/paper.md), the GPU work of every iteration (``paper_iterations``), the NVML samples in
each mode (``paper_power``) and the attribution's per-instance predictions (``paper_instances``), then reduces them
(:func:`reduce`) into four tables:

- ``configs``: per configuration, the paper's figures with 95% bootstrap intervals over iterations;
- ``headline``: their average and maximum over configurations, overall and per workload, collective, data type,
  message size and NCCL_MAX_CTAS, beside the paper's numbers;
- ``modes``: per configuration and mode, iteration time, energy per iteration, mean and peak power (or why not);
- ``breakdown``: per configuration and side (compute, comm, copy), the overlapped instances' slowdown split into
  sm / dram_bw / cache / clock / link / residual, and its cause.

``traceql paper`` prints them; the ``paper`` report recipe shows them (queries per run, this reduce across runs).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from .. import store
from ..errors import BadInputError, TraceqlError, UsageError, check_on_error
from . import figures as fg
from .breakdown import FACTORS, breakdowns
from .figures import FIGURES, KEY, MODES, N_BOOT, Est
from .power import mode_power

VIEWS = {"iterations": "paper_iterations", "power": "paper_power", "instances": "paper_instances"}
TABLES = ("headline", "configs", "modes", "breakdown")
NO_MODES = ("no NVTX mode ranges in {where}: mark each mode with a range named mode:compute_only, mode:comm_only, "
            "mode:overlapped or mode:sequential (or traceql's case:NAME;mode=...), one nested range per iteration; "
            "see docs/paper.md")


@dataclass
class Paper:
    """What :func:`paper` computed: the four tables, the runs read, the runs skipped and why."""

    headline: pa.Table
    configs: pa.Table
    modes: pa.Table
    breakdown: pa.Table
    runs: list[dict] = field(default_factory=list)  # run_id, run, gpu_names, labels_json
    skipped: list[dict] = field(default_factory=list)  # run_id, run, reason
    estimates: dict = field(default_factory=dict, repr=False)  # config key -> figure -> Est (with replicates)

    def table(self, name: str) -> pa.Table:
        if name not in TABLES:
            raise UsageError(f"table {name!r}: choose {', '.join(TABLES)}")
        return getattr(self, name)

    def average(self, figure: str, configs: list[dict]) -> dict:
        """The average of ``figure`` over some of the ``configs`` rows, with its bootstrap interval (as the headline
        computes it for its groups): ``{"avg", "avg_lo", "avg_hi", "configs"}``."""
        # a configuration whose modes' clocks alone turn the figure over is left out, as in the headline
        ests = [self.estimates[tuple(c[k] for k in KEY)][figure] for c in configs
                if not fg.clock_left_out(c, figure)]
        ests = [e for e in ests if not math.isnan(e.point)]
        if not ests:
            return {"avg": None, "avg_lo": None, "avg_hi": None, "configs": 0}
        reps = sum(e.reps for e in ests) / len(ests) if all(e.reps is not None for e in ests) else None
        avg = Est(sum(e.point for e in ests) / len(ests), reps)
        lo, hi = avg.interval()
        return {"avg": avg.point, "avg_lo": None if math.isnan(lo) else lo, "avg_hi": None if math.isnan(hi) else hi,
                "configs": len(ests)}

    def to_json(self) -> dict:
        return {name: [{k: _num(v) for k, v in r.items()} for r in self.table(name).to_pylist()] for name in TABLES} | {
            "runs": self.runs, "skipped": self.skipped}


def _num(v):
    return None if isinstance(v, float) and not math.isfinite(v) else v


def paper(inputs: Sequence[str | Path] | str | Path, *, on_error: str = "raise", n_boot: int = N_BOOT,
          workdir: str | Path | None = None) -> Paper:
    """The paper's figures over ``inputs`` (run directories, or traces ingested first into ``workdir``).

    Runs without mode ranges are passed over (they are not the experiment); when no run has any, that is an error.
    ``on_error``: ``raise`` stops at a run whose queries fail; ``skip`` goes on without it and lists it.
    """
    from ..attribute import as_store, input_paths

    inputs = input_paths(inputs)
    check_on_error(on_error)
    tmp = None
    if workdir is None and any(not store.is_store(p) for p in inputs):
        tmp = tempfile.TemporaryDirectory(prefix="traceql-paper-")
        workdir = tmp.name
    try:
        dirs = as_store(inputs, Path(workdir or ".") / "runs")
        runs, marked, ncu_runs = _runs_with_modes(dirs)
        if not marked:
            raise BadInputError(NO_MODES.format(where=", ".join(map(str, inputs))))
        tables, skipped = _map(dirs, marked, ncu_runs, runs, on_error)
    finally:
        if tmp is not None:
            tmp.cleanup()
    estimates: dict = {}
    out = reduce(tables, n_boot=n_boot, estimates=estimates)
    read = [r for r in runs if r["run_id"] in marked and r["run_id"] not in {s["run_id"] for s in skipped}]
    return Paper(**out, runs=read, skipped=skipped, estimates=estimates)


def _runs_with_modes(dirs: list[Path]) -> tuple[list[dict], list[str], list[str]]:
    """All runs, the runs with mode ranges (the only views needed for that: paper_ranges), the Nsight Compute runs."""
    from ..queries_loader import query_files

    con = store.connect(dirs, views=False)
    try:
        sql = dict(query_files())["paper_ranges.sql"]
        con.execute(f"CREATE TEMP VIEW paper_ranges AS {sql.strip().rstrip(';')}")
        runs = con.sql("""SELECT run_id, coalesce(json_extract_string(labels_json, '$.name'), run_id) AS run, format,
                                 gpu_names, labels_json FROM runs ORDER BY run_id""").to_arrow_table().to_pylist()
        marked = [r[0] for r in con.sql("SELECT DISTINCT run_id FROM paper_ranges ORDER BY run_id").fetchall()]
    finally:
        con.close()
    return runs, marked, [r["run_id"] for r in runs if r["format"] == "ncu-rep"]


def _map(dirs: list[Path], marked: list[str], ncu_runs: list[str], runs: list[dict],
         on_error: str) -> tuple[dict[str, pa.Table], list[dict]]:
    """The views' rows for the marked runs: all at once (views and baselines computed once), or run by run when
    that fails and failures are to be skipped."""
    names = {r["run_id"]: r["run"] for r in runs}
    try:
        return _query(dirs, marked, ncu_runs, names), []
    except (TraceqlError, duckdb.Error, OSError, ValueError) as exc:
        if on_error == "raise":
            raise BadInputError(f"{', '.join(map(str, dirs))}: {_reason(exc)}; --on-error skip goes on without the "
                                "runs that fail") from None
    parts: dict[str, list[pa.Table]] = {k: [] for k in VIEWS}
    skipped = []
    for run_id in marked:
        try:
            one = _query(dirs, [run_id], ncu_runs, names)
        except (TraceqlError, duckdb.Error, OSError, ValueError) as exc:
            skipped.append({"run_id": run_id, "run": names[run_id], "reason": _reason(exc)})
            continue
        for k, t in one.items():
            parts[k].append(t)
    return {k: pa.concat_tables(ts) if ts else pa.table({}) for k, ts in parts.items()}, skipped


def _reason(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _query(dirs: list[Path], run_ids: list[str], ncu_runs: list[str], names: dict[str, str]) -> dict[str, pa.Table]:
    from ..attribution import prepare

    con = store.connect(dirs, run_ids={*run_ids, *ncu_runs})
    try:
        prepare(con)
        out = {}
        for name, view in VIEWS.items():
            t = con.sql(f'SELECT * FROM "{view}"').to_arrow_table()
            out[name] = t.append_column("run", pa.array([names.get(r, r) for r in t.column("run_id").to_pylist()],
                                                        pa.string()))
        return out
    finally:
        con.close()


def reduce(tables: dict[str, pa.Table], n_boot: int = N_BOOT, estimates: dict | None = None) -> dict[str, pa.Table]:
    """The four tables from the views' rows of any number of runs (each row tagged ``run_id``, optionally ``run``).

    ``estimates``: a dict to fill with every configuration's figures and their replicates (config key -> figure ->
    Est), for averages over other groups of configurations (:meth:`Paper.average`)."""
    iterations = _rows(tables.get("iterations"))
    power_rows = _rows(tables.get("power"))
    by_config = fg.group_iterations(iterations)
    power_by: dict[tuple, dict[str, list[dict]]] = {}
    for r in power_rows:
        power_by.setdefault(_key(r), {}).setdefault(r["mode"], []).append(r)
    configs, modes, figs = [], [], {}
    for key, mode_rows in by_config.items():
        first = next(iter(mode_rows.values()))[0]
        stats = {m: fg.mode_stats(rows, (*key, m), n_boot) for m, rows in mode_rows.items()}
        power = {m: mode_power(power_by.get(key, {}).get(m, []), stats[m]["wall_ns"], (*key, m), n_boot)
                 for m in stats}
        f = fg.config_figures(stats, power)
        # each mode's clock: its compute kernels' (GPU metrics, time-weighted), else NVML's inside its ranges (read
        # every ~10 ms: a short mode gets one or two readings, or none)
        clocks = {m: stats[m]["compute_clock_mhz"] or power[m]["clock_mhz"] for m in stats}
        biased = fg.clock_biased(f, fg.at_equal_clock(stats, clocks), clocks)
        c = {k: first.get(k) for k in KEY} | {"run": first.get("run") or first["run_id"]}
        c["label"] = fg.config_label(c)
        c["_key"] = key
        figs[key] = f
        if estimates is not None:
            estimates[key] = f
        configs.append(_config_row(c, stats, f, first) | _clock_columns(clocks, biased))
        for m in MODES:
            if m in stats:
                modes.append(_mode_row(c, m, stats[m], power[m], clocks[m]))
    head = fg.headline(configs, figs)
    parts = breakdowns(_rows(tables.get("instances")), n_boot)
    labels = {c["_key"]: c for c in configs}
    breakdown = []
    for key in sorted(parts, key=lambda k: [str(v) for v in k]):
        if key not in labels:
            continue
        for side, b in parts[key].items():
            breakdown.append(_breakdown_row(labels[key], side, b))
    for c in configs:
        del c["_key"]
    return {"headline": _table(head, HEADLINE_TYPES), "configs": _table(configs, CONFIG_TYPES),
            "modes": _table(modes, MODE_TYPES), "breakdown": _table(breakdown, BREAKDOWN_TYPES)}


def _rows(t: pa.Table | None) -> list[dict]:
    return [] if t is None or t.num_rows == 0 else t.to_pylist()


def _key(r: dict) -> tuple:
    return tuple(r.get(k) for k in KEY)


def _with_interval(row: dict, name: str, est) -> None:
    lo, hi = est.interval()
    row[name], row[f"{name}_lo"], row[f"{name}_hi"] = est.point, lo, hi


def _config_row(c: dict, stats: dict, f: dict, first: dict) -> dict:
    row = {k: c[k] for k in ("run_id", "run", "label", *KEY[1:])} | {"_key": c["_key"]}
    row["modes"] = ",".join(m for m in MODES if m in stats)
    row["gpus"] = max(s["gpus"] for s in stats.values())
    row["iterations"] = min(s["iterations"] for s in stats.values())
    for m in MODES:
        row[f"{m}_iter_ns"] = stats[m]["wall_ns"].point if m in stats else None
    for fig in FIGURES:
        _with_interval(row, fig.name, f[fig.name])
    _with_interval(row, "compute_covered", f["compute_covered"])
    _with_interval(row, "in_overlap_slowdown", f["in_overlap_slowdown"])
    row["comm_sms"] = next((stats[m]["comm_sms"] for m in ("comm", "overlapped") if m in stats
                            and stats[m]["comm_sms"] is not None), None)
    comm = stats.get("comm")
    row["comm_only_gbps"] = (c["bytes"] / comm["comm_ns"].point if comm and c["bytes"] and comm["comm_ns"].point
                             else None)
    return row


def _clock_columns(clocks: dict[str, float | None], biased: list[str]) -> dict:
    """The spread of the SM clocks the configuration's modes ran at ((highest - lowest) / highest, over the modes
    with a reading) and the figures that spread alone could account for."""
    known = [c for c in clocks.values() if c]
    return {"clock_spread": (max(known) - min(known)) / max(known) if len(known) > 1 else None,
            "clock_biased": ",".join(biased) or None}


def _mode_row(c: dict, mode: str, s: dict, p: dict, clock: float | None) -> dict:
    row = {k: c[k] for k in ("run_id", "run", "label", *KEY[1:])} | {"mode": mode, "gpus": s["gpus"],
                                                                      "iterations": s["iterations"]}
    for q, name in (("wall_ns", "iter_ns"), ("compute_ns", "compute_ns"), ("comm_ns", "comm_ns")):
        _with_interval(row, name, s[q])
    for name in ("energy_per_iter_j", "mean_power_w", "peak_power_w"):
        _with_interval(row, name, p[name])
    row["power_limit_w"] = p["power_limit_w"]
    row["power_samples"] = p["power_samples"]
    row["counter_updates"] = p["counter_updates"]
    row["note"] = p["note"]
    row["sm_clock_mhz"] = clock
    return row


def _breakdown_row(c: dict, side: str, b: dict) -> dict:
    row = {k: c[k] for k in ("run_id", "run", "label", *KEY[1:])} | {"side": side, "instances": b["instances"]}
    _with_interval(row, "observed", b["observed"])
    row |= {k: b[k] for k in ("predicted", "predicted_lo", "predicted_hi", *(f for f, _ in FACTORS), "residual",
                              "agreement", "cause", "overlap_fraction", "held_sms")}
    return row


_ID = {"run_id": pa.string(), "run": pa.string(), "label": pa.string(), "workload": pa.string(), "op": pa.string(),
       "dtype": pa.string(), "bytes": pa.int64(), "max_ctas": pa.string(), "config": pa.string()}


def _ci(*names: str) -> dict:
    return {f"{n}{s}": pa.float64() for n in names for s in ("", "_lo", "_hi")}


HEADLINE_TYPES = {"figure": pa.string(), "group_by": pa.string(), "group": pa.string(), "configs": pa.int64(),
                  "clock_left_out": pa.int64(),
                  **_ci("avg"), **_ci("max"), "max_config": pa.string(), "paper_avg": pa.float64(),
                  "paper_max": pa.float64()}
CONFIG_TYPES = {**_ID, "modes": pa.string(), "gpus": pa.int64(), "iterations": pa.int64(),
                **{f"{m}_iter_ns": pa.float64() for m in MODES}, **_ci(*(f.name for f in FIGURES)),
                **_ci("compute_covered", "in_overlap_slowdown"), "comm_sms": pa.float64(),
                "comm_only_gbps": pa.float64(), "clock_spread": pa.float64(), "clock_biased": pa.string()}
MODE_TYPES = {**_ID, "mode": pa.string(), "gpus": pa.int64(), "iterations": pa.int64(),
              **_ci("iter_ns", "compute_ns", "comm_ns", "energy_per_iter_j", "mean_power_w", "peak_power_w"),
              "power_limit_w": pa.float64(), "power_samples": pa.int64(), "counter_updates": pa.int64(),
              "note": pa.string(), "sm_clock_mhz": pa.float64()}
BREAKDOWN_TYPES = {**_ID, "side": pa.string(), "instances": pa.int64(), **_ci("observed"), "predicted": pa.float64(),
                   "predicted_lo": pa.float64(), "predicted_hi": pa.float64(),
                   **{f: pa.float64() for f, _ in FACTORS}, "residual": pa.float64(), "agreement": pa.string(),
                   "cause": pa.string(), "overlap_fraction": pa.float64(), "held_sms": pa.float64()}


def _table(rows: list[dict], types: dict[str, pa.DataType]) -> pa.Table:
    cols = {}
    for name, typ in types.items():
        vals = [r.get(name) for r in rows]
        if pa.types.is_floating(typ):
            vals = [None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) for v in vals]
        cols[name] = pa.array(vals, typ)
    return pa.table(cols)


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` whole or not at all (:func:`traceql.output.replacing`: a device or a pipe is
    written in place, never replaced); a failure is bad input naming ``path``."""
    from ..output import replacing, unwritable

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise unwritable(path, exc) from exc
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path
