"""``traceql report``: a self-contained HTML report over one run or many, built from a recipe.

The recipe's sections are computed per run (map: one DuckDB connection per run, so one bad run cannot
spoil the others), then concatenated across runs (reduce). Charts come from :mod:`.charts`, the page from
:mod:`.html`; nothing here draws or formats.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from .. import store
from ..errors import BadInputError, TraceqlError, check_on_error
from ..executor import Executor, run_units
from ..executor import parse as parse_executor
from ..ingest.ncu import FORMAT as NCU_FORMAT
from ..output import check_target, replacing, unwritable
from . import diff_charts, paper_charts  # noqa: F401  (register the diff and paper recipes' charts)
from . import recipe as recipes
from .recipe import Recipe, Section
from .sections import SectionResult


@dataclass
class Report:
    """What :func:`report` computed: the runs, each section's tables, the runs skipped and why."""

    recipe: Recipe
    runs: pa.Table
    sections: list[SectionResult]
    skipped: list[dict] = field(default_factory=list)  # run_id, run, source_path, reason
    seconds: float = 0.0

    @property
    def traced_runs(self) -> int:
        """Runs that are traces (the report's subject); Nsight Compute profiles only inform them."""
        return sum(1 for f in self.runs.column("format").to_pylist() if f != NCU_FORMAT)

    def runs_text(self) -> str:
        """'3 traced runs and 1 Nsight Compute profile'."""
        n, profiles = self.traced_runs, self.runs.num_rows - self.traced_runs
        text = f"{n} traced run{'' if n == 1 else 's'}"
        if profiles:
            text += f" and {profiles} Nsight Compute profile{'' if profiles == 1 else 's'}"
        return text

    def html(self) -> str:
        from .html import render_page

        return render_page(self)

    def write(self, out: str | Path) -> Path:
        out = Path(out)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise unwritable(out.parent, exc) from exc
        page = self.html()
        with replacing(out) as tmp:  # atomic: a reader never sees half a page
            tmp.write_text(page, encoding="utf-8")
        return out


Progress = Callable[[int, int, str, str | None], None]  # done, total, run label, error or None


def report(inputs: Sequence[str | Path] | str | Path, out: str | Path | None = None, *, recipe: str | Path = "overlap",
           on_error: str = "raise", progress: Progress | None = None, workdir: str | Path | None = None,
           executor: str | Executor | None = None) -> Report:
    """Build the report of ``recipe`` over ``inputs`` (run directories, or traces ingested first).

    ``on_error``: ``raise`` stops at the first run that fails; ``skip`` goes on and lists every skipped run
    and the reason in the report. ``out``: also write the HTML page there. ``executor``: where each run's sections
    are computed (:mod:`traceql.executor`: ``local`` by default, ``local:N``, ``dask://HOST:PORT``).
    """
    from ..attribute import as_store, input_paths

    inputs = input_paths(inputs)
    check_on_error(on_error)
    rec = recipe if isinstance(recipe, Recipe) else recipes.load_kind(recipe, "runs")
    if out is not None:
        check_target(out)
    started = time.perf_counter()
    tmp = None
    if workdir is None and any(not store.is_store(p) for p in inputs):
        tmp = tempfile.TemporaryDirectory(prefix="traceql-report-")
        workdir = tmp.name
    try:
        ex = parse_executor(executor)
        dirs = as_store(inputs, Path(workdir or ".") / "runs", ex)
        result = _build(rec, [d.resolve() for d in dirs] if ex.distributed else dirs, on_error, progress, ex)
    finally:
        if tmp is not None:
            tmp.cleanup()
    result.seconds = time.perf_counter() - started  # what the page can say of itself: queries and runs
    if out is not None:
        result.write(out)
        result.seconds = time.perf_counter() - started  # what the caller waited for, the page written too
    return result


def _run_table(dirs: list[Path]) -> pa.Table:
    con = store.connect(dirs, views=False)
    try:
        return con.sql("""
            SELECT r.run_id, coalesce(json_extract_string(r.labels_json, '$.name'), r.run_id) AS run, r.source_path,
                   r.format, r.tool_version, r.gpu_names, r.host, r.labels_json,
                   (SELECT count(*) FROM kernels k WHERE k.run_id = r.run_id) AS kernels
            FROM runs r ORDER BY r.run_id""").to_arrow_table()
    finally:
        con.close()


def _build(rec: Recipe, dirs: list[Path], on_error: str, progress: Progress | None,
           executor: Executor | None = None) -> Report:
    runs = _run_table(dirs)
    ncu_runs = [r["run_id"] for r in runs.to_pylist() if r["format"] == NCU_FORMAT]
    traced = [r for r in runs.to_pylist() if r["format"] != NCU_FORMAT]
    if not traced:
        raise BadInputError(f"{', '.join(map(str, dirs))}: no Nsight Systems runs to report on (only "
                            f"{len(ncu_runs)} Nsight Compute run(s))")
    collected: list[dict[str, list[pa.Table]]] = [{q.name: [] for q in s.queries} for s in rec.sections]
    per_run: list[list[tuple[str, dict[str, pa.Table]]]] = [[] for _ in rec.sections]
    skipped = []
    # map: each run on the executor, outcomes as they complete; then reduce in the runs' order
    outcomes: dict[int, list[dict[str, pa.Table]] | TraceqlError] = {}
    calls = [(rec, dirs, run["run_id"], run["run"], ncu_runs, run["kernels"]) for run in traced]
    for i, outcome in run_units(executor or parse_executor(None), _map_unit, calls,
                                [f"run {r['run_id']} ({r['run']})" for r in traced]):
        run, label = traced[i], traced[i]["run"]
        reason = None
        if isinstance(outcome, TraceqlError):
            reason = str(outcome).splitlines()[0] if str(outcome) else type(outcome).__name__
            if on_error == "raise":
                raise BadInputError(f"run {run['run_id']} ({label}, from {run['source_path']}): {reason}; "
                                    "--on-error skip reports the other runs") from None
        outcomes[i] = outcome
        if progress:
            progress(len(outcomes), len(traced), label, reason)
    for i, run in enumerate(traced):
        label, tables = run["run"], outcomes[i]
        if isinstance(tables, TraceqlError):
            skipped.append({"run_id": run["run_id"], "run": label, "source_path": run["source_path"],
                            "reason": str(tables).splitlines()[0] if str(tables) else type(tables).__name__})
            continue
        for k, section_tables in enumerate(tables):
            for name, t in section_tables.items():
                collected[k][name].append(t)
            if rec.sections[k].scope == "run":
                per_run[k].append((label, section_tables))
    sections = []
    reductions: dict[tuple, dict[str, pa.Table]] = {}  # sections with the same queries and reducer share the result
    for k, s in enumerate(rec.sections):
        reduced = {name: _concat(ts, s) for name, ts in collected[k].items()}
        if s.reduce is not None:
            from .reducers import REDUCERS

            key = (s.reduce, tuple(sorted(s.queries, key=lambda q: q.name)))
            if key not in reductions:
                reductions[key] = REDUCERS[s.reduce].fn(reduced)
            reduced = {**reduced, **reductions[key]}
        sections.append(SectionResult(s, reduced, per_run[k]))
    return Report(rec, runs, sections, skipped)


def _concat(tables: list[pa.Table], section: Section) -> pa.Table:
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return pa.table({"run_id": pa.array([], pa.string()), "run": pa.array([], pa.string())})
    table = pa.concat_tables(tables, promote_options="permissive")
    if section.scope == "all" and section.sort and section.sort in table.column_names:
        table = table.sort_by([(section.sort, "descending")])
    return table


def _map_unit(rec: Recipe, dirs: list[Path], run_id: str, label: str, ncu_runs: list[str], kernels: int) \
        -> list[dict[str, pa.Table]]:
    """One run's unit of work: its sections' tables, or a traceql error that says why the run is skipped."""
    if kernels == 0:
        raise BadInputError("no CUDA kernels in this run")
    try:
        return _map_run(rec, dirs, run_id, label, ncu_runs)
    except TraceqlError:
        raise
    except (duckdb.Error, OSError, ValueError) as exc:
        raise BadInputError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None


def _map_run(rec: Recipe, dirs: list[Path], run_id: str, label: str, ncu_runs: list[str]) -> list[dict[str, pa.Table]]:
    """Every section's queries for one run, on a connection that sees that run and the Nsight Compute runs."""
    from ..analysis import group_by_nvtx, prepare

    con = store.connect(dirs, run_ids={run_id, *ncu_runs})
    try:
        if rec.group_by_nvtx:
            group_by_nvtx(con, rec.group_by_nvtx)
        prepare(con)
        store.lock_files(con)  # a recipe's own SQL reads the run's tables, never other files, and writes none
        out = []
        for s in rec.sections:
            tables = {}
            for q in s.queries:
                t = con.sql(q.select(), params={"run_id": run_id}).to_arrow_table()
                tables[q.name] = t.append_column("run", pa.array([label] * t.num_rows, pa.string())) \
                    if "run" not in t.column_names else t
            out.append(tables)
        return out
    finally:
        con.close()
