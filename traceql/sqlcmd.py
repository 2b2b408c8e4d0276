"""``traceql sql``: run a query over run directories and render the result."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import TextIO

import duckdb
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from .analysis import needs_prepare, prepare
from .errors import BadInputError, UsageError
from .store import connect

FORMATS = ("table", "csv", "json", "parquet")


def query(run_dirs: list[Path], sql: str) -> pa.Table:
    con = connect(run_dirs)
    try:
        if needs_prepare(sql):  # the views over baselines need them computed first
            prepare(con)
        return con.sql(sql).to_arrow_table()
    except duckdb.Error as exc:
        raise BadInputError(f"query failed: {exc}") from exc
    finally:
        con.close()


def run_sql(run_dirs: list[Path], sql: str, fmt: str, output: Path | None, stdout: TextIO) -> None:
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if fmt == "parquet" and output is None:
        raise UsageError("--format parquet needs -o FILE")
    result = query(run_dirs, sql)
    if fmt == "parquet":
        pq.write_table(result, output)
        return
    if fmt == "csv":
        sink = pa.BufferOutputStream()
        pacsv.write_csv(_flat(result), sink)
        text = sink.getvalue().to_pybytes().decode()
    elif fmt == "json":
        text = json.dumps(result.to_pylist(), default=str, indent=1) + "\n"
    else:
        text = render_table(result)
    if output:
        output.write_text(text)
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
        t.add_column(name, overflow="fold")
    for row in table.slice(0, max_rows).to_pylist():
        t.add_row(*("NULL" if v is None else str(v) for v in row.values()))
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(t)
    text = buf.getvalue()
    if table.num_rows > max_rows:
        text += f"({table.num_rows} rows, {max_rows} shown; use --format csv for all)\n"
    return text
