"""``traceql overlap``: per GPU, how long compute and communication ran alone, together and not at all.

The first question about a trace of distributed training, answered from its kernels and peer copies alone. A raw
trace is read a few columns at a time (:func:`traceql.ingest.read_intervals`: nothing is written); with a folder to
keep, it is ingested lazily instead: its API calls, NVTX ranges and GPU metrics stay in the export until a query
needs them (``traceql attribute`` on the same run directory reads them then). The unions are exact integer sweeps
(:func:`traceql.engine.device_unions`), the result is the ``device_overlap`` view of ``queries/``.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow as pa

from . import duck, engine, store
from .attribution.result import input_paths
from .errors import BadInputError
from .executor import parse as parse_executor
from .ingest import DEFERRABLE, ingest, read_intervals
from .ingest.ncu import is_ncu_report
from .queries_loader import create_views
from .store import schema

# the tables the overlap numbers read: a lazily ingested run's other tables stay in its export
NEEDS = ("runs", "devices", "processes", "kernels", "memcpy", "memset")


def overlap(inputs: Sequence[str | Path] | str | Path, *, workdir: str | Path | None = None,
            executor: str | None = None) -> pa.Table:
    """The ``device_overlap`` rows of ``inputs`` (run directories, nsys exports, .nsys-rep reports), one per run and
    device. Raw traces are ingested lazily into ``workdir`` (kept: a run directory to query or attribute later), or
    into a temporary directory."""
    paths = input_paths(inputs)
    for p in paths:
        if not p.exists():
            raise BadInputError(f"{p}: no such file or run directory")
        if is_ncu_report(p):
            raise BadInputError(f"{p}: an Nsight Compute report has no timeline; give an Nsight Systems trace")
    if workdir is None and not any(store.is_store(p) for p in paths):
        return _checked(_from_traces(paths), paths)
    with (tempfile.TemporaryDirectory(prefix="traceql-overlap-") if workdir is None
          else contextlib.nullcontext(str(workdir))) as folder:
        dirs = [p for p in paths if store.is_store(p)]
        runs = {rid for d in dirs for rid in store.read_manifest(d)["runs"]}
        if raw := [p for p in paths if not store.is_store(p)]:  # the runs of these inputs only, not all of folder's
            runs |= {info.run_id for info in ingest(raw, folder, executor=parse_executor(executor), defer=DEFERRABLE)}
            dirs.append(Path(folder))
        con = store.connect(dirs, needs=NEEDS, run_ids=runs, views=False)
        try:
            create_views(con, only=["_union_intervals"])
            return _checked(device_overlap(con), paths)
        finally:
            con.close()


def device_overlap(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """``device_overlap`` over the runs of ``con`` (a :func:`traceql.connect` connection), its unions swept by the
    engine, with each run's source path."""
    engine.device_unions(con)
    create_views(con, only=["device_overlap"])  # where con has only the tables the unions read
    return con.sql("SELECT o.*, r.source_path FROM device_overlap o LEFT JOIN runs r USING (run_id) "
                   "ORDER BY run_id, device_id").to_arrow_table()


def _checked(table: pa.Table, paths: list[Path]) -> pa.Table:
    if table.num_rows == 0:
        raise BadInputError(f"{', '.join(map(str, paths))}: no CUDA kernels in the input; collect with "
                            "`nsys profile -t cuda` (or `traceql collect`)")
    return table


def _as_stored(table: str, rows: pa.Table) -> pa.Table:
    """``rows`` with the store's types for ``table`` (an export may give a column as int32 that another gives as int64:
    the traces' tables are concatenated)."""
    stored = schema.TABLES[table]
    return rows.cast(pa.schema([pa.field(f.name, stored.field(f.name).type if f.name in stored.names else f.type)
                                for f in rows.schema]))


def _from_traces(paths: list[Path]) -> pa.Table:
    """Traces only, nothing kept: the columns the unions read, straight from each export into DuckDB (the same
    rows, screened alike, as a run directory's; the same views over them)."""
    runs, tables = [], {"kernels": [], "memcpy": []}
    for p in paths:
        info, data = read_intervals(p)
        if info.run_id in (r["run_id"] for r in runs):
            print(f"traceql: note: {p} is a trace given before; it is read once", file=sys.stderr)
            continue
        runs.append({"run_id": info.run_id, "source_path": info.source_path})
        for table, rows in data.items():
            tables[table].append(rows)
    con = duck.connect()
    try:
        for table, parts in tables.items():
            con.register(f"_read_{table}", pa.concat_tables([_as_stored(table, t) for t in parts]))
            con.execute(f'CREATE VIEW "{table}" AS SELECT * FROM "_read_{table}"')
        con.register("_read_runs", pa.Table.from_pylist(runs))
        con.execute('CREATE VIEW runs AS SELECT * FROM "_read_runs"')
        create_views(con, only=["_union_intervals"])
        return device_overlap(con)
    finally:
        con.close()
