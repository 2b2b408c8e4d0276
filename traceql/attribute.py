"""``traceql attribute``: overlap, slowdown and its attribution per kernel signature, all in SQL.

The computation lives in ``queries/`` (``kernel_overlap``, ``kernel_signatures``,
``kernel_attribution``, ``device_summary``); this module prepares inputs (ingesting raw traces and
Nsight Compute reports, an NVTX grouping, an external baseline) and returns the result tables and
the JSON contract.

One run is the unit of work: :func:`attribute_run` computes one run's rows on a connection that sees only that run
(and the Nsight Compute runs, which every run shares), wherever an executor (:mod:`traceql.executor`) runs it; the
reduce here concatenates the runs' rows, numbers the signature groups as one connection over every run would, and
adds up the notes. Every row of the attribution belongs to one (run, device), so the reduce is small. A unit runs
DuckDB on one thread, so the result is the same bytes on every executor; one connection over all runs
(``attribute(..., con=...)``, for a caller that wants the connection afterwards) gives the same rows, equal to the
last digits of DuckDB's multithreaded floating-point sums (docs/scale.md).
"""

from __future__ import annotations

import sys
import tempfile
import types
from collections.abc import Callable, Sequence
from pathlib import Path

import duckdb

from . import attribution, launch, store
from .attribution.baselines import External
from .attribution.result import (  # noqa: F401  (FACTORS, KERNEL_COLUMNS, as_store, input_paths: this module's API too)
    DELAYS_SQL,
    FACTORS,
    KERNEL_COLUMNS,
    KERNEL_ORDER,
    RUN_COLUMNS,
    SUMMARY_ORDER,
    WAITS_ORDER,
    Attribution,
    as_store,
    baseline_run,
    check_baseline_gpus,
    check_ncu,
    delay_note,
    input_paths,
    ncu_notes,
    ncu_store,
    path_note,
    step_paths,
    unattributed_notes,
    untested_notes,
    untraced_runs,
    with_ncu,
)
from .attribution.verdict import verdicts
from .errors import BadInputError, MissingInputError, UsageError
from .executor import Executor
from .executor import parse as parse_executor
from .output import same_path


def attribute(inputs: list[str | Path] | str | Path, *, baseline: str | Path | None = None,
              ncu: Sequence[str | Path] | str | Path | None = None,
              group_by_nvtx: str | None = None, focus: str = "any", workdir: str | Path | None = None,
              con: duckdb.DuckDBPyConnection | None = None, executor: str | Executor | None = None,
              progress: Callable[[int, int, str], None] | None = None, nvtx_scope: str = "process",
              nvtx_domains: Sequence[str] = ()) -> Attribution:
    """Attribute the slowdown of every GPU activity (kernels of any kind, copies, sets) beside other GPU work.

    ``inputs``: run directories, nsys exports or reports (raw inputs are ingested first, into
    ``workdir`` or a temporary directory). ``baseline``: a run whose isolated instances give t0.
    ``ncu``: Nsight Compute reports (``.ncu-rep``, ``.ncu-rep.xz``) or run directories holding
    Nsight Compute runs, whose isolated-kernel counters the models use where a profile matches a
    signature; each must match some kernel of the inputs. Nsight Compute runs that the input run
    directories hold already are used without it.
    ``group_by_nvtx``: a glob; each kernel joins the innermost matching NVTX range around its launch, by the launch
    rule of :mod:`traceql.launch`: ranges open on any thread of the launching process (``nvtx_scope="thread"``: on
    the launching thread only), of the default NVTX domain and of ``nvtx_domains``.
    ``focus``: ``any`` co-runner (default) or only kernels overlapped by ``comm``.
    ``executor``: where each run is computed (``local``, ``local:N``, ``dask://HOST:PORT``; see
    :mod:`traceql.executor`); on Dask the run directories (``--ncu`` and ``--baseline`` ones too) must be paths every
    worker sees, so raw traces and reports need a shared ``workdir``. ``progress(done, total, run_id)`` is called as
    runs complete. Without an executor (and with ``con``), one connection over every run computes it all: the same
    result, faster for small inputs (a connection's views cost seconds to create) but in one process's memory;
    ``con`` is left with the analysis views on it.
    """
    inputs = input_paths(inputs)
    if focus not in ("any", "comm"):
        raise UsageError(f"focus {focus!r}: choose any or comm")
    if baseline is not None and any(same_path(baseline, p) for p in inputs):  # also through a link
        raise UsageError(f"--baseline {baseline} is also an input: give the baseline run only once")
    if baseline is not None and not Path(baseline).exists():  # before the work, not after it
        raise MissingInputError(f"--baseline {baseline}: no such file or run directory")
    rule = launch.Rule(nvtx_scope, tuple(nvtx_domains))
    ncu_items = [Path(p) for p in ([ncu] if isinstance(ncu, str | Path) else ncu or [])]
    ex = parse_executor(executor)
    if ex.distributed:
        inputs, ncu_items = [p.resolve() for p in inputs], [p.resolve() for p in ncu_items]
        local_only = [p for p in [*inputs, *ncu_items] if not store.is_store(p)]
        if local_only and workdir is None:
            raise UsageError(f"--executor {ex}: {local_only[0]} is not a run directory, and the Dask workers read "
                             f"run directories: ingest it first (`traceql ingest {local_only[0]} -o RUN_DIR "
                             f"--executor {ex}`) and give RUN_DIR")
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="traceql-attribute-")
        workdir = tmp.name
    elif ex.distributed:
        workdir = Path(workdir).resolve()
    try:
        if con is None and executor is not None:
            from .attribute_map import attribute_per_run

            return attribute_per_run(inputs, Path(baseline) if baseline is not None else None, ncu_items,
                                     group_by_nvtx, focus, Path(workdir), ex, progress, rule)
        dirs = as_store(inputs, Path(workdir) / "runs", ex)
        counted = [e.get("tables", {}).get("kernels") for d in dirs for e in store.read_manifest(d)["runs"].values()]
        if counted and all(n == 0 for n in counted):  # known from the manifests: no need to open a connection
            raise BadInputError(f"{', '.join(map(str, inputs))}: no CUDA kernels in the input; collect with "
                                "`nsys profile -t cuda` (or `traceql collect`)")
        ncu_dir, ncu_runs = ncu_store(ncu_items, dirs, Path(workdir))
        con = store.connect(dirs + ([ncu_dir] if ncu_dir else []), con)
        notes: list[str] = []
        if con.sql("SELECT count(*) FROM kernels").fetchall()[0][0] == 0:
            raise BadInputError(f"{', '.join(map(str, inputs))}: no CUDA kernels in the input; collect with "
                                "`nsys profile -t cuda` (or `traceql collect`)")
        check_ncu(con, ncu_runs)
        notes += ncu_notes(con)
        rule.apply(con)
        if group_by_nvtx:
            attribution.group_by_nvtx(con, group_by_nvtx)
        external = _external(con, Path(baseline) if baseline is not None else None, Path(workdir) / "baseline", rule)
        if con.sql("SELECT count(*) FROM kernels WHERE kind = 'comm'").fetchall()[0][0] == 0 and \
                con.sql("SELECT count(*) FROM memcpy WHERE is_peer").fetchall()[0][0] == 0:
            notes.append("no communication (NCCL kernels or peer copies) in the input: the results describe "
                         "overlap with other kernels and copies only")
        attribution.prepare(con, external)
        notes += unattributed_notes(con)
        where = "WHERE comm_fraction > 0" if focus == "comm" else ""
        kernels = con.sql(f"SELECT {KERNEL_COLUMNS} FROM kernel_attribution {where} ORDER BY {KERNEL_ORDER}") \
            .to_arrow_table()
        summary = con.sql(f"SELECT * FROM device_summary ORDER BY {SUMMARY_ORDER}").to_arrow_table()
        runs = con.sql(f"SELECT {RUN_COLUMNS} FROM runs ORDER BY run_id").to_arrow_table()
        waits = con.sql(f"SELECT * FROM rank_waits ORDER BY {WAITS_ORDER}").to_arrow_table()
        delays = con.sql(DELAYS_SQL).to_arrow_table()
        paths = step_paths(con, bool(group_by_nvtx))
        untraced = untraced_runs(con)
        notes += untested_notes(runs) + delay_note(untraced) + path_note(untraced, bool(group_by_nvtx))
        return Attribution(runs, summary, kernels, notes, verdicts(summary, kernels, waits, delays, paths), waits,
                           delays, paths)
    finally:
        if tmp is not None:
            tmp.cleanup()


def _external(con: duckdb.DuckDBPyConnection, baseline: Path | None, workdir: Path,
              rule: launch.Rule = launch.DEFAULT) -> External | None:
    """Isolated durations from elsewhere: a baseline run's isolated instances (``--baseline``; then every signature it
    ran alone takes its baseline from there, their launch contexts read by the inputs' ``rule``), and Nsight Compute's
    for signatures never isolated here nor there."""
    external = None
    if baseline is not None:
        external, base_gpus = baseline_run(baseline, workdir, rule=rule)
        check_baseline_gpus(baseline, base_gpus, {r[0] for r in con.sql("SELECT DISTINCT name FROM devices")
                                                   .fetchall()})
    return with_ncu(external, con)


class _CallableModule(types.ModuleType):
    """This module, callable: ``traceql.attribute(RUN, ...)`` is :func:`attribute`, the twin of ``traceql attribute``,
    while ``from traceql.attribute import ...`` and ``traceql.attribute.X`` keep working."""

    def __call__(self, *args, **kwargs) -> Attribution:
        return attribute(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

