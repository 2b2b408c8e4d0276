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
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
# the kernels of the runs one unit of work computes on one connection (about 2 KiB of memory per kernel: about 1 GiB);
# small runs share a connection and its fixed cost (the views, the analysis' planning), large ones have their own
BATCH_KERNELS = 500_000


def report(inputs: Sequence[str | Path] | str | Path, out: str | Path | None = None, *, recipe: str | Path = "overlap",
           on_error: str = "raise", progress: Progress | None = None, workdir: str | Path | None = None,
           executor: str | Executor | None = None, batch_kernels: int = BATCH_KERNELS) -> Report:
    """Build the report of ``recipe`` over ``inputs`` (run directories, or traces ingested first).

    ``on_error``: ``raise`` stops at the first run that fails; ``skip`` goes on and lists every skipped run
    and the reason in the report. ``out``: also write the HTML page there. ``executor``: where each unit of work is
    computed (:mod:`traceql.executor`: ``local`` by default, ``local:N``, ``dask://HOST:PORT``). A unit is a batch of
    consecutive runs of at most ``batch_kernels`` kernels together (a larger run alone; 0: every run alone), computed on
    one connection: the same tables as one run per connection, at the fixed cost of one connection per batch.
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
        result = _build(rec, [d.resolve() for d in dirs] if ex.distributed else dirs, on_error, progress, ex,
                        batch_kernels)
    finally:
        if tmp is not None:
            tmp.cleanup()
    result.seconds = time.perf_counter() - started  # what the page can say of itself: queries and runs
    if out is not None:
        result.write(out)
        result.seconds = time.perf_counter() - started  # what the caller waited for, the page written too
    return result


def _run_table(dirs: list[Path], on_error: str = "raise") -> tuple[pa.Table, list[dict]]:
    """The runs of ``dirs``, and those skipped: with ``on_error`` skip, a run whose files cannot be read (damaged,
    missing, of another version) is left out with the reason, where it would stop the whole report."""
    try:
        return _runs_of(dirs), []
    except TraceqlError:
        if on_error == "raise":
            raise
    readable, skipped = set(), []
    for d in dirs:
        for run_id, entry in sorted(store.read_manifest(d)["runs"].items()):
            try:
                store.connect([d], views=False, run_ids={run_id}).close()  # opening a run checks its files
                readable.add(run_id)
            except TraceqlError as exc:
                skipped.append({"run_id": run_id, "run": (entry.get("labels") or {}).get("name") or run_id,
                                "source_path": entry.get("source_path"),
                                "reason": str(exc).splitlines()[0] if str(exc) else type(exc).__name__})
    if not readable:
        raise BadInputError(f"{', '.join(map(str, dirs))}: no run can be read: " +
                            "; ".join(f"run {s['run_id']}: {s['reason']}" for s in skipped))
    return _runs_of(dirs, readable), skipped


def _runs_of(dirs: list[Path], run_ids: set[str] | None = None) -> pa.Table:
    con = store.connect(dirs, views=False, run_ids=run_ids)
    try:
        return con.sql("""
            SELECT r.run_id, coalesce(json_extract_string(r.labels_json, '$.name'), r.run_id) AS run, r.source_path,
                   r.format, r.tool_version, r.gpu_names, r.host, r.labels_json,
                   (SELECT count(*) FROM kernels k WHERE k.run_id = r.run_id) AS kernels
            FROM runs r ORDER BY r.run_id""").to_arrow_table()
    finally:
        con.close()


def _build(rec: Recipe, dirs: list[Path], on_error: str, progress: Progress | None,
           executor: Executor | None = None, batch_kernels: int = BATCH_KERNELS) -> Report:
    runs, skipped = _run_table(dirs, on_error)
    for n, s in enumerate(skipped, 1):
        if progress:
            progress(n, len(skipped), s["run"], s["reason"])
    ncu_runs = [r["run_id"] for r in runs.to_pylist() if r["format"] == NCU_FORMAT]
    traced = [r for r in runs.to_pylist() if r["format"] != NCU_FORMAT]
    if not traced:
        raise BadInputError(f"{', '.join(map(str, dirs))}: no Nsight Systems runs to report on (only "
                            f"{len(ncu_runs)} Nsight Compute run(s))")
    collected: list[dict[str, list[pa.Table]]] = [{q.name: [] for q in s.queries} for s in rec.sections]
    per_run: list[list[tuple[str, dict[str, pa.Table]]]] = [[] for _ in rec.sections]
    # map: batches of runs on the executor, outcomes per run as each batch completes; then reduce in the runs' order
    outcomes: dict[int, list[dict[str, pa.Table]] | TraceqlError] = {}
    batches = _batches(traced, batch_kernels)
    calls = [(rec, dirs, [(traced[i]["run_id"], traced[i]["run"], traced[i]["kernels"]) for i in b], ncu_runs)
             for b in batches]
    names = [f"run {traced[b[0]]['run_id']} ({traced[b[0]]['run']})" if len(b) == 1 else
             f"{len(b)} runs from {traced[b[0]]['run_id']} ({traced[b[0]]['run']})" for b in batches]
    for k, outcome in run_units(executor or parse_executor(None), _map_batch, calls, names):
        for j, i in enumerate(batches[k]):
            run, label = traced[i], traced[i]["run"]
            one = outcome if isinstance(outcome, TraceqlError) else outcome[j]
            reason = None
            if isinstance(one, TraceqlError):
                reason = str(one).splitlines()[0] if str(one) else type(one).__name__
                if on_error == "raise":
                    raise BadInputError(f"run {run['run_id']} ({label}, from {run['source_path']}): {reason}; "
                                        "--on-error skip reports the other runs") from None
            outcomes[i] = one
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


def _batches(traced: list[dict], batch_kernels: int) -> list[list[int]]:
    """The runs (indices into ``traced``) each unit of work computes on one connection: consecutive runs until
    their kernels pass ``batch_kernels`` (a larger run alone; 0: every run alone)."""
    batches: list[list[int]] = []
    size = 0
    for i, run in enumerate(traced):
        kernels = run["kernels"] or 0
        alone = kernels == 0 or (batches and not traced[batches[-1][0]]["kernels"])  # skipped at once, alone
        if not batches or alone or size + kernels > batch_kernels:
            batches.append([i])
            size = kernels
        else:
            batches[-1].append(i)
            size += kernels
    return batches


def _map_batch(rec: Recipe, dirs: list[Path], runs: list[tuple[str, str, int]], ncu_runs: list[str]) \
        -> list[list[dict[str, pa.Table]] | TraceqlError]:
    """A unit of work: each run's sections' tables (or the traceql error that says why it is skipped), computed on
    one connection for the whole batch; a batch that fails is computed again run by run, so that the runs that
    fail are the ones named and the others are reported."""
    if len(runs) == 1:
        run_id, label, kernels = runs[0]
        return [_map_unit(rec, dirs, run_id, label, ncu_runs, kernels)]
    try:
        return _map_runs(rec, dirs, runs, ncu_runs)
    except (TraceqlError, duckdb.Error, OSError, ValueError):
        out: list[list[dict[str, pa.Table]] | TraceqlError] = []
        for run_id, label, kernels in runs:
            try:
                out.append(_map_unit(rec, dirs, run_id, label, ncu_runs, kernels))
            except TraceqlError as exc:
                out.append(exc)
        return out


def _map_unit(rec: Recipe, dirs: list[Path], run_id: str, label: str, ncu_runs: list[str], kernels: int) \
        -> list[dict[str, pa.Table]]:
    """One run's unit of work: its sections' tables, or a traceql error that says why the run is skipped."""
    if kernels == 0:
        raise BadInputError("no CUDA kernels in this run")
    try:
        return _map_runs(rec, dirs, [(run_id, label, kernels)], ncu_runs)[0]
    except TraceqlError:
        raise
    except (duckdb.Error, OSError, ValueError) as exc:
        raise BadInputError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None


def _map_runs(rec: Recipe, dirs: list[Path], runs: list[tuple[str, str, int]], ncu_runs: list[str]) \
        -> list[list[dict[str, pa.Table]]]:
    """Every section's queries for ``runs`` (run id, label, kernels), on one connection that sees those runs and the
    Nsight Compute runs: each query once for all of them (:meth:`Query.select_batch`), its rows then split by run.
    The analysis is per run and device, so a run's rows are those of a connection that sees it alone; the signature
    groups' ids are numbered from 0 in each run, as such a connection numbers them."""
    from ..attribution import group_by_nvtx, prepare
    from ..launch import set_rule

    con = store.connect(dirs, run_ids={*(r[0] for r in runs), *ncu_runs})
    try:
        set_rule(con, rec.nvtx_scope, rec.nvtx_domains)
        if rec.group_by_nvtx:
            group_by_nvtx(con, rec.group_by_nvtx)
        prepare(con)
        store.lock_files(con)  # a recipe's own SQL reads the run's tables, never other files, and writes none
        first_group = dict(con.sql("SELECT run_id, min(group_id) FROM _signature_stats GROUP BY ALL").fetchall())
        out: list[list[dict[str, pa.Table]]] = [[] for _ in runs]
        for s in rec.sections:
            per_run: list[dict[str, pa.Table]] = [{} for _ in runs]
            for q in s.queries:
                sql = q.select() if len(runs) == 1 else q.select_batch()
                t = con.sql(sql, params={"run_id": runs[0][0]} if len(runs) == 1 else None).to_arrow_table()
                parts = _split_by_run(t, [r[0] for r in runs])
                for j, (run_id, label, _) in enumerate(runs):
                    part = parts[j]
                    if "group_id" in part.column_names and first_group.get(run_id):
                        part = part.set_column(part.schema.get_field_index("group_id"), "group_id",
                                               pc.subtract(part.column("group_id"), first_group[run_id]))
                    per_run[j][q.name] = part.append_column("run", pa.array([label] * part.num_rows, pa.string())) \
                        if "run" not in part.column_names else part
            for j in range(len(runs)):
                out[j].append(per_run[j])
        return out
    finally:
        con.close()


def _split_by_run(table: pa.Table, run_ids: list[str]) -> list[pa.Table]:
    """``table``'s rows of each of ``run_ids``, in their order within the table: one stable sort by run and a slice
    per run (a filter per run reads the whole table once per run: quadratic in a report of many runs)."""
    if len(run_ids) == 1:
        return [table]
    table = table.take(pc.sort_indices(table, [("run_id", "ascending")]))  # a stable sort
    ids = table.column("run_id").to_numpy(zero_copy_only=False)
    lo = np.searchsorted(ids, run_ids, side="left")
    hi = np.searchsorted(ids, run_ids, side="right")
    return [table.slice(a, b - a) for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]
