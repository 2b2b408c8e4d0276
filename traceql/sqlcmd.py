"""``traceql sql``: run a query over run directories and render the result."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import TextIO

import duckdb
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from . import duck, stopping
from .attribution import needs_prepare, prepare
from .errors import BadInputError, Interrupted, UsageError
from .output import check_target, json_safe, replacing
from .plain import cell
from .queries_loader import IDENTIFIER, identifiers, query_files
from .store import connect, lock_files, schema

FORMATS = ("table", "csv", "json", "parquet")


def query(run_dirs: list[Path], sql: str, *, allow_files: bool = False) -> pa.Table:
    """The result of ``sql`` over the run directories' tables (and the analysis views).

    Unless ``allow_files``, the query can read the store's tables through their views and nothing else: no file
    is read, written or listed (see :func:`traceql.store.lock_files`). Ctrl-C stops the work within moments
    (:class:`traceql.errors.Interrupted` is raised once DuckDB has stopped).
    """
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise BadInputError(f"query failed: {exc}") from exc
    if not statements:
        raise UsageError(f"no SQL statement in {sql!r}: give a query, e.g. traceql sql RUN_DIR \"SELECT ...\"")

    def work() -> pa.Table:
        con = duck.connect()
        try:
            prepared = needs_prepare(sql)
            connect(run_dirs, con, views=needs_views(sql), needs=None if prepared else needed_tables(sql))
            if prepared:  # the views over baselines need them computed first
                prepare(con)
            if not allow_files:
                lock_files(con)
            result = con.sql(sql)
            return pa.table({}) if result is None else result.to_arrow_table()  # SET, CREATE...: no rows
        except duckdb.PermissionException as exc:
            raise BadInputError(f"query refused: {exc}; SQL reads the run store's tables and views only (give "
                                "--allow-files to let it read and write files)") from exc
        except duckdb.InterruptException:
            raise Interrupted("interrupted; the query was stopped") from None
        except duckdb.Error as exc:
            raise BadInputError(f"query failed: {exc}") from exc
        finally:
            con.close()

    return stopping.run(work, "the query was stopped")


def needs_views(sql: str) -> bool:
    """Whether ``sql`` names a view of ``queries/`` (creating them all costs seconds; a query of the tables alone
    does without)."""
    return any(re.search(rf"\b{re.escape(name.removesuffix('.sql'))}\b", sql, re.IGNORECASE)
               for name, _ in query_files())


def needed_tables(sql: str) -> set[str]:
    """The store's tables that ``sql`` reads, itself or through the views of ``queries/`` it names: a lazily ingested
    run's other tables stay in its export (:func:`traceql.store.connect`'s ``needs``)."""
    views = {name.removesuffix(".sql"): text for name, text in query_files()}

    def words(names: set[str]) -> set[str]:  # SQL names are case-insensitive
        return {w.lower() for w in names}

    # the user's SQL whole (a '--' may sit inside a string); the views without their comments
    todo, seen, tables = words(set(IDENTIFIER.findall(sql))), set(), set()
    while todo:
        name = todo.pop()
        if name in schema.TABLES:
            tables.add(name)
        elif name in views and name not in seen:
            seen.add(name)
            todo |= words(identifiers(views[name]))
    return tables


def run_sql(run_dirs: list[Path], sql: str, fmt: str, output: Path | None, stdout: TextIO, *,
            allow_files: bool = False) -> None:
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if fmt == "parquet" and output is None:
        raise UsageError("--format parquet needs -o FILE")
    if output is not None:
        check_target(output)
    result = query(run_dirs, sql, allow_files=allow_files)
    if fmt == "parquet":
        with replacing(output) as tmp:
            pq.write_table(result, tmp)
        return
    if fmt == "csv":
        sink = pa.BufferOutputStream()
        pacsv.write_csv(_flat(result), sink)
        text = sink.getvalue().to_pybytes().decode()
    elif fmt == "json":
        text = json.dumps(json_safe(result.to_pylist()), default=str, indent=1, allow_nan=False) + "\n"
    else:
        text = render_table(result)
    if output:
        with replacing(output) as tmp:
            tmp.write_text(text)
    else:
        stdout.write(text)


def _flat(table: pa.Table) -> pa.Table:
    """CSV has no nested values: lists, maps and structs become JSON text."""
    for i, field in enumerate(table.schema):
        if pa.types.is_nested(field.type):
            text = [None if v is None else json.dumps(v, default=str) for v in table.column(i).to_pylist()]
            table = table.set_column(i, pa.field(field.name, pa.string()), pa.array(text, pa.string()))
    return table


def render_table(table: pa.Table, max_rows: int = 200) -> str:
    from rich.console import Console
    from rich.table import Table

    t = Table(show_lines=False)
    for name in table.column_names:
        t.add_column(cell(name), overflow="fold")
    for row in table.slice(0, max_rows).to_pylist():
        t.add_row(*(cell("NULL" if v is None else v) for v in row.values()))
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(t)
    text = buf.getvalue()
    if table.num_rows > max_rows:
        text += f"({table.num_rows} rows, {max_rows} shown; use --format csv for all)\n"
    return text
