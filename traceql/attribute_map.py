"""Attribution with one run as the unit of work: map each run on an executor, then reduce the runs' rows.

A unit sees its own run and the Nsight Compute runs (shared by every unit); cross-run inputs arrive explicitly: the
``--baseline`` durations are computed once, here, and handed to every unit. The reduce concatenates the rows, numbers
the signature groups as one connection over every run numbers them (runs in run_id order, each run's groups in
order), sorts as :mod:`traceql.attribute` does, adds the notes' counts up and checks what needs every run (each
``--ncu`` report matched some run; the baseline's GPU model is among the inputs').
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from . import attribution, duck, launch, store
from .attribution.baselines import External
from .attribution.result import (
    DELAYS_ORDER,
    DELAYS_SQL,
    KERNEL_COLUMNS,
    KERNEL_ORDER,
    RUN_COLUMNS,
    SUMMARY_ORDER,
    WAITS_ORDER,
    Attribution,
    as_store,
    baseline_run,
    check_baseline_gpus,
    delay_note,
    ncu_facts,
    ncu_notes_text,
    ncu_runs_of,
    path_note,
    step_paths,
    unattributed,
    unattributed_note,
    untested_notes,
    untraced_runs,
    with_ncu,
)
from .attribution.verdict import verdicts
from .errors import BadInputError, TraceqlError
from .executor import Executor, run_units

NO_COMM_NOTE = ("no communication (NCCL kernels or peer copies) in the input: the results describe overlap with "
                "other kernels and copies only")


@dataclass
class RunPart:
    """What one run contributes to the attribution; small next to the run (rows per signature and device)."""

    run_id: str
    runs: pa.Table  # this run's row, and the Nsight Compute runs' rows
    kernels: pa.Table | None  # None: the run has no kernels
    summary: pa.Table | None
    groups: int = 0  # signature groups (_signature_stats rows), numbered from 0 in this run
    has_comm: bool = False
    gpus: list[str] = field(default_factory=list)
    unattributed: list[tuple[str, int, int, float]] = field(default_factory=list)
    ncu_facts: tuple | None = None
    ncu_matched: list[str] = field(default_factory=list)  # Nsight Compute runs some signature of this run matched
    waits: pa.Table | None = None  # rank_waits of this run (its devices share its clock)
    delays: pa.Table | None = None  # its kernels held back from starting (DELAYS_SQL)
    untraced: list[str] = field(default_factory=list)  # untraced_runs
    paths: pa.Table | None = None  # its steps' critical paths (step_paths), where grouped by NVTX


def attribute_run(dirs: Sequence[Path], run_id: str, shared: Sequence[str], external: External | None,
                  group_by_nvtx: str | None, focus: str, rule: launch.Rule = launch.DEFAULT) -> RunPart:
    """The attribution of run ``run_id`` (of the run directories ``dirs``), beside the Nsight Compute runs
    ``shared``; ``external``: a baseline run's durations (else Nsight Compute's, when they match)."""
    # one thread: a unit is one core's work (the executor runs units side by side), and DuckDB's parallel aggregates
    # of floating-point values change in the last digits from one run to the next; one thread gives the same bytes
    con = duck.connect()
    con.execute("SET threads = 1")
    con = store.connect(list(dirs), con, run_ids={run_id, *shared})
    try:
        runs = con.sql(f"SELECT {RUN_COLUMNS} FROM runs ORDER BY run_id").to_arrow_table()
        gpus = [r[0] for r in con.sql("SELECT DISTINCT name FROM devices WHERE name IS NOT NULL ORDER BY 1").fetchall()]
        if con.sql("SELECT count(*) FROM kernels").fetchall()[0][0] == 0:
            return RunPart(run_id, runs, None, None, gpus=gpus)
        has_comm = bool(con.sql("SELECT count(*) FROM kernels WHERE kind = 'comm'").fetchall()[0][0]
                        or con.sql("SELECT count(*) FROM memcpy WHERE is_peer").fetchall()[0][0])
        facts = ncu_facts(con)
        matched = [r[0] for r in con.sql("SELECT DISTINCT unnest(ncu_run_ids) FROM ncu_match "
                                         "WHERE match <> 'unmatched' ORDER BY 1").fetchall()] if facts else []
        rule.apply(con)
        if group_by_nvtx:
            attribution.group_by_nvtx(con, group_by_nvtx)
        attribution.prepare(con, with_ncu(external, con))
        where = "WHERE comm_fraction > 0" if focus == "comm" else ""
        kernels = con.sql(f"SELECT {KERNEL_COLUMNS} FROM kernel_attribution {where} "
                          f"ORDER BY {KERNEL_ORDER}").to_arrow_table()
        summary = con.sql(f"SELECT * FROM device_summary ORDER BY {SUMMARY_ORDER}").to_arrow_table()
        groups = con.sql("SELECT count(*) FROM _signature_stats").fetchall()[0][0]
        waits = con.sql(f"SELECT * FROM rank_waits ORDER BY {WAITS_ORDER}").to_arrow_table()
        delays = con.sql(DELAYS_SQL).to_arrow_table()
        return RunPart(run_id, runs, kernels, summary, groups, has_comm, gpus, unattributed(con), facts,
                       matched, waits, delays, untraced_runs(con), step_paths(con, bool(group_by_nvtx)))
    finally:
        con.close()


def attribute_per_run(inputs: list[Path], baseline: Path | None, ncu_items: list[Path], group_by_nvtx: str | None,
                      focus: str, workdir: Path, executor: Executor,
                      progress: Callable[[int, int, str], None] | None = None,
                      rule: launch.Rule = launch.DEFAULT) -> Attribution:
    dirs = as_store(inputs, workdir / "runs", executor)
    ncu_dirs, ncu_runs = _ncu_sources(ncu_items, workdir, executor)
    units: dict[str, Path] = {}  # traced run -> the run directory that holds it (the first, as store.connect reads)
    shared = {rid for ids in ncu_runs.values() for rid in ids}
    for d in dirs:
        for rid, entry in store.read_manifest(d)["runs"].items():
            if entry.get("format") == "ncu-rep":
                shared.add(rid)
            else:
                units.setdefault(rid, d)
    all_dirs = [*dirs, *(d for d in ncu_dirs if d not in dirs)]
    external = base_gpus = None
    if baseline is not None:
        external, base_gpus = baseline_run(baseline, workdir / "baseline", executor, rule)
    order = sorted(units)
    calls = [(all_dirs, rid, sorted(shared), external, group_by_nvtx, focus, rule) for rid in order]
    parts: list[RunPart] = []
    for i, part in run_units(executor, attribute_run, calls, [f"run {rid} in {units[rid]}" for rid in order]):
        if isinstance(part, TraceqlError):
            raise type(part)(f"run {order[i]} in {units[order[i]]}: {part}") from part
        parts.append(part)
        if progress:
            progress(len(parts), len(calls), order[i])
    return reduce_parts(parts, inputs, baseline, base_gpus, ncu_runs, all_dirs)


def reduce_parts(parts: list[RunPart], inputs: Sequence[Path], baseline: Path | None, base_gpus: set[str] | None,
                 ncu_runs: dict[Path, list[str]], dirs: Sequence[Path]) -> Attribution:
    parts = sorted(parts, key=lambda p: p.run_id)
    traced = [p for p in parts if p.kernels is not None]
    if not traced:
        raise BadInputError(f"{', '.join(map(str, inputs))}: no CUDA kernels in the input; collect with "
                            "`nsys profile -t cuda` (or `traceql collect`)")
    run_gpus = {g for p in parts for g in p.gpus}
    _check_ncu_matched(ncu_runs, {rid for p in traced for rid in p.ncu_matched}, run_gpus, dirs)
    if baseline is not None:
        check_baseline_gpus(baseline, base_gpus or set(), run_gpus)
    kernels, offset = [], 0
    for p in traced:
        k = p.kernels
        i = k.schema.get_field_index("group_id")
        k = k.set_column(i, k.schema.field(i), pc.add(k.column(i), pa.scalar(offset, k.schema.field(i).type)))
        kernels.append(k)
        offset += p.groups
    con = duck.connect()
    try:
        con.register("_kernels", pa.concat_tables(kernels))
        con.register("_summary", pa.concat_tables([p.summary for p in traced]))
        con.register("_runs", pa.concat_tables([p.runs for p in parts]))
        con.register("_waits", pa.concat_tables([p.waits for p in traced]))
        con.register("_delays", pa.concat_tables([p.delays for p in traced]))
        kernel_table = con.sql(f"SELECT * FROM _kernels ORDER BY {KERNEL_ORDER}").to_arrow_table()
        summary = con.sql(f"SELECT * FROM _summary ORDER BY {SUMMARY_ORDER}").to_arrow_table()
        runs = con.sql("SELECT DISTINCT ON (run_id) * FROM _runs ORDER BY run_id").to_arrow_table()
        waits = con.sql(f"SELECT * FROM _waits ORDER BY {WAITS_ORDER}").to_arrow_table()
        delays = con.sql(f"SELECT * FROM _delays ORDER BY {DELAYS_ORDER}").to_arrow_table()
    finally:
        con.close()
    notes = ncu_notes_text(_summed_ncu_facts([p.ncu_facts for p in traced]))
    if not any(p.has_comm for p in traced):
        notes.append(NO_COMM_NOTE)
    unattributed: dict[str, list] = {}
    for p in traced:
        for reason, groups, inst, ms in p.unattributed:
            total = unattributed.setdefault(reason, [0, 0, 0.0])
            total[0] += groups; total[1] += inst; total[2] += ms
    notes += [unattributed_note(reason, *unattributed[reason]) for reason in sorted(unattributed)]
    grouped = any(p.paths is not None for p in traced)
    paths = pa.concat_tables([p.paths for p in traced if p.paths is not None]) if grouped else None
    untraced = sorted(r for p in traced for r in p.untraced)
    notes += untested_notes(runs) + delay_note(untraced) + path_note(untraced, grouped)
    return Attribution(runs, summary, kernel_table, notes, verdicts(summary, kernel_table, waits, delays, paths),
                       waits, delays, paths)


def _summed_ncu_facts(facts: list[tuple | None]) -> tuple | None:
    """Signature counts add up over runs; the profile runs and their missing metrics are every unit's same ones."""
    present = [f for f in facts if f is not None]
    if not present:
        return None
    n_runs, _, _, _, lacking, names = present[0]
    return (n_runs, *(sum(f[k] for f in present) for k in (1, 2, 3)), lacking, names)


def _ncu_sources(items: list[Path], workdir: Path, executor: Executor) -> tuple[list[Path], dict[Path, list[str]]]:
    """The run directories holding the Nsight Compute runs of ``items``, read where they are (reports are ingested
    into ``workdir``), and each item's run ids (:func:`traceql.attribute.ncu_runs_of`)."""
    scratch = workdir / "ncu-ingest"
    sources: list[Path] = []
    per_item: dict[Path, list[str]] = {}
    for item in items:
        src, runs = ncu_runs_of(item, scratch)
        per_item[item] = sorted(runs)
        if src not in sources:
            sources.append(src)
    return sources, per_item


def _check_ncu_matched(ncu_runs: dict[Path, list[str]], matched: set[str], run_gpus: set[str],
                       dirs: Sequence[Path]) -> None:
    """Refuse an ``--ncu`` report none of whose profiled kernels matches a kernel of any run."""
    for item, run_ids in ncu_runs.items():
        if matched & set(run_ids):
            continue
        con = store.connect(list(dirs), run_ids=set(run_ids), views=False)
        try:
            ncu_gpus = {r[0] for r in con.sql("SELECT DISTINCT device_name FROM ncu_kernels "
                                              "WHERE device_name IS NOT NULL").fetchall()}
            names = [r[0] for r in con.sql("SELECT DISTINCT short_name FROM ncu_kernels ORDER BY 1 LIMIT 4")
                     .fetchall()]
        finally:
            con.close()
        if ncu_gpus and run_gpus and not ncu_gpus & run_gpus:
            raise BadInputError(f"--ncu {item}: profiled on {', '.join(sorted(ncu_gpus))}, but the input ran on "
                                f"{', '.join(sorted(run_gpus))}; Nsight Compute counters must come from the same "
                                "GPU model")
        raise BadInputError(f"--ncu {item}: none of its profiled kernels ({', '.join(names)}) ran in the input; "
                            "profile the same program (`traceql collect --ncu -- PROGRAM`)")

