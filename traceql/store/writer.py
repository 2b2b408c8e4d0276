"""The run writer: what a run records of itself (``RunInfo``) and the streamed Parquet writing of its tables."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from . import digests, schema

RUN_INFO = "run.json"  # what a run records of itself, written last: a run folder with one is complete


@dataclass
class RunInfo:
    run_id: str
    source_path: str
    sha256: str
    format: str
    tables: dict[str, int] = field(default_factory=dict)
    already: bool = False
    warnings: list[str] = field(default_factory=list)
    repairs: dict[str, int] = field(default_factory=dict)  # odd rows dropped at ingest, by table.reason (screen.py)
    labels: dict[str, str] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)  # bytes of each table's file, as written
    digests: dict[str, str] = field(default_factory=dict)  # sha256 of each table's file, as written (digests.py)
    # the own columns of each WIDE table's file (GPU metrics' names), as written: opening a store of many runs reads
    # these, not every file's footer
    columns: dict[str, list[str]] = field(default_factory=dict)
    # tables left to be read from the export when a query needs them (a lazy ingest), and that export's stamp
    deferred: list[str] = field(default_factory=list)
    export: dict = field(default_factory=dict)  # path, bytes, mtime_ns

    def manifest_entry(self) -> dict:
        """What the run store's manifest records of the run."""
        return {k: v for k, v in asdict(self).items() if k not in ("already", "warnings")}


def finish_run(folder: Path, info: RunInfo) -> None:
    """Record the size and sha256 of every table file in ``folder`` and write the run's ``run.json``, last: a run
    folder with its ``run.json`` is complete, and a file of another size than recorded has its footer checked when the
    store is opened, a file of other bytes is refused (:mod:`traceql.store.digests`). A table whose file ``folder``
    lacks keeps the size and sha256 ``info`` records (a local copy of part of a run at a URL, which
    ``remote.migrate`` rewrites)."""
    info.files = {table: (folder / f"{table}.parquet").stat().st_size if (folder / f"{table}.parquet").is_file()
                  else info.files[table] for table in info.tables
                  if (folder / f"{table}.parquet").is_file() or table in info.files}
    info.digests = {table: file_digest(folder / f"{table}.parquet") if (folder / f"{table}.parquet").is_file()
                    else info.digests[table] for table in info.tables
                    if (folder / f"{table}.parquet").is_file() or table in info.digests}
    info.columns = {**{t: c for t, c in info.columns.items() if t in schema.WIDE},
                    **{t: own_columns(folder / f"{t}.parquet", t) for t in schema.WIDE
                       if (folder / f"{t}.parquet").is_file()}}
    write_run_json(folder, asdict(info))


def file_digest(path: Path) -> str:
    """The sha256 of a table file just written, noted as checked (the host that wrote it does not hash it again)."""
    found = digests.sha256(path)
    digests.remember(path, found)
    return found


def write_run_json(folder: Path, info: dict) -> None:
    """``folder``'s ``run.json``, whole or not at all: written under a name of its own (a dot file, which readers pass
    over), then renamed over the one before. An interruption leaves the previous ``run.json`` as it was: a run folder
    whose ``run.json`` is written is complete, so a half-written one would pass for a damaged run."""
    part = folder / f".{RUN_INFO}.{os.getpid()}.part"
    try:
        part.write_text(json.dumps(info, indent=2))
        os.replace(part, folder / RUN_INFO)
    finally:
        part.unlink(missing_ok=True)


# the order of a kernels file: by device and time (a sweep reads each device's kernels in one pass), then the ids
# that make it total, so that one input always gives the same file
KERNEL_ORDER = [("device_id", "ascending"), ("start_ns", "ascending"), ("end_ns", "ascending"),
                ("global_pid", "ascending"), ("stream_id", "ascending"), ("correlation_id", "ascending")]
# the order of each table's file where it has one: API calls by thread and time (stable: ties keep the export's order)
ORDERS = {"kernels": KERNEL_ORDER, "runtime_api": [("global_tid", "ascending"), ("start_ns", "ascending")],
          "memcpy": [("device_id", "ascending"), ("start_ns", "ascending")],
          "memset": [("device_id", "ascending"), ("start_ns", "ascending")]}


ROW_GROUP = 1 << 18  # rows: a streamed table's row groups hold at least this many (but the last)


def write_streamed(table: str, batches, run_id: str, path: Path) -> int:
    """Write ``batches`` as they come, so that a table of any size takes the memory of a few batches.

    String columns are written dictionary-encoded (run_id always; others when the batches bring them so,
    as gpu_metrics' metric names): Parquet stores them as dictionary pages either way, but no string is then
    copied or hashed per row. The file stores no Arrow schema, which would make readers return dictionaries:
    it reads back with the plain types of the schema, and carries the schema version like every other file.
    """
    target = schema.TABLES[table]
    encoded = pa.schema([pa.field(f.name, pa.dictionary(pa.int32(), f.type)) if f.type == pa.string() else f
                         for f in target])
    run_ids = pa.array([run_id], pa.string())
    rows = 0
    # Dictionary pages for the strings only, and min/max statistics for the integer columns only (times, ids:
    # what readers prune row groups by): measured values and the interleaved names gain nothing from either,
    # and on 13 M GPU-metric samples they cost 40% of the write.
    with pq.ParquetWriter(path, encoded, compression="zstd", store_schema=False,
                          use_dictionary=[f.name for f in target if f.type == pa.string()],
                          write_statistics=[f.name for f in target if pa.types.is_integer(f.type)]) as w:
        held: list[pa.RecordBatch] = []  # small batches are written together, as row groups of ROW_GROUP rows or more
        for batch in batches or ():
            if batch.num_rows == 0:
                continue
            cols = [pa.DictionaryArray.from_arrays(pa.repeat(pa.scalar(0, pa.int32()), batch.num_rows), run_ids)
                    if f.name == "run_id" else as_encoded(batch.column(f.name), f.type) for f in encoded]
            held.append(pa.RecordBatch.from_arrays(cols, schema=encoded))
            rows += batch.num_rows
            if sum(b.num_rows for b in held) >= ROW_GROUP:
                w.write_table(pa.Table.from_batches(held, schema=encoded), row_group_size=1 << 30)
                held = []
        if held:
            w.write_table(pa.Table.from_batches(held, schema=encoded), row_group_size=1 << 30)
        w.add_key_value_metadata(schema.metadata(table))
    return rows


def own_columns(path: Path, table: str) -> list[str]:
    """The columns of a WIDE table's file beyond the declared ones (GPU metrics' names), from its footer."""
    return [n for n in pq.read_schema(path).names if n not in schema.TABLES[table].names]


def as_encoded(col: pa.Array, type_: pa.DataType) -> pa.Array:
    if not pa.types.is_dictionary(type_):
        return col.cast(type_)
    if not pa.types.is_dictionary(col.type):
        col = col.cast(type_.value_type).dictionary_encode()
    return col.cast(type_)
