"""The normalized run store schema (v1), declared once.

Every table is an Arrow schema here; Parquet files carry ``traceql.schema_version`` and
``traceql.table`` in their key-value metadata, and readers refuse versions they do not know.
Times are int64 nanoseconds on the trace's own timeline; units end column names.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import BadInputError, SchemaVersionError
from .signature import PARTS, signature_ids

SCHEMA_VERSION = 1
META_VERSION = b"traceql.schema_version"
META_TABLE = b"traceql.table"

i32, i64, f64, s, b, u64 = pa.int32(), pa.int64(), pa.float64(), pa.string(), pa.bool_(), pa.uint64()


def _schema(*fields: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field(n, t) for n, t in fields])


_ids = (("global_pid", i64), ("device_id", i32), ("cuda_device", i32), ("context_id", i64),
        ("stream_id", i64), ("correlation_id", i64))
_interval = (("start_ns", i64), ("end_ns", i64), ("dur_ns", i64))
_ncu_kernel = (("kernel_id", i64), ("range_id", i32), ("name", s), ("short_name", s), ("device_id", i32), ("nvtx", s),
               ("grid_x", i32), ("grid_y", i32), ("grid_z", i32), ("block_x", i32), ("block_y", i32), ("block_z", i32),
               ("static_smem_bytes", i64), ("dynamic_smem_bytes", i64))

_TABLES: dict[str, pa.Schema] = {
    "runs": _schema(
        ("run_id", s), ("source_path", s), ("source_sha256", s), ("source_bytes", i64), ("format", s),
        ("tool", s), ("tool_version", s), ("export_schema_version", s), ("host", s),
        ("session_start_utc_ns", i64), ("gpu_names", s), ("ingested_at", s), ("traceql_version", s),
        ("labels_json", s), ("repairs", pa.map_(s, i64)),
    ),
    "devices": _schema(
        ("device_id", i32), ("name", s), ("uuid", s), ("bus_id", s), ("sm_count", i32), ("l2_bytes", i64),
        ("mem_bytes", i64), ("mem_bandwidth_Bps", i64), ("clock_hz", i64), ("cc_major", i32), ("cc_minor", i32),
        ("max_smem_per_sm_bytes", i64), ("max_warps_per_sm", i32), ("max_blocks_per_sm", i32),
        ("max_regs_per_sm", i32),
    ),
    "processes": _schema(("global_pid", i64), ("pid", i64), ("name", s), ("rank", i32)),
    "kernels": _schema(
        *_ids, *_interval, ("name", s), ("short_name", s), ("grid_x", i32), ("grid_y", i32), ("grid_z", i32),
        ("block_x", i32), ("block_y", i32), ("block_z", i32), ("ctas", i64), ("threads_per_block", i32),
        ("static_smem_bytes", i64), ("dynamic_smem_bytes", i64), ("regs_per_thread", i32), ("graph_node_id", i64),
        ("kind", s), ("family", s), ("comm_op", s), ("comm_algo", s), ("comm_proto", s), ("comm_dtype", s),
        ("comm_redop", s), ("sig", u64),
    ),
    "memcpy": _schema(
        *_ids, *_interval, ("bytes", i64), ("copy_kind", s), ("src_kind", s), ("dst_kind", s),
        ("src_device_id", i32), ("dst_device_id", i32), ("is_peer", b), ("graph_node_id", i64), ("sig", u64),
    ),
    "memset": _schema(*_ids, *_interval, ("bytes", i64), ("value", i64), ("mem_kind", s), ("graph_node_id", i64),
                      ("sig", u64)),
    "nvtx": _schema(
        ("global_pid", i64), ("global_tid", i64), ("tid", i64), ("start_ns", i64), ("end_ns", i64), ("dur_ns", i64),
        ("event_type", s), ("text", s), ("domain", s), ("depth", i32), ("case_name", s),
        ("labels", pa.map_(pa.string(), pa.string())),
    ),
    "runtime_api": _schema(
        ("global_pid", i64), ("global_tid", i64), ("tid", i64), ("start_ns", i64), ("end_ns", i64), ("dur_ns", i64),
        ("name", s), ("correlation_id", i64), ("return_value", i64),
    ),
    # a stream made to wait for an event (cudaStreamWaitEvent), with the record it waits for (cudaEventRecord):
    # nsys --cuda-event-trace=true (traceql collect asks for it); empty without it
    "stream_waits": _schema(
        ("global_pid", i64), ("device_id", i32), ("stream_id", i64), ("correlation_id", i64),
        ("record_stream_id", i64), ("record_correlation_id", i64),
    ),
    # each CUDA stream's kind as created: the legacy NULL stream, a blocking stream (it waits for the NULL stream's
    # work, and the NULL stream for its), a non-blocking one; nsys's TARGET_INFO_CUDA_STREAM
    "streams": _schema(
        ("global_pid", i64), ("context_id", i64), ("stream_id", i64), ("stream_kind", s), ("priority", i32),
    ),
    # and a DOUBLE column per metric, named as nsys names it: the columns differ between runs (WIDE)
    "gpu_metrics": _schema(("device_id", i32), ("ts_ns", i64)),
    "power": _schema(
        ("device_id", i32), ("uuid", s), ("ts_ns", i64), ("power_w", f64), ("energy_j", f64), ("sm_clock_mhz", f64),
        ("mem_clock_mhz", f64), ("temp_c", f64), ("throttle_reasons", i64), ("power_limit_w", f64),
    ),
    # Nsight Compute (isolated kernel replay); see traceql/ncu/derive.py for where each ncu_kernels column comes from.
    "ncu_metrics": _schema(*_ncu_kernel, ("metric", s), ("value", f64), ("value_text", s), ("unit", s)),
    "ncu_kernels": _schema(
        *_ncu_kernel, ("workload", s), ("device_name", s), ("sm_count", i32), ("context_id", i64), ("stream_id", i64),
        ("ctas", i64), ("threads_per_block", i32), ("regs_per_thread", i32), ("duration_ns", i64),
        ("sm_throughput_pct", f64), ("memory_throughput_pct", f64), ("tensor_pipe_pct", f64),
        ("dram_bytes_read", i64), ("dram_bytes_write", i64), ("dram_throughput_pct", f64), ("dram_Bps", f64),
        ("peak_dram_Bps", f64), ("l2_hit_rate_pct", f64), ("l1_hit_rate_pct", f64), ("achieved_occupancy_pct", f64),
        ("theoretical_occupancy_pct", f64), ("ctas_per_sm", i32), ("occupancy_limiter", s), ("waves_per_sm", f64),
        ("flop_count", f64), ("flop_per_s", f64), ("arithmetic_intensity_flop_per_byte", f64),
        ("compute_peak_fraction", f64), ("dram_peak_fraction", f64), ("bound", s), ("missing", pa.list_(s)),
    ),
}

# Every row carries its run_id, so files stay self-describing when moved or merged.
TABLES: dict[str, pa.Schema] = {
    name: schema if name == "runs" else pa.schema([pa.field("run_id", s), *schema])
    for name, schema in _TABLES.items()
}

# Tables stored with columns of their own beyond the declared ones: GPU metrics, a DOUBLE column per metric (the
# metrics sampled depend on the GPU and the nsys version); readers get them long too (LONG)
WIDE = {"gpu_metrics": pa.float64()}
LONG = {"gpu_metrics": pa.schema([*TABLES["gpu_metrics"], pa.field("metric", s), pa.field("value", f64)])}

# What each table holds, for docs and `traceql schema`.
DESCRIPTIONS = {
    "runs": "one row per ingested trace: where it came from (path, sha256), the tool and export schema versions, "
            "and `repairs`: odd rows dropped at ingest, counted by table.reason (NULL in runs ingested before)",
    "devices": "one row per physical GPU (device_id is the GPU's index on its host, not a per-process ordinal)",
    "processes": "one row per process of the trace; global_pid keeps per-process ids apart across ranks",
    "kernels": "one row per kernel launch, with its launch configuration, its kind/family/comm_* class and its "
               "signature id `sig` (the same name, grid, block and dynamic shared memory: the same sig)",
    "memcpy": "one row per copy; is_peer marks GPU-to-GPU copies, which count as communication; `sig`: the same "
              "copy kind and bytes, the same id",
    "memset": "one row per memset; `sig`: the same bytes, the same id",
    "nvtx": "one row per NVTX range or mark, with its thread, nesting depth and parsed case:/key=value labels",
    "runtime_api": "one row per CUDA runtime/driver API call; correlation_id links it to its kernel or copy",
    "stream_waits": "one row per cudaStreamWaitEvent: the stream made to wait and the call's correlation_id, and the "
                    "cudaEventRecord it waits for (its stream and correlation_id); needs nsys --cuda-event-trace=true",
    "streams": "one row per CUDA stream: `stream_kind` null (the legacy default stream), blocking (created with "
               "default flags: it and the null stream wait for each other's work), non_blocking, or unknown; its "
               "priority (lower runs first)",
    "gpu_metrics": "one row per (GPU, sample, metric): nsys GPU metrics sampling, long format (a view of the stored "
                   "`gpu_metrics_wide`: one row per GPU and sample time, a column per metric)",
    "power": "one row per NVML sample (traceql collect --power): power, energy counter, clocks, throttle reasons",
    "ncu_metrics": "one row per (kernel profiled by Nsight Compute, metric), with the kernel's launch configuration",
    "ncu_kernels": "one row per kernel profiled by Nsight Compute: isolated duration, throughputs, DRAM bytes, cache "
                   "hit rates, occupancy, waves, roofline position; `missing` names metrics the report lacks",
}


def empty(table: str) -> pa.Table:
    return TABLES[table].empty_table()


def conform(table: str, data: pa.Table, *, dictionaries: bool = False) -> pa.Table:
    """Cast ``data`` to the declared schema of ``table`` (columns by name, in declared order); ``dictionaries``:
    string columns that come dictionary-encoded stay so (Parquet stores strings as dictionaries either way).
    The signature id of an activity table (``sig``: :mod:`traceql.store.signature`) is derived here from the row,
    whatever ``data`` holds in its place, so that every writer stores the same ids."""
    schema = TABLES[table]
    if table in WIDE:
        if table in LONG and "metric" in data.column_names:  # one row per sample and metric: stored wide
            data = _widened(data)
        schema = stored(table, data.column_names)
    if table in PARTS:
        ids = signature_ids(table, data)
        data = data.drop(["sig"]) if "sig" in data.column_names else data
        data = data.append_column("sig", ids)
    missing = [n for n in schema.names if n not in data.column_names]
    if missing:
        raise AssertionError(f"normalized {table} lacks columns {missing}")  # a traceql bug, not bad input
    if dictionaries:
        schema = pa.schema([pa.field(f.name, pa.dictionary(pa.int32(), f.type))
                            if f.type == pa.string() and pa.types.is_dictionary(data.schema.field(f.name).type)
                            else f for f in schema])
    return data.select(schema.names).cast(schema)


def _widened(data: pa.Table) -> pa.Table:
    """GPU metrics of one run, one row per sample and metric, as the wide rows the store keeps."""
    from .wide import widen

    runs = data.column("run_id").unique() if "run_id" in data.column_names else None
    if runs is not None and len(runs) > 1:
        raise AssertionError("GPU metrics of several runs are not widened together")  # a traceql bug
    wide, _ = widen(data)
    if runs is None:
        return wide
    return wide.add_column(0, "run_id", pa.repeat(runs[0] if len(runs) else pa.scalar(None, s), wide.num_rows))


def stored(table: str, names: Sequence[str]) -> pa.Schema:
    """The schema of a file of ``table`` with the columns ``names``: the declared ones, and of a WIDE table the others
    with its value type."""
    declared = TABLES[table]
    return pa.schema([*declared, *(pa.field(n, WIDE[table]) for n in names if n not in declared.names)]) \
        if table in WIDE else declared


def metadata(table: str) -> dict[bytes, bytes]:
    return {META_VERSION: str(SCHEMA_VERSION).encode(), META_TABLE: table.encode()}


def writer(table: str, path: Path, columns: Sequence[str] = ()) -> pq.ParquetWriter:
    """A Parquet writer of ``table``'s file; ``columns``: a WIDE table's own columns (as GPU metrics' names)."""
    return pq.ParquetWriter(path, stored(table, columns).with_metadata(metadata(table)), compression="zstd")


def write(table: str, data: pa.Table, path: Path) -> None:
    data = conform(table, data)
    with writer(table, path, data.column_names) as w:
        w.write_table(data.replace_schema_metadata(metadata(table)))


# columns added to a table after files of it were written: a file without one reads it as NULL
ADDED_LATER = {"runs": {"repairs"}}
# columns that `traceql migrate` adds to the files of a store of an earlier layout (traceql.store.migrate)
MIGRATED = {table: {"sig"} for table in PARTS}


def check_file(path: Path, table: str | None = None, *, migrating: bool = False) -> str:
    """Return the table name stored in a traceql Parquet file; refuse unknown schema versions, and with ``table`` a
    file of another table or whose columns are not the declared ones (footers only: cheap); ``migrating``: a file
    of an earlier layout, which may lack the columns the migration adds (:data:`MIGRATED`)."""
    try:
        stored = pq.read_schema(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise BadInputError(f"{path}: not a readable Parquet file ({exc}); re-run `traceql ingest` on its trace") \
            from exc
    meta = stored.metadata or {}
    version = meta.get(META_VERSION)
    if version is None:
        raise BadInputError(f"{path}: not written by traceql (no {META_VERSION.decode()} metadata); re-ingest the "
                            "trace it came from")
    if version != str(SCHEMA_VERSION).encode():
        raise SchemaVersionError(
            f"{path}: run store schema version {version.decode()} is not supported by this traceql "
            f"(knows {SCHEMA_VERSION}); re-ingest the trace or upgrade traceql"
        )
    name = meta.get(META_TABLE, b"").decode()
    if table is not None:
        if name != table:
            raise BadInputError(f"{path}: holds table {name or '(none)'}, not {table}; re-ingest the trace")
        for field in TABLES[table]:
            if field.name not in stored.names:
                if field.name in ADDED_LATER.get(table, ()) or (migrating and field.name in MIGRATED.get(table, ())):
                    continue
                raise BadInputError(f"{path}: lacks column {field.name}; re-ingest the trace")
            got = stored.field(field.name).type
            if not got.equals(field.type) and not (pa.types.is_dictionary(got) and got.value_type.equals(field.type)):
                raise BadInputError(f"{path}: column {field.name} is {got}, not {field.type}; re-ingest the trace")
        if table in WIDE:
            own = [f for f in stored if f.name not in TABLES[table].names]
            if table in LONG and {f.name for f in own} == {"metric", "value"}:  # a layout before 4
                if migrating:
                    return name
                raise BadInputError(f"{path}: GPU metrics a row per sample and metric, as a store of layout 3 or "
                                    "earlier wrote them, in a store of a later layout; re-ingest the trace")
            for f in own:
                if not f.type.equals(WIDE[table]):
                    raise BadInputError(f"{path}: column {f.name} is {f.type}, not {WIDE[table]}; re-ingest the trace")
    return name
