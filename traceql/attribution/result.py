"""What ``traceql attribute`` returns (:class:`Attribution`, the JSON contract), and what its one-connection path
(:mod:`traceql.attribute`) and its per-run path (:mod:`traceql.attribute_map`) share: the inputs as run
directories, the result's columns and order, the ``--baseline`` run's isolated durations, the ``--ncu`` runs and
their checks, and the notes on what was not attributed."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from .. import launch, output, store
from ..errors import BadInputError, MissingInputError, TraceqlError, UsageError
from ..executor import Executor
from .baselines import ISO_MEDIANS, External

# 2: every activity is a row (activity, kind), slowdowns carry intervals, significance is the interval's
# 3: predictions with calibrated bands, memory_explanation, compute_lost_beside_comm_ms
# 4: waits (time collectives waited for a late rank), verdicts' coverage shares and waits
# 5: cache_evidence extra_traffic (traffic beyond the demand alone opens the lost-reuse model)
# 6: exposed_wait_ms in waits and verdicts (the wait that no compute of the waiting device hid)
# 7: wait_excluded_ns (collectives compared on their transfer, less the wait for the last rank)
# 8: sm_issue_pct_iso and co_sm_issue_pct, the witnesses of the co-resident SM model (issue slots); delays (kernels
#    held back from starting, activity_delays)
# 9: critical_path (per step: where its critical path ran, each cause's loss and the part of it that reached the step
#    time, traceql.attribution.paths); verdicts' step_ms, reached_by_cause_ms, path_lost_by_cause_ms,
#    path_other_devices_ms, path_set_by_device_id, path_wait_reached_ms
# 10: gpc_clock_mhz_base (the clock the clock factor compares with: its baselines', where a drifting baseline takes
#     the nearest isolated instances in time)
# 11: co_kernel_dram_pct (the co-running kernels' DRAM demand: copy engines yield DRAM to kernels)
JSON_SCHEMA_VERSION = 11
FACTORS = ("sm", "dram_bw", "cache", "clock", "link")
# the files Attribution.write puts in its folder, in the order they are uploaded (attribution.json last)
OUT_FILES = ("kernels.parquet", "summary.parquet", "attribution.json")

@dataclass
class Attribution:
    """What ``attribute`` returns: the tables, plus the JSON contract through :meth:`to_json`."""

    runs: pa.Table
    summary: pa.Table
    kernels: pa.Table
    notes: list[str] = field(default_factory=list)
    verdicts: list[dict] = field(default_factory=list)
    waits: pa.Table | None = None  # rank_waits: per (run, device, NVTX group), the time collectives waited
    delays: pa.Table | None = None  # DELAYS_SQL: per (run, device, NVTX group, kernel, cause), launches held back
    critical_path: pa.Table | None = None  # traceql.attribution.paths: per (run, device, NVTX group) of steps

    def to_json(self) -> dict:
        rows = []
        for r in self.kernels.to_pylist():
            explained = {f: _num(r.pop(f)) for f in FACTORS}
            interval = {f: [_num(r.pop(f"{f}_lo")), _num(r.pop(f"{f}_hi"))] for f in FACTORS}
            row = {k: _num(v) for k, v in r.items()}
            row["explained"] = explained
            row["explained_interval"] = interval
            rows.append(row)
        return {
            "schema_version": JSON_SCHEMA_VERSION,
            "runs": [{k: _num(v) for k, v in r.items()} for r in self.runs.to_pylist()],
            "summary": [{k: _num(v) for k, v in r.items()} for r in self.summary.to_pylist()],
            "kernels": rows,
            "notes": self.notes,
            "verdicts": [{k: ({c: _num(x) for c, x in v.items()} if isinstance(v, dict) else _num(v))
                          for k, v in d.items()} for d in self.verdicts],
            "waits": [{k: _num(v) for k, v in r.items()} for r in self.waits.to_pylist()] if self.waits else [],
            "delays": [{k: _num(v) for k, v in r.items()} for r in self.delays.to_pylist()] if self.delays else [],
            "critical_path": [{k: _num(v) for k, v in r.items()} for r in self.critical_path.to_pylist()]
            if self.critical_path else [],
        }


    def write(self, out_dir: str | Path) -> None:
        """attribution.json (the contract), kernels.parquet and summary.parquet in ``out_dir``: a folder, or a URL
        (fsspec) to which the three files, written locally first, are uploaded whole, attribution.json last."""
        import json

        import pyarrow.parquet as pq

        from ..sources import urls

        if urls.is_remote(out_dir):
            import tempfile

            with tempfile.TemporaryDirectory(prefix="traceql-out-") as tmp:
                self.write(tmp)
                urls.upload([Path(tmp) / n for n in OUT_FILES], str(out_dir))
            return
        out = urls.as_local(out_dir, "the output folder")
        created = not out.exists()
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise output.unwritable(out, exc) from exc
        text = json.dumps(self.to_json(), indent=1, default=str)
        try:
            # the three files are renamed into place together, once all are written: all new, or all as they were
            with contextlib.ExitStack() as stack:
                tmp = {n: stack.enter_context(output.replacing(out / n)) for n in reversed(OUT_FILES)}  # json last
                tmp["attribution.json"].write_text(text)
                pq.write_table(self.kernels, tmp["kernels.parquet"])
                pq.write_table(self.summary, tmp["summary.parquet"])
        except BaseException:
            if created:
                with contextlib.suppress(OSError):
                    out.rmdir()
            raise


def _num(v):
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if isinstance(v, float):
        return v + 0.0  # -0.0 (a zero reached from below in one summation order, not in another) prints as 0.0
    if isinstance(v, int) and abs(v) > 2**62:
        return float(v)
    return v


def input_paths(inputs: Sequence[str | Path] | str | Path) -> list[Path]:
    """One input or several, as paths; none is a usage error."""
    if isinstance(inputs, str | Path):
        inputs = [inputs]
    if not inputs:
        raise UsageError("no input given")
    return [Path(p) for p in inputs]


def as_store(inputs: list[Path], workdir: Path, executor: Executor | None = None,
             defer: Sequence[str] = ()) -> list[Path]:
    """Run directories for ``inputs``: run directories as they are, raw traces ingested into ``workdir`` (``defer``:
    tables left in the exports until a query needs them, see :func:`traceql.ingest.ingest`)."""
    from ..ingest import ingest

    dirs, raw = [], []
    for p in inputs:
        (dirs if store.is_store(p) else raw).append(p)
    if raw:
        ingest(raw, workdir, executor=executor, defer=defer)
        dirs.append(workdir)
    return dirs


_as_store = as_store  # the former name, for callers that still use it

KERNEL_COLUMNS = """run_id, device_id, nvtx, group_id, activity, kind, name, short_name, grid, block,
    dynamic_smem_bytes, bytes, sum_t1_ns, sum_t0_ns,
    mode, split, n, n_overlapped, n_isolated, baseline, t0_ns, t0_lo_ns, t0_hi_ns, t0_spread, t1_ns, t1_lo_ns,
    t1_hi_ns, slowdown, slowdown_lo, slowdown_hi, significant, baseline_drift, conflated, in_overlap_slowdown,
    overlap_fraction, comm_fraction, sm_share, comm_sm_share, corunner_kind, corunner_sms, occupancy,
    sm_predicted, predicted, predicted_lo, predicted_hi, agreement, sm, sm_lo, sm_hi, dram_bw, dram_bw_lo,
    dram_bw_hi, cache, cache_lo, cache_hi, clock, clock_lo, clock_hi, link, link_lo, link_hi, residual, class,
    reason, predicted_band, memory_explanation,
    dram_pct_iso, dram_pct_ovl, gpc_clock_mhz_iso, gpc_clock_mhz_ovl, sm_active_pct_iso,
    sm_active_pct_ovl, nvlink_pct_ovl, pcie_pct_ovl, co_dram_pct, dram_sat_pct, dram_busy, memory_bound,
    extra_bytes_frac, footprint, clock_power, occupancy_source, launch_occupancy, ncu_match, ncu_ctas_per_sm,
    ncu_dram_pct, ncu_l2_hit_pct, ncu_working_set_bytes, co_working_set_bytes, l2_bytes, cache_evidence,
    wait_excluded_ns, sm_issue_pct_iso, co_sm_issue_pct, gpc_clock_mhz_base, co_kernel_dram_pct"""
# compute kernels beside communication lead (the question traceql answers first), then what cost the most time;
# the tail of the key makes the order total, so the same input always gives the same output
KERNEL_ORDER = """(kind = 'compute' AND comm_fraction > 0) DESC, significant DESC,
    (sum_t1_ns - sum_t0_ns) DESC NULLS LAST, sum_t1_ns DESC NULLS LAST, run_id, device_id, nvtx NULLS FIRST, name,
    grid NULLS FIRST, block NULLS FIRST, dynamic_smem_bytes NULLS FIRST, bytes NULLS FIRST, mode NULLS FIRST"""


SUMMARY_ORDER = "run_id, device_id, nvtx NULLS FIRST"
WAITS_ORDER = SUMMARY_ORDER
RUN_COLUMNS = "run_id, source_path, format, tool_version, gpu_names, labels_json ->> 'name' AS name"


def baseline_run(baseline: Path, workdir: Path, executor: Executor | None = None,
                 rule: launch.Rule = launch.DEFAULT) -> tuple[External, set[str]]:
    """A baseline run's isolated durations per (GPU name, signature) with each instance's facts (launch context by
    ``rule``, the inputs' launch rule, and GPU metrics: :class:`External`), and its GPU names. A collective that
    waited for another rank there counts its transfer, as the inputs' collectives are compared on theirs."""
    bcon = store.connect(as_store([baseline], workdir, executor))
    order = "ORDER BY i.start_ns, i.activity_id"
    try:
        rule.apply(bcon)
        base_gpus = {r[0] for r in bcon.sql("SELECT DISTINCT name FROM devices").fetchall()}
        rows = bcon.sql(f"""SELECT d.name, i.sig, list(coalesce(w.work_ns, i.dur_ns) {order}),
                                   list(i.step_text {order}), list(coalesce(i.occurrence, -1) {order}),
                                   {", ".join(f"list(i.{m} {order})" for m in ISO_MEDIANS)}
                            FROM _instance_facts i JOIN devices d USING (run_id, device_id)
                            LEFT JOIN _collective_arrivals w ON w.run_id = i.run_id AND w.activity_id = i.activity_id
                            WHERE i.overlap_ns = 0 AND i.dur_ns > 0 GROUP BY ALL""").fetchall()
    finally:
        bcon.close()
    durations, facts = {}, {}
    for gpu, sig, dur, texts, occ, *rates in rows:
        durations[(gpu, int(sig))] = ("baseline run", np.array(dur, dtype=float))
        facts[(gpu, int(sig))] = {"text": texts, "occ": np.array(occ, dtype=np.int64),
                                  **{m: np.array(v, dtype=float) for m, v in zip(ISO_MEDIANS, rates, strict=True)}}
    return External(durations, replace=True, facts=facts), base_gpus


def check_baseline_gpus(baseline: Path, base_gpus: set[str], run_gpus: set[str]) -> None:
    if base_gpus and run_gpus and not (base_gpus & run_gpus):
        raise BadInputError(f"--baseline {baseline}: recorded on {', '.join(sorted(base_gpus))}, but the input "
                            f"ran on {', '.join(sorted(run_gpus))}; a baseline must come from the same GPU model")


def ncu_external(con: duckdb.DuckDBPyConnection) -> External | None:
    """Nsight Compute's isolated duration of the same kernel (exact launch configuration), for what never ran alone."""
    rows = con.sql("""SELECT d.name, n.sig, n.duration_ns FROM _ncu_demand n JOIN devices d USING (run_id, device_id)
                      WHERE n.duration_ns > 0""").fetchall()
    durations = {(gpu, int(sig)): ("ncu", np.array([dur], dtype=float)) for gpu, sig, dur in rows}
    return External(durations, replace=False) if durations else None


def with_ncu(external: External | None, con: duckdb.DuckDBPyConnection) -> External | None:
    """A baseline run's durations (``external``) with Nsight Compute's for the signatures it lacks (kernels the
    baseline run never ran alone, or never ran: a co-runner only the traced run launched); Nsight Compute's alone
    without a baseline run."""
    ncu = ncu_external(con)
    if external is None or ncu is None:
        return external if external is not None else ncu
    return dataclasses.replace(external, fallback=ncu.durations)


# run formats whose traces carry no GPU metrics by nature (docs/kineto.md): what attribution cannot test for them
NO_METRICS_FORMATS = {"kineto": "torch.profiler (Kineto) traces"}


# kernels held back from starting (activity_delays), per (run, device, NVTX group, kernel, cause, co-runner): the JSON's
# delays; the sums are of whole nanoseconds, so every way of computing them gives the same figures
DELAYS_ORDER = "run_id, device_id, nvtx NULLS FIRST, delay_ms DESC, name, cause, held_by NULLS FIRST"
DELAYS_SQL = f"""SELECT run_id, device_id, nvtx, 'kernel' AS activity, name, count(*) AS n,
    sum(delay_ns) / 1e6 AS delay_ms, cause, held_by
    FROM activity_delays GROUP BY run_id, device_id, nvtx, name, cause, held_by ORDER BY {DELAYS_ORDER}"""


def step_paths(con: duckdb.DuckDBPyConnection, grouped: bool) -> pa.Table | None:
    """The steps' critical paths (traceql.attribution.paths), where the activities are grouped into steps by NVTX."""
    from .paths import critical_paths

    return critical_paths(con) if grouped else None


def untraced_runs(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The runs with collectives whose CUDA events were not traced (no stream_waits rows): there a kernel held back
    from starting can be told from one that waited for another stream only where no stream wait can apply, and
    activity_delays gives a lower bound."""
    return [r[0] for r in con.sql("SELECT DISTINCT run_id FROM kernels WHERE kind = 'comm' AND run_id NOT IN "
                                  "(SELECT run_id FROM stream_waits) ORDER BY 1").fetchall()]


def path_note(run_ids: list[str], grouped: bool) -> list[str]:
    """Steps' critical paths in runs whose streams' waits for each other were not traced may miss those waits."""
    if not grouped or not run_ids:
        return []
    return [f"runs {', '.join(run_ids)}: no CUDA event records, so the steps' critical paths do not see one stream "
            "waiting for another's work, and what reached the step time is a lower bound there; record with "
            "`nsys profile --cuda-event-trace=true` (traceql collect does)"]


def delay_note(run_ids: list[str]) -> list[str]:
    if not run_ids:
        return []
    return [f"{len(run_ids)} run(s) with collectives were recorded without CUDA event tracing "
            f"({', '.join(run_ids)}): there kernels held back from starting (delays) are found only on non-blocking "
            "streams, where no stream wait was called since the work before them, a lower bound (record with nsys "
            "profile --cuda-event-trace=true; traceql collect asks for it)"]


def untested_notes(runs: pa.Table) -> list[str]:
    """Say, per input format that has no GPU metrics (torch.profiler's), which factors could not be tested for its
    runs; nothing for runs of other formats. ``runs``: the result's runs table (``run_id`` and ``format``)."""
    notes = []
    rows = runs.select(["run_id", "format"]).to_pylist() if runs.num_rows else []
    for fmt, what in NO_METRICS_FORMATS.items():
        ids = sorted(r["run_id"] for r in rows if r["format"] == fmt)
        if ids:
            notes.append(f"{len(ids)} run(s) from {what} ({', '.join(ids)}): no GPU metrics, so the DRAM bandwidth, "
                         "L2 cache and clock factors could not be tested (they explain nothing there, except DRAM "
                         "and cache for kernels that an Nsight Compute profile given with --ncu matches); the SM "
                         "factor (co-runners' CTAs against the launch configuration's occupancy) and the link factor "
                         "were tested")
    return notes


def unattributed_notes(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Say what overlapped activity got no attributed row, and why, instead of leaving it out silently."""
    return [unattributed_note(*row) for row in unattributed(con)]


def unattributed_note(reason: str, groups: int, inst: int, ms: float) -> str:
    return f"{inst} overlapped instances ({ms:.3f} ms) in {groups} signature group(s) are not attributed: {reason}"


def unattributed(con: duckdb.DuckDBPyConnection) -> list[tuple[str, int, int, float]]:
    return con.sql("""
            SELECT CASE WHEN conflated THEN 'their isolated durations mix different work (class conflated)'
                        ELSE 'they have no baseline (no isolated instance; give --baseline or --ncu)' END,
                   count(*), sum(n_overlapped), sum(sum_t1_ns) / 1e6
            FROM kernel_signatures WHERE n_overlapped > 0 AND (conflated OR t0_ns IS NULL)
            GROUP BY 1 ORDER BY 1""").fetchall()


def ncu_runs_of(item: Path, scratch: Path) -> tuple[Path, dict[str, dict]]:
    """The run directory holding the Nsight Compute runs an ``--ncu`` item names, and those runs' manifest entries.

    A report is ingested into ``scratch``; from a run directory only its Nsight Compute runs are taken (its traces
    are not inputs)."""
    from ..ingest.ncu import FORMAT, ingest_ncu_report, is_ncu_report

    try:
        if store.is_store(item):
            src, wanted = item, None
        elif not item.exists():
            raise MissingInputError(f"{item}: no such file or run directory")
        elif item.is_dir() or not is_ncu_report(item):
            raise BadInputError(f"{item}: not an Nsight Compute report (.ncu-rep, .ncu-rep.xz) nor a run "
                                "directory; give the report `ncu -o NAME` wrote (NAME.ncu-rep); traces are "
                                "inputs, not --ncu")
        else:
            src, wanted = scratch, ingest_ncu_report(item, scratch).run_id
        runs = {rid: e for rid, e in store.read_manifest(src)["runs"].items()
                if e.get("format") == FORMAT and wanted in (None, rid)}
        if not runs:
            raise BadInputError(f"{item}: the run directory holds no Nsight Compute run; add a report with "
                                f"`traceql ingest REPORT.ncu-rep -o {item}`, or give the .ncu-rep file")
    except TraceqlError as exc:
        raise type(exc)(f"--ncu {exc}") from exc
    return src, runs


def ncu_store(items: list[Path], input_dirs: list[Path], workdir: Path) -> tuple[Path | None, dict[Path, list[str]]]:
    """A run directory with the Nsight Compute runs of ``items`` that ``input_dirs`` do not hold already (None if
    there are none), and each item's run ids (:func:`ncu_runs_of`)."""
    have = {rid for d in input_dirs for rid in store.read_manifest(d)["runs"]}
    out, scratch = workdir / "ncu", workdir / "ncu-ingest"
    per_item: dict[Path, list[str]] = {}
    for item in items:
        src, runs = ncu_runs_of(item, scratch)
        per_item[item] = sorted(runs)
        for rid, entry in runs.items():
            if rid in have or store.run_dir(out, rid).exists():
                continue
            shutil.copytree(store.run_dir(src, rid), store.run_dir(out, rid))
            with store.locked_manifest(out) as manifest:
                manifest["runs"][rid] = entry
    return (out if store.is_store(out) else None), per_item


def check_ncu(con: duckdb.DuckDBPyConnection, ncu_runs: dict[Path, list[str]]) -> None:
    """Refuse an ``--ncu`` report none of whose profiled kernels matches a kernel of the input."""
    for item, run_ids in ncu_runs.items():
        used = con.execute("SELECT count(*) FROM ncu_match WHERE match <> 'unmatched' "
                           "AND list_has_any(ncu_run_ids, $1::VARCHAR[])", [run_ids]).fetchall()[0][0]
        if used:
            continue
        ncu_gpus = {r[0] for r in con.execute("SELECT DISTINCT device_name FROM ncu_kernels "
                                              "WHERE list_contains($1::VARCHAR[], run_id) AND device_name IS NOT NULL",
                                              [run_ids]).fetchall()}
        run_gpus = {r[0] for r in con.sql("SELECT DISTINCT name FROM devices WHERE name IS NOT NULL").fetchall()}
        if ncu_gpus and run_gpus and not ncu_gpus & run_gpus:
            raise BadInputError(f"--ncu {item}: profiled on {', '.join(sorted(ncu_gpus))}, but the input ran on "
                                f"{', '.join(sorted(run_gpus))}; Nsight Compute counters must come from the same "
                                "GPU model")
        names = [r[0] for r in con.execute("SELECT DISTINCT short_name FROM ncu_kernels "
                                           "WHERE list_contains($1::VARCHAR[], run_id) ORDER BY 1 LIMIT 4",
                                           [run_ids]).fetchall()]
        raise BadInputError(f"--ncu {item}: none of its profiled kernels ({', '.join(names)}) ran in the input; "
                            "profile the same program (`traceql collect --ncu -- PROGRAM`)")


def ncu_notes(con: duckdb.DuckDBPyConnection) -> list[str]:
    return ncu_notes_text(ncu_facts(con))


def ncu_facts(con: duckdb.DuckDBPyConnection) -> tuple | None:
    """(profile runs, exact, by name, signatures, kernels lacking metrics, those metrics), None without profiles."""
    if con.sql("SELECT count(*) FROM ncu_kernels").fetchall()[0][0] == 0:
        return None
    n_runs, exact, by_name, total = con.sql("""
        SELECT (SELECT count(DISTINCT run_id) FROM ncu_kernels), count(*) FILTER (match = 'exact'),
               count(*) FILTER (match = 'name'), count(*)
        FROM ncu_match WHERE kind <> 'comm'""").fetchall()[0]
    lacking, names = con.execute("""
        SELECT count(*) FILTER (list_has_any(missing, $1::VARCHAR[])),
               list_sort(list_distinct(flatten(list(list_intersect(missing, $1::VARCHAR[])))))
        FROM ncu_kernels""", [list(_NCU_METRICS_USED)]).fetchall()[0]
    return n_runs, exact, by_name, total, lacking, names


def ncu_notes_text(facts: tuple | None) -> list[str]:
    if facts is None:
        return []
    n_runs, exact, by_name, total, lacking, names = facts
    notes = [f"Nsight Compute: {n_runs} profile run(s); {exact + by_name} of {total} non-communication kernel "
             f"signatures matched ({exact} exact, {by_name} by name only); their counters are used where they apply "
             "(occupancy_source, ncu_* columns)"]
    if lacking:
        notes.append(f"Nsight Compute: {lacking} profiled kernel(s) lack metrics the models use ({', '.join(names)}): "
                     "their ncu_* columns are NULL and the trace's own evidence stands in; collect with the sections "
                     "`traceql collect --ncu` uses")
    return notes


def _ncu_metrics_used() -> tuple[str, ...]:
    from ..sources.ncu import derive

    limits = [n for w, n in derive.OCCUPANCY_LIMITS.items() if w not in derive.OPTIONAL_LIMITS]
    return (*limits, derive.DRAM_THROUGHPUT[0], derive.L2_HIT[0], derive.DRAM_READ[0], derive.DRAM_WRITE[0])


_NCU_METRICS_USED = _ncu_metrics_used()
