"""The ``traceql`` command line: each command converts arguments, calls one library function, renders.

Exit codes (see :mod:`traceql.errors`): 0 ok, 1 flagged by a gate, 2 bad usage or bad input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from . import __version__
from .errors import EXIT_BAD_INPUT, TraceqlError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Attribute the slowdown of compute kernels overlapped with communication, from Nsight traces.")

RunDirs = Annotated[list[Path], typer.Argument(help="Run directories made by `traceql ingest`.", show_default=False)]
OnError = Annotated[str, typer.Option(help="What to do with a bad input among many: raise (stop) or skip (go on, "
                                           "naming it).", case_sensitive=False)]


def _err(msg: str) -> None:
    typer.echo(f"traceql: {msg}", err=True)


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False) -> None:
    if version:
        typer.echo(__version__)
        raise typer.Exit(0)


@app.command()
def ingest(
    traces: Annotated[list[Path], typer.Argument(help="nsys .sqlite exports, parquetdir exports or .nsys-rep reports.",
                                                 show_default=False)],
    out: Annotated[Path, typer.Option("-o", "--out", help="Run directory to create or add to.")],
    allow_no_kernels: Annotated[bool, typer.Option(help="Ingest traces without CUDA kernels (NVTX/OS data only).")]
    = False,
    label: Annotated[list[str], typer.Option(help="KEY=VALUE label recorded with each run (repeatable).")] = [],  # noqa: B006
    jobs: Annotated[int, typer.Option("-j", "--jobs", help="Traces ingested in parallel.")] = 1,
    on_error: OnError = "raise",
) -> None:
    """Normalize Nsight Systems exports into a run directory of Parquet tables (schema v1)."""
    from .ingest import ingest as do_ingest

    labels = _parse_labels(label)
    failed: list[str] = []

    def progress(result, trace: Path) -> None:
        if isinstance(result, Exception):
            failed.append(str(trace))
            if on_error == "skip":  # with raise, main() prints the error once
                _err(f"skipped: {result}")
            return
        state = "already ingested" if result.already else "ingested"
        counts = ", ".join(f"{k} {v}" for k, v in sorted(result.tables.items()) if k != "runs" and v)
        typer.echo(f"{state} {trace} as run {result.run_id} ({counts})", err=True)

    do_ingest(traces, out, require_kernels=not allow_no_kernels, labels=labels, jobs=jobs, on_error=on_error,
              progress=progress)
    typer.echo(str(out))
    if failed:
        raise typer.Exit(EXIT_BAD_INPUT)


@app.command()
def sql(
    run_dirs: RunDirs,
    query: Annotated[str, typer.Option("-q", "--query", help="SQL to run; or give it as the last argument.")] = "",
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, csv, json or parquet.")] = "table",
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write here instead of stdout.")] = None,
) -> None:
    """Run SQL over one or more run directories: one view per table, rows tagged with run_id.

    The query is the last argument (or -q): `traceql sql RUN "SELECT count(*) FROM kernels"`.
    """
    from .sqlcmd import run_sql

    if not query:
        if len(run_dirs) < 2:
            raise TraceqlErrorUsage("give a query: traceql sql RUN_DIR... \"SELECT ...\"")
        *dirs, query = run_dirs
        run_dirs, query = dirs, str(query)
    run_sql(run_dirs, query, fmt, output, sys.stdout)


@app.command("schema")
def schema_cmd() -> None:
    """List the run store's tables and columns (schema v1)."""
    from . import schema as s

    for name, sch in s.TABLES.items():
        typer.echo(f"{name}: {s.DESCRIPTIONS[name]}")
        for f in sch:
            typer.echo(f"  {f.name:<24} {f.type}")


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


def main() -> None:
    """Entry point: map traceql errors to their exit codes without tracebacks."""
    try:
        app(standalone_mode=False)
    except TraceqlError as exc:
        _err(str(exc))
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        _err("aborted")
        sys.exit(130)
    except Exception as exc:  # click usage errors
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(EXIT_BAD_INPUT)
        raise
    sys.exit(0)


if __name__ == "__main__":
    main()
