"""The ``traceql`` command line: each command converts arguments, calls one library function, renders.

Exit codes (see :mod:`traceql.errors`): 0 ok, 1 flagged by a gate, 2 bad usage or bad input.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from . import stopping
from .errors import EXIT_BAD_INPUT, EXIT_FLAGGED, Interrupted, Terminated, TraceqlError
from .version import __version__

app = typer.Typer(add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Attribute the slowdown of compute kernels overlapped with communication, from Nsight traces.")



def _plain_help_types() -> None:
    """--help without Python's types: typer 0.2x labels a flag <bool> and a repeatable option or argument
    <list[str]>; a flag gets no label (it takes no value) and a repeatable one its element's (<str>)."""
    from typer import core

    for cls in (getattr(core, "TyperOption", None), getattr(core, "TyperArgument", None)):
        shown = getattr(cls, "display_type_rich", None)
        if shown is None or getattr(shown, "plain", False):  # an older typer, or done already
            continue

        def display(self, ctx, shown=shown):
            if getattr(self, "is_flag", False) and self.metavar is None:
                return None
            text = shown(self, ctx)
            return re.sub(r"list\[(.*)\]", lambda m: m.group(1).lower(), text) if isinstance(text, str) else text

        display.plain = True
        cls.display_type_rich = display


_plain_help_types()


class _Choice(enum.StrEnum):
    """A fixed set of values, listed in --help and checked by the parser; each value is a plain str."""


class OnErrorChoice(_Choice):
    raise_ = "raise"
    skip = "skip"


class TableFormat(_Choice):
    table = "table"
    json = "json"
    csv = "csv"


class SqlFormat(_Choice):
    table = "table"
    csv = "csv"
    json = "json"
    parquet = "parquet"


class Focus(_Choice):
    any = "any"
    comm = "comm"


class NvtxScope(_Choice):
    process = "process"
    thread = "thread"


class ClockControl(_Choice):
    none = "none"
    base = "base"
    reset = "reset"


class Benchmark(_Choice):
    overlap = "overlap"
    contention = "contention"
    train = "train"


RunDirs = Annotated[list[str], typer.Argument(help="Run directories made by `traceql ingest` (paths or URLs: file://, "
                                                  "or any fsspec protocol: s3://, memory://...).", show_default=False)]
OnError = Annotated[OnErrorChoice, typer.Option(help="What to do with a bad input among many: raise (stop) or skip "
                                                     "(go on, naming it).", case_sensitive=False)]
Format = Annotated[TableFormat, typer.Option("--format", "-f", case_sensitive=False, help="How to print the result.")]
NvtxScopeOpt = Annotated[NvtxScope, typer.Option(
    "--nvtx-scope", case_sensitive=False,
    help="Which NVTX ranges make a launch's context: those open on any thread of the launching process (the backward "
         "pass that PyTorch launches from autograd threads belongs to the step), or on the launching thread only.")]
NvtxDomainOpt = Annotated[list[str], typer.Option(
    "--nvtx-domain", metavar="DOMAIN",
    help="An NVTX domain whose ranges are yours too (repeatable); the default domain always is, and libraries' "
         "domains (NCCL, CCCL...) otherwise never make a step.")]
ExecutorOpt = Annotated[str | None, typer.Option(
    "--executor", help="Where each run (rank file) is processed: local (this process, one run at a time), local:N "
                       "(N processes) or dask://HOST:PORT (a running Dask scheduler whose workers see the same paths).",
    show_default=False)]


def _err(msg: str) -> None:
    typer.echo(f"traceql: {msg}", err=True)


def _local_executor(inputs: list[str], executor: str | None) -> None:
    """Refuse a run store at a URL with a Dask executor: it is read through a copy on this host, which no worker
    sees."""
    from .executor import parse
    from .sources.urls import is_remote

    remote = [i for i in inputs if is_remote(i)]
    if remote and parse(executor).distributed:
        raise TraceqlErrorUsage(f"{remote[0]}: a run store at a URL is read through a copy on this host, which the "
                                f"Dask workers do not see; use --executor local:N, or give a path every worker mounts")


@contextlib.contextmanager
def _ctrl_c(what: str) -> Iterator[None]:
    """Ctrl-C during a command: a short message and exit code 130 (typer would exit silently)."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted; {what}") from None


def _version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        raise typer.Exit(0)


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", help="Print the version and exit.", is_eager=True,
                                                callback=_version)] = False) -> None:
    """Attribute the slowdown of compute kernels overlapped with communication, from Nsight traces."""


@app.command()
def ingest(
    traces: Annotated[list[str], typer.Argument(help="nsys .sqlite exports, parquetdir exports, .nsys-rep reports, "
                                                     "Nsight Compute .ncu-rep reports (also .xz) or torch.profiler "
                                                     "traces (.json, .json.gz); paths or URLs "
                                                     "(file://, or any fsspec protocol: s3://, memory://...).",
                                                show_default=False)],
    out: Annotated[str, typer.Option("-o", "--out", help="Run directory to create or add to (a path, or a URL: "
                                                         "file://, or any fsspec protocol).")],
    allow_no_kernels: Annotated[bool, typer.Option(help="Ingest traces without CUDA kernels (NVTX/OS data only).")]
    = False,
    label: Annotated[list[str], typer.Option(help="KEY=VALUE label recorded with each run (repeatable).")] = [],  # noqa: B006
    jobs: Annotated[int, typer.Option("-j", "--jobs", help="Traces ingested in parallel (--executor local:N).")] = 1,
    on_error: OnError = OnErrorChoice.raise_,
    executor: ExecutorOpt = None,
    lazy: Annotated[bool, typer.Option(help="Leave API calls, NVTX ranges and GPU metrics in each export until a "
                                            "query needs them (the export must stay where it is, unchanged).")]
    = False,
) -> None:
    """Normalize Nsight Systems exports, Nsight Compute reports and torch.profiler traces into a run directory of
    Parquet tables (v1)."""
    from .ingest import DEFERRABLE
    from .ingest import ingest as do_ingest
    from .output import refuse_overwrite

    labels = _parse_labels(label)
    refuse_overwrite([out], traces)
    failed: list[str] = []

    with _ctrl_c("the runs ingested before it are kept, none half-written"), _progress() as bar:
        task = bar.add_task("ingest", total=len(traces))

        def progress(result, trace: Path) -> None:
            bar.advance(task)
            if isinstance(result, Exception):
                failed.append(str(trace))
                if on_error == "skip":  # with raise, main() prints the error once
                    _say(bar, f"traceql: skipped: {result}")
                return
            state = "already ingested" if result.already else "ingested"
            counts = ", ".join(f"{k} {v}" for k, v in sorted(result.tables.items()) if k != "runs" and v)
            _say(bar, f"{state} {trace} as run {result.run_id} ({counts})")
            for warning in result.warnings:
                _say(bar, f"traceql: warning: {warning}")

        do_ingest(traces, out, require_kernels=not allow_no_kernels, labels=labels, jobs=jobs,
                  on_error=on_error.value, progress=progress, executor=executor, defer=DEFERRABLE if lazy else ())
    typer.echo(str(out))
    if failed:
        _err(f"{len(failed)} of {len(traces)} trace(s) failed: {', '.join(failed)}")
        raise typer.Exit(EXIT_BAD_INPUT)


@app.command()
def migrate(
    run_dirs: Annotated[list[str], typer.Argument(help="Run directories written by an earlier traceql: paths or "
                                                       "URLs (any fsspec protocol).", show_default=False)],
) -> None:
    """Bring run directories of an earlier layout to this traceql's, in place (nothing is re-ingested)."""
    from .sources import urls
    from .store import migrate as migrate_local
    from .store import remote

    def do_migrate(d: str, progress):
        return remote.migrate(d, progress) if remote.is_remote(d) else \
            migrate_local(urls.as_local(d, "a run directory"), progress)

    with _ctrl_c("each run is in the old layout or the new one; run the command again to finish"), \
            _progress() as bar:
        for d in run_dirs:
            task = bar.add_task(f"migrate {d}", total=None)

            def progress(done: int, total: int, run_id: str, task=task) -> None:
                bar.update(task, completed=done, total=total)

            n = do_migrate(d, progress)
            _say(bar, f"{d}: already in the current layout" if n is None else f"{d}: {n} run(s) migrated")


@app.command()
def sql(
    run_dirs: RunDirs,
    query: Annotated[str, typer.Option("-q", "--query", help="SQL to run; or give it as the last argument.")] = "",
    fmt: Annotated[SqlFormat, typer.Option("--format", "-f", case_sensitive=False, help="How to print the result "
                                                                                    "(parquet needs -o).")]
    = SqlFormat.table,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write here instead of stdout.")] = None,
    allow_files: Annotated[bool, typer.Option(help="Let the SQL read and write files (COPY, read_csv, ATTACH...); "
                                                   "by default it reads the run store's tables only.")] = False,
) -> None:
    """Run SQL over one or more run directories: one view per table, rows tagged with run_id.

    The query is the last argument (or -q): `traceql sql RUN "SELECT count(*) FROM kernels"`. It reads the
    run store's tables and views and no other file, and writes none, unless --allow-files. Ctrl-C stops it (exit 130).
    """
    from .output import refuse_overwrite
    from .sqlcmd import run_sql
    from .store.remote import opened

    if not query:
        if len(run_dirs) < 2:
            raise TraceqlErrorUsage("give a query: traceql sql RUN_DIR... \"SELECT ...\"")
        *dirs, query = run_dirs
        run_dirs, query = dirs, str(query)
    refuse_overwrite([output], run_dirs)
    with opened(run_dirs, "a run directory") as local:  # a store at a URL: a local copy, removed afterwards
        run_sql(local, query, fmt.value, output, sys.stdout, allow_files=allow_files)


@app.command()
def attribute(
    inputs: Annotated[list[str], typer.Argument(help="Run directories (paths or URLs), nsys exports or .nsys-rep "
                                                     "reports.", show_default=False)],
    baseline: Annotated[str | None, typer.Option(help="A run (or trace) whose isolated kernels give the baseline "
                                                      "t0, e.g. the same job without communication (a run "
                                                      "directory may be a URL).")] = None,
    ncu: Annotated[list[str], typer.Option(help="Nsight Compute report (.ncu-rep, .ncu-rep.xz) or run directory "
                                                "holding one (a path or URL): isolated-kernel counters for the "
                                                "models, and the baseline of kernels that ran alone neither here "
                                                "nor in --baseline (repeatable).",
                                           metavar="REPORT|RUN_DIR")] = [],  # noqa: B006
    group_by_nvtx: Annotated[str | None, typer.Option(help="Group kernels by the innermost NVTX range around their "
                                                           "launch whose text matches this glob, e.g. 'case:*' or "
                                                           "'step*' (see --nvtx-scope).")] = None,
    nvtx_scope: NvtxScopeOpt = NvtxScope.process,
    nvtx_domain: NvtxDomainOpt = [],  # noqa: B006
    focus: Annotated[Focus, typer.Option(help="Which overlapped kernels to list: any co-runner, or comm only.")]
    = Focus.any,
    fmt: Format = TableFormat.table,
    out_dir: Annotated[str | None, typer.Option("-o", "--out-dir", help="Also write attribution.json, "
                                                "kernels.parquet and summary.parquet here (a folder or a URL).")]
    = None,
    limit: Annotated[int, typer.Option(help="Rows of the table format (worst first).")] = 25,
    max_slowdown: Annotated[float | None, typer.Option(help="Exit 1 if a device's compute slowdown exceeds this "
                                                            "(e.g. 0.1 for 10%): a regression gate.")] = None,
    executor: ExecutorOpt = None,
) -> None:
    """Measure overlap and slowdown of every GPU activity beside other work, and name the contended resource."""
    from .attribute import attribute as do_attribute
    from .attribution.result import OUT_FILES
    from .output import check_folder, refuse_overwrite
    from .render import render_attribution
    from .sources import urls
    from .store.remote import opened

    if out_dir is not None and urls.is_remote(out_dir):  # before the work, not after it
        urls.filesystem(out_dir)
    elif out_dir is not None:
        check_folder(urls.as_local(out_dir, "-o"))
        refuse_overwrite([urls.as_local(out_dir, "-o") / n for n in OUT_FILES], [*inputs, baseline, *ncu])
    extra = [baseline] if baseline is not None else []
    _local_executor([*inputs, *extra, *ncu], executor)
    with _ctrl_c("nothing was written"), _progress() as bar, opened([*inputs, *extra, *ncu]) as local:
        bar.add_task("attribute", total=None)
        # --baseline and --ncu run directories at URLs are read through the same local copy as the inputs
        local, base, ncu_local = local[:len(inputs)], local[len(inputs):len(inputs) + len(extra)], local[
            len(inputs) + len(extra):]
        result = stopping.run(lambda: do_attribute(local, baseline=base[0] if base else None, ncu=ncu_local,
                                                   group_by_nvtx=group_by_nvtx, focus=focus.value, executor=executor,
                                                   nvtx_scope=nvtx_scope.value, nvtx_domains=nvtx_domain),
                              "nothing was written")
        if out_dir is not None:
            result.write(out_dir)
    sys.stdout.write(render_attribution(result, fmt.value, limit))
    if max_slowdown is not None:
        worst = [r for r in result.summary.to_pylist()
                 if r["nvtx"] is None and r["compute_slowdown"] is not None and r["compute_slowdown"] > max_slowdown]
        if worst:
            _err(f"compute slowdown above {max_slowdown:.1%} on " + ", ".join(
                f"run {r['run_id']} device {r['device_id']} ({r['compute_slowdown']:.1%})" for r in worst))
            raise typer.Exit(EXIT_FLAGGED)


@app.command()
def overlap(
    inputs: Annotated[list[str], typer.Argument(help="nsys exports, .nsys-rep reports or run directories.",
                                                show_default=False)],
    fmt: Format = TableFormat.table,
    keep: Annotated[str | None, typer.Option("--keep", help="Ingest raw traces into this run directory and keep it "
                                                             "(lazily: `traceql attribute` on it reads the rest of "
                                                             "each trace then).")] = None,
) -> None:
    """Per GPU: how long compute and communication kernels ran alone, together and not at all (exact unions, from
    the kernels alone)."""
    from .output import refuse_overwrite
    from .overlap import overlap as do_overlap
    from .render import render_overlap

    refuse_overwrite([keep], inputs)
    with _ctrl_c("nothing was written"), _progress() as bar:
        bar.add_task("overlap", total=None)
        table = stopping.run(lambda: do_overlap(inputs, workdir=keep), "nothing was written")
    sys.stdout.write(render_overlap(table, fmt.value))


@app.command()
def diff(
    a: Annotated[str, typer.Argument(help="Before: a run directory (PATH@RUN[,RUN] picks runs of it by id, name or "
                                          "file), an nsys export or report.", show_default=False)],
    b: Annotated[str, typer.Argument(help="After: the same kinds of input as A.", show_default=False)],
    group_by_nvtx: Annotated[str | None, typer.Option(help="NVTX ranges that are steps (a glob, e.g. 'step*'): step "
                                                           "time and per-step metrics; kernels grouped by them.")]
    = None,
    nvtx_scope: NvtxScopeOpt = NvtxScope.process,
    nvtx_domain: NvtxDomainOpt = [],  # noqa: B006
    fmt: Annotated[TableFormat, typer.Option("--format", "-f", case_sensitive=False,
                                             help="How to print the result (csv: the signature rows).")]
    = TableFormat.table,
    gate: Annotated[list[str], typer.Option(help="Exit 1 unless this holds on every device, e.g. "
                                                 "'exposed_comm_ms.delta < 5' (repeatable; docs/diff.md).")] = [],  # noqa: B006
    out_dir: Annotated[Path | None, typer.Option("-o", "--out-dir", help="Also write diff.json and one Parquet file "
                                                                         "per table here.")] = None,
    html: Annotated[Path | None, typer.Option(help="Also write the HTML report of the diff here.")] = None,
    recipe: Annotated[str, typer.Option(help="Report recipe for --html: diff, or a diff recipe .toml of your own.")]
    = "diff",
    limit: Annotated[int, typer.Option(help="Signature rows of the table format.")] = 25,
) -> None:
    """Compare run B against run A: what changed per kernel signature and per device, whether it is real, and why.

    Exit code: 0; 1 when a --gate is violated; 2 bad input (different GPU models, nothing in common, a bad gate).
    """
    from .diff import GATE_COLUMNS, input_path
    from .diff import diff as do_diff
    from .diff_model import OUT_FILES
    from .gates import check, parse
    from .output import check_folder, check_target, refuse_overwrite
    from .render_diff import FORMATS, render_diff

    if fmt not in FORMATS:
        raise TraceqlErrorUsage(f"--format {fmt!r}: choose table, json or csv")
    gates = [parse(g, GATE_COLUMNS) for g in gate]  # a bad gate fails before the analysis
    refuse_overwrite([*(out_dir / n for n in OUT_FILES if out_dir is not None), html],
                     [input_path(a), input_path(b)])
    if out_dir is not None:  # before the work, not after it
        check_folder(out_dir)
    if html is not None:
        check_target(html)
    if html is not None:
        from .report.diff import load_diff_recipe

        load_diff_recipe(recipe)  # a bad recipe fails before the analysis too
    result = stopping.run(lambda: do_diff(a, b, group_by_nvtx=group_by_nvtx, nvtx_scope=nvtx_scope.value,
                                          nvtx_domains=nvtx_domain), "nothing was written")
    violations, gate_notes = check(gates, result.summary.to_pylist(), lambda r: r["device"])
    lines = [f"gate '{g.text}': ok" for g in gates if not any(v.gate == g.text for v in violations)]
    lines += [v.describe() for v in violations] + [f"note: {n}" for n in gate_notes]
    if out_dir is not None:
        result.write(out_dir)
    if html is not None:
        from .report.diff import diff_report

        diff_report(result, recipe).write(html)
    sys.stdout.write(render_diff(result, fmt, limit, lines if fmt == "table" else ()))
    if fmt != "table":
        for line in lines:
            _err(line)
    if violations:
        raise typer.Exit(EXIT_FLAGGED)


@app.command()
def report(
    inputs: Annotated[list[str], typer.Argument(help="Run directories (paths or URLs; or traces, ingested first).",
                                                show_default=False)],
    out: Annotated[Path, typer.Option("-o", "--out", help="The HTML file to write.")] = Path("report.html"),
    recipe: Annotated[str, typer.Option(help="A built-in recipe (overlap, kernels, microbench, power) or a "
                                             "recipe .toml file of your own.")] = "overlap",
    on_error: OnError = OnErrorChoice.raise_,
    executor: ExecutorOpt = None,
) -> None:
    """Build a self-contained HTML report (charts and tables, no network needed) over one run or many."""
    from .output import refuse_overwrite
    from .report import report as do_report
    from .store.remote import opened

    refuse_overwrite([out], inputs)
    _local_executor(inputs, executor)
    with _ctrl_c(f"{out} was not written"), _progress() as bar, opened(inputs) as local:
        task = bar.add_task("report", total=None)

        def progress(done: int, total: int, run: str, error: str | None) -> None:
            bar.update(task, completed=done, total=total, description=f"report: run {run}")
            if error is not None:
                _say(bar, f"traceql: skipped run {run}: {error}")

        result = stopping.run(lambda: do_report(local, out, recipe=recipe, on_error=on_error.value,
                                                progress=progress, executor=executor), f"{out} was not written")
    typer.echo(f"traceql: report of {result.runs_text()}, {len(result.skipped)} skipped, "
               f"in {result.seconds:.1f} s", err=True)
    typer.echo(str(out))
    if result.skipped:
        raise typer.Exit(EXIT_BAD_INPUT)


@app.command()
def export(
    inputs: Annotated[list[str], typer.Argument(help="Run directories (paths or URLs), nsys exports or .nsys-rep "
                                                     "reports.", show_default=False)],
    perfetto: Annotated[Path, typer.Option("--perfetto", help="The Perfetto trace to write (protobuf, e.g. "
                                                              "out.pftrace; open it at ui.perfetto.dev).",
                                           show_default=False)],
    api: Annotated[bool, typer.Option(help="Export the CUDA API calls, with a flow from each launch to its "
                                           "activity.")] = True,
) -> None:
    """Write the GPU streams, CPU threads, NVTX ranges and GPU metrics as a Perfetto trace, with traceql's findings
    (slowdown, class and predicted parts per activity, waits for late ranks as flows) on them (docs/perfetto.md)."""
    from .output import check_target, refuse_overwrite
    from .perfetto import export_perfetto
    from .store.remote import opened

    refuse_overwrite([perfetto], inputs)
    check_target(perfetto)  # before the work, not after it
    with _ctrl_c(f"{perfetto} was not written"), _progress() as bar, opened(inputs) as local:
        task = bar.add_task("export", total=None)
        summary = stopping.run(lambda: export_perfetto(
            local, perfetto, api=api, progress=lambda step: bar.update(task, description=f"export: {step}")),
            f"{perfetto} was not written")
    typer.echo(f"traceql: {summary.text()}", err=True)
    typer.echo(str(perfetto))


@app.command("paper")
def paper_cmd(
    inputs: Annotated[list[Path], typer.Argument(help="Run directories (or traces, ingested first) whose NVTX ranges "
                                                      "mark the modes (docs/paper.md).", show_default=False)],
    fmt: Format = TableFormat.table,
    table: Annotated[str | None, typer.Option(help="Only this table: headline, configs, modes or breakdown (csv: "
                                                   "headline unless given).")] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write here instead of stdout.")] = None,
    on_error: OnError = OnErrorChoice.raise_,
) -> None:
    """The overlap characterization of Lee et al. (ISPASS 2025): compute slowdown overlapped against compute only
    and against sequential, sequential over overlapped, communication slowdown, overlap efficiency, energy and
    power per mode, all with 95% intervals; and the cause of each configuration's slowdown."""
    from .output import check_target, refuse_overwrite
    from .paper import TABLES
    from .paper import paper as do_paper
    from .paper.text import render

    if fmt not in ("table", "json", "csv"):
        raise TraceqlErrorUsage(f"--format {fmt!r}: choose table, json or csv")
    if table is not None and table not in TABLES:
        raise TraceqlErrorUsage(f"--table {table!r}: choose {', '.join(TABLES)}")
    refuse_overwrite([output], inputs)
    if output is not None:  # before the work, not after it
        check_target(output)
    result = stopping.run(lambda: do_paper(inputs, on_error=on_error), "nothing was written")
    text = render(result, fmt, table)
    if output is None:
        sys.stdout.write(text)
    else:
        from .paper import write_text

        write_text(output, text)
        typer.echo(str(output))
    for s in result.skipped:
        _err(f"skipped run {s['run']} ({s['run_id']}): {s['reason']}")
    if result.skipped:
        raise typer.Exit(EXIT_BAD_INPUT)


@app.command("advise")
def advise_cmd(
    inputs: Annotated[list[Path], typer.Argument(help="Run directories (or traces, ingested first) whose NVTX ranges "
                                                      "mark the overlap experiment's modes (docs/paper.md).",
                                                 show_default=False)],
    ctas: Annotated[str, typer.Option(help="NCCL_MAX_CTAS values to predict, comma-separated.")] = "1,2,4,8,16,32",
    group_by_nvtx: Annotated[str | None, typer.Option(
        help="Predict per step of the NVTX ranges matching this glob (e.g. 'step*'), as attribute groups them, "
             "instead of per configuration of the overlap experiment.")] = None,
    fmt: Format = TableFormat.table,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write here instead of stdout.")] = None,
) -> None:
    """Which schedule of each GEMM-and-collective region (overlapped as traced, sequential, or overlapped with NCCL
    limited to k CTAs): each one's predicted iteration time with its calibrated band, and the recommended one; with
    --group-by-nvtx, each training step's time under NCCL_MAX_CTAS k (docs/advise.md)."""
    from .advise import advise as do_advise
    from .advise import render
    from .output import check_target, refuse_overwrite

    try:
        ks = [int(k) for k in ctas.split(",") if k.strip()]
    except ValueError:
        raise TraceqlErrorUsage(f"--ctas {ctas!r}: give whole numbers, comma-separated") from None
    refuse_overwrite([output], inputs)
    if output is not None:
        check_target(output)
    result = stopping.run(lambda: do_advise(inputs, ctas=ks, group_by_nvtx=group_by_nvtx), "nothing was written")
    text = render(result, fmt)
    if output is None:
        sys.stdout.write(text)
    else:
        from .paper import write_text

        write_text(output, text)
        typer.echo(str(output))


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)


def _progress():
    """A progress bar on stderr (a spinner while the total is unknown), gone when done; nothing at all when stderr is
    not a terminal (a log file, a pipe)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = _stderr_console()
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), transient=True, console=console, disable=not console.is_terminal)


def _say(bar, line: str) -> None:
    """A line on stderr above a live progress bar, as it is (no markup, no wrapping, control characters escaped)."""
    from .plain import cell

    bar.console.print(cell(line), soft_wrap=True)


@app.command(context_settings={"allow_interspersed_args": False})
def collect(
    cmd: Annotated[list[str], typer.Argument(help="The program and its arguments, after --.", show_default=False)],
    out: Annotated[Path, typer.Option("-o", "--out", help="Run store to add the run to.")] = Path("traceql-runs"),
    name: Annotated[str | None, typer.Option(help="Report name (default: run-DATE-TIME); %q{VAR} and %h expand "
                                                  "as in nsys -o, e.g. rank%q{SLURM_PROCID}.")] = None,
    gpu_metrics: Annotated[bool | None, typer.Option(help="Sample GPU metrics (SMs, DRAM, clocks, links) at 10 kHz; "
                                                          "on by default where a GPU is found (said when not).",
                                                     show_default=False)] = None,
    power: Annotated[bool, typer.Option(help="Sample NVML power, energy, clocks and throttle reasons every 15 ms.")]
    = False,
    ncu: Annotated[bool, typer.Option(help="Run Nsight Compute instead (isolated-kernel counters).")] = False,
    nsys_args: Annotated[str, typer.Option(help="Extra nsys profile flags, as one string.")] = "",
    ncu_args: Annotated[str, typer.Option(help="--ncu: extra ncu flags, as one string, e.g. "
                                               "'--launch-skip 20 --launch-count 50'.")] = "",
    timeout: Annotated[float | None, typer.Option(help="End the program after this many seconds.")] = None,
    kernels: Annotated[str | None, typer.Option(help="--ncu: profile kernels whose function name matches this "
                                                     "regex (collectives are never profiled).")] = None,
    nvtx_include: Annotated[str | None, typer.Option(help="--ncu: only kernels inside this NVTX range, "
                                                          "e.g. 'profile/'.")] = None,
    clock_control: Annotated[ClockControl, typer.Option(help="--ncu: ncu --clock-control (none keeps the GPU's own "
                                                             "clocks).")] = ClockControl.none,
    label: Annotated[list[str], typer.Option(help="KEY=VALUE label for the run (repeatable).")] = [],  # noqa: B006
) -> None:
    """Run a program under Nsight Systems (or Nsight Compute) and ingest the result.

    traceql collect -- torchrun --nproc-per-node 8 train.py

    Exit code: the program's; 124 if --timeout ended it, 130 on Ctrl-C (report kept); 2 bad input.
    """

    from .collect import collect as do_collect

    result = do_collect(cmd, out, name=name, gpu_metrics=gpu_metrics, power=power, ncu=ncu,
                        nsys_args=_split_args("--nsys-args", nsys_args), timeout=timeout, labels=_parse_labels(label),
                        kernels_regex=kernels, nvtx_include=nvtx_include, clock_control=clock_control.value,
                        ncu_args=_split_args("--ncu-args", ncu_args), log=lambda line: typer.echo(line, err=True),
                        step=_step)
    for msg in result.messages:
        _err(msg)
    raise typer.Exit(result.exit_code)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench(
    ctx: typer.Context,
    name: Annotated[Benchmark, typer.Argument(help="The benchmark.", case_sensitive=False)],
    out: Annotated[Path, typer.Option("-o", "--out", help="Run store to add the run to.")] = Path("traceql-runs"),
    gpu_metrics: Annotated[bool, typer.Option(help="Sample GPU metrics.")] = True,
    power: Annotated[bool, typer.Option(help="Sample NVML power.")] = False,
    timeout: Annotated[float | None, typer.Option(help="End the benchmark after this many seconds.")] = None,
    run_name: Annotated[str | None, typer.Option("--name", help="Report name.")] = None,
) -> None:
    """Run one of traceql's microbenchmarks under `traceql collect`; extra options go to the benchmark."""
    import datetime as dt

    from .collect import collect as do_collect

    name = name.value

    # The benchmarks mark their measured part with cudaProfilerStart/Stop: capture only that.
    cmd = [*_collector_cmd(name), "--profile-range", *ctx.args]
    result = do_collect(cmd, out, name=run_name or f"{name}-{dt.datetime.now():%Y%m%d-%H%M%S}",
                        gpu_metrics=gpu_metrics, power=power, timeout=timeout, labels={"bench": name},
                        nsys_args=["--capture-range=cudaProfilerApi", "--capture-range-end=stop"],
                        log=lambda line: typer.echo(line, err=True), step=_step)
    for msg in result.messages:
        _err(msg)
    raise typer.Exit(result.exit_code)


@contextlib.contextmanager
def _step(what: str) -> Iterator[None]:
    """One step of collect after the program (the export and ingest of its report), with a spinner."""
    with _progress() as bar:
        bar.add_task(what, total=None)
        yield


def _collector_cmd(name: str) -> list[str]:
    """How to start a bundled benchmark: as an installed module, or from a source checkout."""
    import importlib.util

    try:
        if importlib.util.find_spec(f"traceql.collectors.{name}") is not None:
            return [sys.executable, "-m", f"traceql.collectors.{name}"]
    except ModuleNotFoundError:
        pass
    return [sys.executable, str(Path(__file__).resolve().parent.parent / "collectors" / f"{name}.py")]


@app.command("schema")
def schema_cmd() -> None:
    """List the run store's tables and columns (schema v1), then the analysis views SQL can query."""
    from .queries_loader import header_columns, query_files
    from .store import schema as s

    for name, sch in s.TABLES.items():
        typer.echo(f"{name}: {s.DESCRIPTIONS[name]}")
        for f in sch:
            typer.echo(f"  {f.name:<24} {f.type}")
        if name in s.WIDE:  # stored wide (the view NAME_wide); the view NAME is long
            typer.echo(f"  {'<a column per metric>':<24} {s.WIDE[name]}  (stored: the view {name}_wide)")
            typer.echo(f"  as the view {name}: " + ", ".join(f"{f.name} {f.type}" for f in s.LONG[name]))
    typer.echo("\nanalysis views (queries/; helpers starting with _ are left out):")
    for file, sql in query_files():
        if file.startswith("_"):
            continue
        first = sql.splitlines()[0].removeprefix("--").strip()
        typer.echo(f"{first}")
        for col, typ in header_columns(sql):
            typer.echo(f"  {col:<24} {typ}")


def _split_args(option: str, text: str) -> list[str]:
    """A string of extra flags, split as a shell would; unbalanced quotes are a usage error naming the option."""
    import shlex

    try:
        return shlex.split(text)
    except ValueError as exc:
        raise TraceqlErrorUsage(f"{option} {text!r}: {exc}; quote it as a shell would") from None


def _parse_labels(items: list[str]) -> dict[str, str]:
    labels = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise TraceqlErrorUsage(f"label {item!r} is not KEY=VALUE")
        labels[key] = value
    return labels


class TraceqlErrorUsage(TraceqlError, ValueError):
    pass


def _click_errors() -> tuple[type[Exception], ...]:
    """The usage errors of the parser: typer's own (it carries a click of its own since 0.2x), or click's."""
    errors: tuple[type[Exception], ...] = ()
    if hasattr(typer, "TyperException"):
        errors += (typer.TyperException,)
    with contextlib.suppress(ImportError):
        import click

        errors += (click.ClickException,)
    return errors


def _ctrl_c_anywhere() -> None:
    """Ctrl-C anywhere in a command, past its own handlers (while it prints, say), is :class:`Interrupted`: one line
    and exit code 130, where typer would turn it into the exit code alone, silently."""
    def interruptible(fn):
        @functools.wraps(fn)
        def command(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except KeyboardInterrupt:
                raise Interrupted("interrupted") from None
        return command

    for info in app.registered_commands:
        info.callback = interruptible(info.callback)


_ctrl_c_anywhere()


def main() -> None:
    """Entry point: map traceql errors to their exit codes without tracebacks."""
    try:
        with stopping.on_sigterm():  # SIGTERM stops the work as Ctrl-C does (exit 143), workers and all
            rc = app(standalone_mode=False)
    except (TraceqlError, Terminated) as exc:
        _err(str(exc))
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        _err("interrupted")
        sys.exit(130)
    except _click_errors() as exc:  # usage errors, raised by the click that typer carries
        if type(exc).__name__ != "NoArgsIsHelpError" and hasattr(exc, "show"):  # help was printed already
            exc.show()
        sys.exit(EXIT_BAD_INPUT)
    except _out_of_memory() as exc:
        _err(_out_of_memory_text(exc))
        sys.exit(EXIT_BAD_INPUT)
    sys.exit(rc if isinstance(rc, int) else 0)


def _out_of_memory() -> tuple[type[Exception], ...]:
    import duckdb  # only once something failed: the other commands need not import it

    return (duckdb.OutOfMemoryException, MemoryError)


def _out_of_memory_text(exc: Exception) -> str:
    from .duck import MEMORY_LIMIT_ENV, memory_limit  # duck imports duckdb: only once something failed

    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    limit = memory_limit()
    advice = (f"{MEMORY_LIMIT_ENV}={limit} is too small for this work: raise it (DuckDB's tables spill to disk past "
              "it)" if limit else
              f"set {MEMORY_LIMIT_ENV} (e.g. 4GB) below the memory this machine has free, so that DuckDB's tables "
              "spill to disk, or analyse fewer runs at a time")
    return f"out of memory: {first}; {advice}"


def console() -> None:
    """The ``traceql`` program (console script, ``python -m traceql[.cli]``): :func:`main`, then Ctrl-C ignored while
    Python exits. The command's output is complete by then; a SIGINT landing in the interpreter's shutdown (joining
    threads) would only print a traceback after it."""
    import signal

    try:
        main()
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


if __name__ == "__main__":
    console()
