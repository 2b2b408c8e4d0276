"""Adapters from nsys export schemas to the run store schema v1, keyed by export schema version.

nsys creates tables lazily and adds columns between releases, so an adapter asks the source
which tables and columns exist and writes SQL that reads a missing column as NULL. Known
versions: export schema 3.x (nsys 2022.4 writes 3.0.0, nsys 2025.3 writes 3.20.3). A major
version traceql does not know is refused, not guessed at.

Facts the SQL relies on (checked on real exports of both versions):
- ``globalTid = (hw << 56) | (vm << 48) | (pid << 24) | tid``; ``globalPid`` is the same with tid 0.
- ``deviceId`` in activity tables is the CUDA ordinal inside one process; ``TARGET_INFO_CUDA_DEVICE``
  maps (pid, cudaId) to the GPU's index on the host (``TARGET_INFO_GPU.id``).
- GPU metric ``typeId``'s low byte is the GPU index; clock metrics are written in Hz although their
  names say MHz, so they are scaled to MHz here. ``(typeId, metricId)`` is unique in TARGET_INFO_GPU_METRICS.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ... import classify
from ...errors import BadInputError, SchemaVersionError, TraceqlError
from .source import Source

SUPPORTED_MAJOR = {3}
TID_MASK = 0xFFFFFF
COPY_KINDS = {0: "unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
              8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM_HtoD", 12: "UVM_DtoH", 13: "UVM_DtoD"}
MEM_KINDS = {0: "pageable", 1: "pinned", 2: "device", 3: "array", 4: "managed", 5: "device_static",
             6: "managed_static", 7: "unknown"}
# what every kernel, copy and set row has (_activity_columns)
ACTIVITY_COLUMNS = ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "graphNodeId"]
# a kernel's launch shape, which every nsys writes: without it no kernel has a signature (docs/attribution.md)
KERNEL_SHAPE = ["gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"]
NVTX_TYPES = {33: "category", 34: "mark", 59: "push_pop", 60: "start_end", 75: "domain_create",
              76: "domain_destroy"}


# what a damaged export or one nsys did not write raises while it is read: a column missing, values of another type
UNREADABLE = (duckdb.Error, pa.ArrowException, ValueError, TypeError, OverflowError)


def _reads(*tables: str):
    """The method reads these export tables; failing to read them as nsys writes them (a column missing, values of
    another type, damaged pages) is bad input that names the file and the tables, not a traceback. A method that
    returns batches is guarded while they are read."""
    def wrap(fn):
        @functools.wraps(fn)
        def method(self: Adapter, *args, **kwargs):
            try:
                result = fn(self, *args, **kwargs)
            except TraceqlError:
                raise
            except UNREADABLE as exc:
                raise self.unreadable(tables, exc) from exc
            return self._guarded(tables, result) if isinstance(result, Iterator) else result
        return method
    return wrap


@dataclass
class Adapter:
    source: Source
    con: duckdb.DuckDBPyConnection
    schema_version: str

    # -- helpers -------------------------------------------------------------------------
    def has(self, table: str) -> bool:
        return table in self.source.tables()

    def load(self, table: str, wanted: list[str]) -> tuple[str, set[str]]:
        """Register ``raw_<table>`` with the wanted columns that exist; return its name and those columns."""
        present = set(self.source.columns(table))
        cols = [c for c in wanted if c in present]
        if not cols:
            raise BadInputError(f"{self.source.path}: table {table} has none of the columns nsys writes "
                                f"({', '.join(wanted)}); the file was not written by nsys: export it again from "
                                "the .nsys-rep")
        return self.source.register(self.con, table, cols), set(cols)

    @staticmethod
    def ref(present: set[str], name: str, default: str = "NULL") -> str:
        return f'r."{name}"' if name in present else default

    @classmethod
    def col(cls, present: set[str], name: str, alias: str | None = None) -> str:
        return f"{cls.ref(present, name)} AS {alias or name}"

    def _device_map(self) -> str:
        """SQL for a relation (pid, cuda_device, device_id) mapping per-process ordinals to GPUs."""
        if not self.has("TARGET_INFO_CUDA_DEVICE"):
            return "(SELECT NULL::BIGINT AS pid, NULL::INT AS cuda_device, NULL::INT AS device_id WHERE false)"
        rel, _ = self.load("TARGET_INFO_CUDA_DEVICE", ["gpuId", "cudaId", "pid"])
        return f"(SELECT DISTINCT pid::BIGINT AS pid, cudaId::INT AS cuda_device, gpuId::INT AS device_id FROM {rel})"

    def _strings(self) -> str:
        if not self.has("StringIds"):
            raise BadInputError(f"{self.source.path}: no StringIds table, which every Nsight Systems export has; "
                                "export it again from the .nsys-rep (`nsys export -t sqlite`)")
        if not hasattr(self, "_strings_rel"):
            self._strings_rel, _ = self.load("StringIds", ["id", "value"])
        return self._strings_rel

    def fetch(self, sql: str) -> pa.Table:
        return self.con.sql(sql).to_arrow_table()

    def unreadable(self, tables: tuple[str, ...], exc: BaseException) -> BadInputError:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return BadInputError(f"{self.source.path}: {', '.join(t for t in tables if self.has(t)) or tables[0]} cannot "
                             f"be read as nsys writes it ({reason}); the file is damaged or was not written by nsys: "
                             "export it again from the .nsys-rep (`nsys export -t sqlite`)")

    def _guarded(self, tables: tuple[str, ...], batches: Iterator) -> Iterator:
        try:
            yield from batches
        except TraceqlError:
            raise
        except UNREADABLE as exc:
            raise self.unreadable(tables, exc) from exc

    # -- tables --------------------------------------------------------------------------
    @_reads("TARGET_INFO_GPU")
    def devices(self) -> pa.Table | None:
        if not self.has("TARGET_INFO_GPU"):
            return None
        rel, p = self.load("TARGET_INFO_GPU", ["id", "name", "uuid", "busLocation", "smCount", "l2CacheSize",
                                               "totalMemory", "memoryBandwidth", "clockRate", "computeMajor",
                                               "computeMinor", "maxShmemPerSm", "maxWarpsPerSm", "maxBlocksPerSm",
                                               "maxRegistersPerSm"])
        c = self.col
        return self.fetch(f"""
            SELECT DISTINCT {c(p, 'id', 'device_id')}, {c(p, 'name')}, {c(p, 'uuid')}, {c(p, 'busLocation', 'bus_id')},
                   {c(p, 'smCount', 'sm_count')}, {c(p, 'l2CacheSize', 'l2_bytes')}, {c(p, 'totalMemory', 'mem_bytes')},
                   {c(p, 'memoryBandwidth', 'mem_bandwidth_Bps')}, {c(p, 'clockRate', 'clock_hz')},
                   {c(p, 'computeMajor', 'cc_major')}, {c(p, 'computeMinor', 'cc_minor')},
                   {c(p, 'maxShmemPerSm', 'max_smem_per_sm_bytes')}, {c(p, 'maxWarpsPerSm', 'max_warps_per_sm')},
                   {c(p, 'maxBlocksPerSm', 'max_blocks_per_sm')}, {c(p, 'maxRegistersPerSm', 'max_regs_per_sm')}
            FROM {rel} r ORDER BY device_id""")

    @_reads("PROCESSES")
    def processes(self) -> pa.Table | None:
        if not self.has("PROCESSES"):
            return None
        rel, p = self.load("PROCESSES", ["globalPid", "pid", "name"])
        return self.fetch(f"""SELECT r.globalPid AS global_pid, r.pid AS pid, {self.col(p, 'name')}, NULL AS rank
                              FROM {rel} r ORDER BY global_pid""")

    @_reads("CUPTI_ACTIVITY_KIND_KERNEL", "StringIds", "TARGET_INFO_CUDA_DEVICE")
    def kernels(self) -> pa.Table | None:
        """Read column by column (no join in DuckDB): names and classes come dictionary-encoded, one string per
        distinct kernel, however many launches there are."""
        table = "CUPTI_ACTIVITY_KIND_KERNEL"
        if not self.has(table):
            return None
        r = self._scan(table, [*ACTIVITY_COLUMNS, "demangledName", "shortName", "gridX", "gridY", "gridZ", "blockX",
                               "blockY", "blockZ", "staticSharedMemory", "dynamicSharedMemory",
                               "registersPerThread"],
                       required=["start", "end", "deviceId", "globalPid", "demangledName", *KERNEL_SHAPE],
                       what="kernels")
        names = self._names(r["demangledName"], r["shortName"])
        name, short = names.columns(r["demangledName"]), names.columns(r["shortName"], fallback=r["demangledName"])
        classes = names.classes(r["demangledName"])
        return pa.table({
            **self._activity_columns(r), "name": name, "short_name": short,
            "grid_x": r["gridX"], "grid_y": r["gridY"], "grid_z": r["gridZ"],
            "block_x": r["blockX"], "block_y": r["blockY"], "block_z": r["blockZ"],
            "ctas": pc.multiply(pc.multiply(r["gridX"], r["gridY"]), r["gridZ"]),
            "threads_per_block": pc.multiply(pc.multiply(r["blockX"], r["blockY"]), r["blockZ"]),
            "static_smem_bytes": r["staticSharedMemory"], "dynamic_smem_bytes": r["dynamicSharedMemory"],
            "regs_per_thread": r["registersPerThread"], **classes})

    @_reads("CUPTI_ACTIVITY_KIND_KERNEL", "StringIds", "TARGET_INFO_CUDA_DEVICE")
    def whole_graphs(self) -> int:
        """CUDA graph launches that nsys traced as whole graphs (``--cuda-graph-trace=graph``, its default): each is a
        row of CUPTI_ACTIVITY_KIND_GRAPH_TRACE, and the kernels, copies and sets inside it are in no other table."""
        if not self.has("CUPTI_ACTIVITY_KIND_GRAPH_TRACE"):
            return 0
        rel, _ = self.load("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", ["start", "end", "graphId"])
        return int(self.con.sql(f"SELECT count(*) FROM {rel}").fetchall()[0][0])

    def kernel_intervals(self) -> pa.Table | None:
        """What unions of kernels read, and no more: each kernel's device, times and kind (classified from its
        name), with the ids that tell a duplicated record; the same rows and values as :meth:`kernels`."""
        table = "CUPTI_ACTIVITY_KIND_KERNEL"
        if not self.has(table):
            return None
        r = self._scan(table, ["start", "end", "deviceId", "globalPid", "correlationId", "demangledName"],
                       required=["start", "end", "deviceId", "globalPid", "demangledName"], what="kernels")
        return pa.table({**self._interval_columns(r),
                         "kind": self._names(r["demangledName"]).classes(r["demangledName"])["kind"]})

    @_reads("CUPTI_ACTIVITY_KIND_MEMCPY", "TARGET_INFO_CUDA_DEVICE")
    def copy_intervals(self) -> pa.Table | None:
        """Each copy's device, times and whether it is peer-to-peer; the same rows and values as :meth:`memcpy`."""
        table = "CUPTI_ACTIVITY_KIND_MEMCPY"
        if not self.has(table):
            return None
        r = self._scan(table, ["start", "end", "deviceId", "globalPid", "correlationId", "copyKind"],
                       required=["start", "end", "deviceId", "copyKind"], what="copies")
        return pa.table({**self._interval_columns(r), "is_peer": _is_peer(_labels(r["copyKind"], COPY_KINDS))})

    def _scan(self, table: str, wanted: list[str], required: list[str], what: str) -> dict[str, pa.Array]:
        """The ``wanted`` columns of ``table`` as whole int64 arrays (NULL where the export lacks the column)."""
        present = set(self.source.columns(table))
        if missing := [c for c in required if c not in present]:
            raise BadInputError(f"{self.source.path}: table {table} lacks the column(s) {', '.join(missing)} that "
                                "nsys writes; the file was not written by nsys: export it again from the .nsys-rep")
        cols = [c for c in wanted if c in present]
        batches = list(self.source.scan(table, cols))  # types as the export stores them (Parquet: also unsigned)
        n = sum(b.num_rows for b in batches)
        out = {}
        for c in wanted:
            try:
                out[c] = pa.concat_arrays([b.column(c).cast(pa.int64()) for b in batches]) if batches and c in present \
                    else pa.nulls(n, pa.int64())
            except pa.ArrowInvalid as exc:  # fractional times, text in a number column
                raise BadInputError(f"{self.source.path}: its {what} do not fit traceql's schema (column {c} of "
                                    f"{table}: {exc}); the export holds values nsys does not write: export it "
                                    "again from the .nsys-rep") from exc
        return out

    def _interval_columns(self, r: dict[str, pa.Array]) -> dict[str, pa.Array]:
        """What every kernel/memcpy/memset row has, its interval readers too: the launching process, the physical
        device (a process's CUDA ordinal mapped to the GPU's index on the host, ``TARGET_INFO_CUDA_DEVICE``; the
        ordinal where unmapped), the correlation id and the times."""
        return {"global_pid": r["globalPid"], "device_id": self._physical(r["globalPid"], r["deviceId"]),
                "correlation_id": r["correlationId"], "start_ns": r["start"], "end_ns": r["end"]}

    def _activity_columns(self, r: dict[str, pa.Array]) -> dict[str, pa.Array]:
        """Common columns of kernel/memcpy/memset rows: :meth:`_interval_columns` and the rest (the writer puts them
        in the schema's order)."""
        return {**self._interval_columns(r), "cuda_device": r["deviceId"], "context_id": r["contextId"],
                "stream_id": r["streamId"], "dur_ns": pc.subtract(r["end"], r["start"]),
                "graph_node_id": r["graphNodeId"]}

    def _physical(self, global_pid: pa.Array, cuda: pa.Array) -> pa.Array:
        if not hasattr(self, "_devmap"):
            rows = self.con.sql(f"SELECT pid, cuda_device, min(device_id) FROM {self._device_map()} "
                                "WHERE pid IS NOT NULL AND cuda_device IS NOT NULL GROUP BY ALL ORDER BY ALL"
                                ).fetchall()
            self._devmap = (np.array([(p << 32) | c for p, c, _ in rows], np.int64),
                            np.array([d if d is not None else -1 for _, _, d in rows], np.int64))
        keys, gpus = self._devmap
        if not len(keys) or not len(cuda) or ((gpus == (keys & 0xFFFFFFFF)) | (gpus < 0)).all():
            return cuda  # no map, or every process's ordinal is the GPU's index: nothing to look up
        pid = (np.asarray(pc.fill_null(global_pid, 0)) >> 24) & TID_MASK
        ordinal = np.asarray(pc.fill_null(cuda, 0))
        key = (pid << 32) | (ordinal & 0xFFFFFFFF)
        at = np.minimum(np.searchsorted(keys, key), len(keys) - 1)
        found = (keys[at] == key) & (gpus[at] >= 0) & np.asarray(global_pid.is_valid())
        return pa.array(np.where(found, gpus[at], ordinal), mask=np.asarray(cuda.is_null()))

    def _names(self, *ids: pa.Array) -> _Names:
        """The StringIds values of the ids in ``ids`` (read for those ids only)."""
        used = np.unique(np.concatenate([np.asarray(a.drop_null()) for a in ids] or [np.zeros(0, np.int64)]))
        strings = self._strings()
        self.con.register("_wanted_ids", pa.table({"id": used}))
        try:
            rows = self.con.sql(f"SELECT s.id, s.value FROM {strings} s SEMI JOIN _wanted_ids w ON s.id = w.id "
                                "WHERE s.value IS NOT NULL").fetchall()
        finally:
            self.con.unregister("_wanted_ids")
        by_id: dict[int, str] = {}
        for i, value in rows:
            if by_id.setdefault(i, value) != value:  # which string a row names would be a guess
                raise BadInputError(f"{self.source.path}: StringIds holds id {i} twice, as {_cut(by_id[i])!r} and "
                                    f"{_cut(value)!r}; nsys writes each id once: the file is damaged, export it "
                                    "again from the .nsys-rep (`nsys export -t sqlite`)")
        return _Names(by_id)

    @_reads("CUPTI_ACTIVITY_KIND_MEMCPY", "TARGET_INFO_CUDA_DEVICE")
    def memcpy(self) -> pa.Table | None:
        table = "CUPTI_ACTIVITY_KIND_MEMCPY"
        if not self.has(table):
            return None
        r = self._scan(table, [*ACTIVITY_COLUMNS, "bytes", "copyKind", "srcKind", "dstKind", "srcDeviceId",
                               "dstDeviceId"], required=["start", "end", "deviceId"], what="copies")
        kind = _labels(r["copyKind"], COPY_KINDS)
        return pa.table({**self._activity_columns(r), "bytes": r["bytes"], "copy_kind": kind,
                         "src_kind": _labels(r["srcKind"], MEM_KINDS), "dst_kind": _labels(r["dstKind"], MEM_KINDS),
                         "src_device_id": self._physical(r["globalPid"], r["srcDeviceId"]),
                         "dst_device_id": self._physical(r["globalPid"], r["dstDeviceId"]),
                         "is_peer": _is_peer(kind)})

    @_reads("CUPTI_ACTIVITY_KIND_MEMSET", "TARGET_INFO_CUDA_DEVICE")
    def memset(self) -> pa.Table | None:
        table = "CUPTI_ACTIVITY_KIND_MEMSET"
        if not self.has(table):
            return None
        r = self._scan(table, [*ACTIVITY_COLUMNS, "bytes", "value", "memKind"], required=["start", "end", "deviceId"],
                       what="memsets")
        return pa.table({**self._activity_columns(r), "bytes": r["bytes"], "value": r["value"],
                         "mem_kind": _labels(r["memKind"], MEM_KINDS)})

    @_reads("NVTX_EVENTS", "StringIds")
    def nvtx(self) -> pa.Table | None:
        if not self.has("NVTX_EVENTS"):
            return None
        rel, p = self.load("NVTX_EVENTS", ["start", "end", "eventType", "text", "textId", "globalTid", "domainId",
                                           "jsonText", "jsonTextId"])
        strings = self._strings()
        text_id = "r.textId" if "textId" in p else "NULL"
        json_id = "r.jsonTextId" if "jsonTextId" in p else "NULL"
        domain = "r.domainId" if "domainId" in p else "0"
        # a range's payload, where the export has it as JSON (`nsys export --include-json=true`): NCCL's ranges carry
        # {"NCCL communicator ID": ..., "Message size [bytes]": ..., ...}; it joins the range's labels
        self.con.execute(f"""
            CREATE OR REPLACE TEMP VIEW nvtx_base AS
            SELECT r.start, r."end", r.eventType, COALESCE({self.ref(p, 'text')}, s.value) AS text,
                   r.globalTid, {domain} AS domainId,
                   TRY_CAST(TRY_CAST(COALESCE({self.ref(p, 'jsonText')}, j.value) AS JSON) AS MAP(VARCHAR, VARCHAR))
                       AS payload
            FROM {rel} r LEFT JOIN {strings} s ON s.id = {text_id} LEFT JOIN {strings} j ON j.id = {json_id}""")
        # Depth of push/pop ranges within their thread: a running count of opens minus closes.
        return self.fetch(f"""
            WITH ranges AS (
                SELECT b.*, row_number() OVER () AS rid, et.label AS event_type
                FROM nvtx_base b JOIN {_enum_values(NVTX_TYPES)} et ON et.id = b.eventType
                WHERE et.label IN ('push_pop', 'start_end', 'mark')),
            edges AS (
                SELECT rid, globalTid, start AS t, 1 AS delta, 1 AS ord FROM ranges WHERE event_type = 'push_pop'
                UNION ALL
                SELECT rid, globalTid, "end" AS t, -1 AS delta, 0 AS ord FROM ranges WHERE event_type = 'push_pop'),
            depths AS (
                SELECT rid, sum(delta) OVER (PARTITION BY globalTid ORDER BY t, ord, delta
                                              ROWS UNBOUNDED PRECEDING) - 1 AS depth
                FROM edges QUALIFY delta = 1),
            domains AS (
                SELECT domainId, any_value(text) AS domain FROM nvtx_base WHERE eventType = 75 GROUP BY domainId),
            parts AS (
                SELECT rid, kv, CASE WHEN len(kv) > 0 THEN map_from_entries(list_transform(kv, lambda x: struct_pack(
                            k := split_part(x, '=', 1), v := x[strpos(x, '=') + 1:]))) END AS labels
                FROM (SELECT rid, list_filter(string_split(text, ';'), lambda x: strpos(x, '=') > 1) AS kv
                      FROM ranges))
            SELECT (r.globalTid >> 24) << 24 AS global_pid, r.globalTid AS global_tid,
                   r.globalTid & {TID_MASK} AS tid, r.start AS start_ns, r."end" AS end_ns,
                   r."end" - r.start AS dur_ns, r.event_type, r.text, d.domain,
                   dp.depth::INT AS depth,
                   CASE WHEN r.text LIKE 'case:%' THEN split_part(split_part(r.text, ';', 1), ':', 2) END AS case_name,
                   CASE WHEN len(pt.kv) > 0 AND cardinality(r.payload) > 0 THEN map_concat(pt.labels, r.payload)
                        WHEN len(pt.kv) > 0 THEN pt.labels WHEN cardinality(r.payload) > 0 THEN r.payload END AS labels
            FROM ranges r LEFT JOIN depths dp USING (rid) LEFT JOIN domains d ON d.domainId = r.domainId
            LEFT JOIN parts pt USING (rid)
            ORDER BY global_tid, start_ns""")

    @_reads("CUPTI_ACTIVITY_KIND_RUNTIME", "StringIds")
    def runtime_api(self) -> pa.Table | None:
        table = "CUPTI_ACTIVITY_KIND_RUNTIME"
        if not self.has(table):
            return None
        r = self._scan(table, ["start", "end", "globalTid", "correlationId", "nameId", "returnValue"],
                       required=["start", "end", "globalTid", "nameId"], what="runtime API calls")
        tid = r["globalTid"]
        return pa.table({
            "global_pid": pc.shift_left(pc.shift_right(tid, 24), 24), "global_tid": tid,
            "tid": pc.bit_wise_and(tid, TID_MASK), "start_ns": r["start"], "end_ns": r["end"],
            "dur_ns": pc.subtract(r["end"], r["start"]), "name": self._names(r["nameId"]).columns(r["nameId"]),
            "correlation_id": r["correlationId"], "return_value": r["returnValue"]})  # ordered by the writer

    @_reads("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_CUDA_EVENT")
    def stream_waits(self) -> pa.Table | None:
        """Each stream made to wait for an event, with the event record it waits for: CUPTI's synchronization rows
        of type stream-wait-event (2) joined to the event record of the same event and sync id. nsys writes them
        with ``--cuda-event-trace=true``; without it the tables are empty or absent. The device is the record's: the
        synchronization rows give every process's device as 0 (nsys 2025.3)."""
        waits, events = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_CUDA_EVENT"
        if not (self.has(waits) and self.has(events)):
            return None
        w = self._scan(waits, ["globalPid", "streamId", "correlationId", "syncType", "eventId",
                               "eventSyncId"], required=["globalPid", "streamId", "correlationId", "syncType"],
                       what="stream waits")
        e = self._scan(events, ["globalPid", "deviceId", "streamId", "correlationId", "eventId", "eventSyncId"],
                       required=["globalPid", "streamId", "correlationId", "eventId"], what="event records")
        self.con.register("_sw_waits", pa.table(w))
        self.con.register("_sw_events", pa.table(e))
        try:
            joined = self.fetch("""
                SELECT w.globalPid, e.deviceId, w.streamId, w.correlationId, e.streamId AS record_stream_id,
                       e.correlationId AS record_correlation_id
                FROM _sw_waits w JOIN _sw_events e
                  ON e.globalPid = w.globalPid AND e.eventId = w.eventId
                 AND e.eventSyncId IS NOT DISTINCT FROM w.eventSyncId
                WHERE w.syncType = 2
                ORDER BY w.globalPid, w.correlationId""")
        finally:
            self.con.unregister("_sw_waits")
            self.con.unregister("_sw_events")
        if not joined.num_rows:
            return None
        pid = joined.column("globalPid")
        return pa.table({"global_pid": pid, "device_id": self._physical(pid, joined.column("deviceId")),
                         "stream_id": joined.column("streamId"), "correlation_id": joined.column("correlationId"),
                         "record_stream_id": joined.column("record_stream_id"),
                         "record_correlation_id": joined.column("record_correlation_id")})

    @_reads("TARGET_INFO_CUDA_STREAM")
    def streams(self) -> pa.Table | None:
        """Each CUDA stream's kind as created (CUPTI's stream flag: 1 default, that is blocking; 2 non-blocking;
        3 the legacy NULL stream; 0 unknown) and priority (written unsigned by nsys: -5 comes as 4294967291)."""
        table = "TARGET_INFO_CUDA_STREAM"
        if not self.has(table):
            return None
        rel, p = self.load(table, ["streamId", "hwId", "vmId", "processId", "contextId", "priority", "flag"])
        if not {"streamId", "processId", "flag"} <= set(p):
            return None
        hw, vm, priority = self.ref(p, "hwId", "0"), self.ref(p, "vmId", "0"), self.ref(p, "priority")
        return self.fetch(f"""
            SELECT DISTINCT ({hw}::BIGINT << 56) | ({vm}::BIGINT << 48) | (r.processId::BIGINT << 24) AS global_pid,
                   {self.ref(p, "contextId")}::BIGINT AS context_id, r.streamId::BIGINT AS stream_id,
                   CASE r.flag WHEN 1 THEN 'blocking' WHEN 2 THEN 'non_blocking' WHEN 3 THEN 'null'
                        ELSE 'unknown' END AS stream_kind,
                   (CASE WHEN {priority} >= 2147483648 THEN {priority} - 4294967296 ELSE {priority} END)::INTEGER
                       AS priority
            FROM {rel} r ORDER BY global_pid, context_id, stream_id""")

    @_reads("GPU_METRICS", "TARGET_INFO_GPU_METRICS")
    def gpu_metrics(self, batch_rows: int = 1 << 18, workers: int | None = None) -> Iterator[pa.RecordBatch] | None:
        """Samples in table order, as batches of device_id, ts_ns, metric, value; ``metric`` comes
        dictionary-encoded (the few metric names), so that no batch copies a name per row.

        ``GPU_METRICS`` is the largest table of an export by far, so it is not joined in DuckDB
        (which would hold it all) but scanned in batches and looked up in Arrow.
        """
        if not self.has("GPU_METRICS"):
            return None
        # without the metrics' descriptions no sample can be named: each is dropped and counted, not read silently
        lookup = self._lookup = self._metric_lookup() if self.has("TARGET_INFO_GPU_METRICS") else MetricLookup([])
        columns = ["timestamp", "typeId", "metricId", "value"]
        return self.source.scan("GPU_METRICS", columns, batch_rows=batch_rows, workers=workers,
                                transform=lookup.apply)

    def metric_names(self) -> list[str | None]:
        """The names of the metrics :meth:`gpu_metrics` reads (their dictionary), once it was called."""
        lookup = getattr(self, "_lookup", None)
        return lookup.names.to_pylist() if lookup else []

    def dropped_samples(self) -> dict[str, int]:
        """GPU metric samples that :meth:`gpu_metrics` left out so far, by reason (``gpu_metrics.<reason>``)."""
        lookup = getattr(self, "_lookup", None)
        return {f"gpu_metrics.{k}": n for k, n in (lookup.dropped.items() if lookup else ()) if n}

    def _metric_lookup(self) -> MetricLookup:
        rel, _ = self.load("TARGET_INFO_GPU_METRICS", ["typeId", "metricId", "metricName"])
        rows = self.con.sql(f"""SELECT typeId::BIGINT, metricId::BIGINT, min(metricName)
                                FROM {rel} GROUP BY ALL ORDER BY ALL""").fetchall()
        return MetricLookup(rows)


class MetricLookup:
    """Maps GPU_METRICS rows (typeId, metricId) to metric names and unit scales, as an inner join would.

    A (typeId, metricId) pair is looked up in a dense table indexed by the positions of typeId and metricId
    among their few distinct values; samples of a pair that TARGET_INFO_GPU_METRICS lacks are dropped, and so
    are samples without a time or value; ``dropped`` counts both.
    """

    def __init__(self, rows: list[tuple[int, int, str]]):
        self.dropped = {"unknown_metric": 0, "no_value": 0}
        self._count = threading.Lock()  # apply runs in the reading threads
        self.types = pa.array(sorted({t for t, _, _ in rows}), pa.int64())
        self.metric_ids = pa.array(sorted({m for _, m, _ in rows}), pa.int64())
        names: list[str | None] = sorted({n for _, _, n in rows if n is not None})
        if any(n is None for _, _, n in rows):
            names.append(None)
        self.names = pa.array(names, pa.string())
        # nsys writes clock metrics in Hz although their names say MHz
        self.scales = pa.array([1e-6 if n and n.endswith("Clock Frequency [MHz]") else 1.0 for n in names],
                               pa.float64())
        position = {t: i for i, t in enumerate(self.types.to_pylist())}
        metric_position = {m: i for i, m in enumerate(self.metric_ids.to_pylist())}
        name_index = {n: i for i, n in enumerate(names)}
        dense: list[int | None] = [None] * (len(position) * len(metric_position))
        for t, m, n in rows:
            dense[position[t] * len(metric_position) + metric_position[m]] = name_index[n]
        self.dense = pa.array(dense, pa.int32())

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        type_id = batch.column("typeId").cast(pa.int64())  # Parquet exports hold uint64
        key = pc.add(pc.multiply(pc.index_in(type_id, self.types), len(self.metric_ids)),
                     pc.index_in(batch.column("metricId").cast(pa.int64()), self.metric_ids))
        name = pc.take(self.dense, key)
        if name.null_count:  # no such metric in TARGET_INFO_GPU_METRICS: an inner join drops the sample
            keep = pc.is_valid(name)
            with self._count:
                self.dropped["unknown_metric"] += name.null_count
            batch, name, type_id = batch.filter(keep), name.filter(keep), type_id.filter(keep)
        if batch.column("timestamp").null_count or batch.column("value").null_count:
            keep = pc.and_(pc.is_valid(batch.column("timestamp")), pc.is_valid(batch.column("value")))
            with self._count:
                self.dropped["no_value"] += len(keep) - pc.sum(keep).as_py()
            batch, name, type_id = batch.filter(keep), name.filter(keep), type_id.filter(keep)
        value = pc.multiply(batch.column("value").cast(pa.float64()), pc.take(self.scales, name))
        return pa.RecordBatch.from_arrays(
            [pc.bit_wise_and(type_id, 255).cast(pa.int32()), batch.column("timestamp").cast(pa.int64()),
             pa.DictionaryArray.from_arrays(name, self.names), value],
            names=["device_id", "ts_ns", "metric", "value"])


def _cut(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[:n] + "..."


class _Names:
    """Strings of an export's ``StringIds`` by id, turned into dictionary-encoded columns: the Arrow array holds
    each distinct string once and an index per row."""

    def __init__(self, by_id: dict[int, str]):
        self.ids = np.array(sorted(by_id), np.int64)
        values = [by_id[i] for i in self.ids.tolist()]
        self.strings = list(dict.fromkeys(values))  # distinct, first-seen order
        position = {v: k for k, v in enumerate(self.strings)}
        self.code = np.array([position[v] for v in values], np.int32)  # per id: its string's position

    def _codes(self, ids: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """Per row: the position of its string, and whether it has none (a NULL id, or one StringIds lacks)."""
        raw = np.asarray(pc.fill_null(ids, -1))
        at = np.minimum(np.searchsorted(self.ids, raw), max(len(self.ids) - 1, 0))
        found = (self.ids[at] == raw) & np.asarray(ids.is_valid()) if len(self.ids) else np.zeros(len(raw), bool)
        return np.where(found, self.code[at] if len(self.ids) else 0, 0).astype(np.int32), ~found

    def columns(self, ids: pa.Array, fallback: pa.Array | None = None) -> pa.DictionaryArray:
        """The string of each id, NULL where there is none (or the string of ``fallback``'s id, where given)."""
        code, missing = self._codes(ids)
        if fallback is not None:
            other, other_missing = self._codes(fallback)
            code, missing = np.where(missing, other, code), missing & other_missing
        return pa.DictionaryArray.from_arrays(pa.array(code, mask=missing), pa.array(self.strings, pa.string()))

    def classes(self, ids: pa.Array) -> dict[str, pa.DictionaryArray]:
        """The kernel classes (:mod:`traceql.classify`) of each row's name, dictionary-encoded likewise."""
        code, missing = self._codes(ids)
        table = classify.classify_names(self.strings)  # one row per distinct string, in the same order
        out = {}
        for col in table.column_names[1:]:
            values = table.column(col).to_pylist()
            distinct = [v for v in dict.fromkeys(values) if v is not None]
            where = {v: k for k, v in enumerate(distinct)}
            per_name = np.array([where.get(v, -1) for v in values] or [-1], np.int32)
            row = per_name[code] if len(values) else np.full(len(code), -1, np.int32)
            out[col] = pa.DictionaryArray.from_arrays(pa.array(np.maximum(row, 0), mask=missing | (row < 0)),
                                                      pa.array(distinct, pa.string()))
        return out


def _labels(codes: pa.Array, mapping: dict[int, str]) -> pa.DictionaryArray:
    """Each code's label (NULL where the code is NULL or not in ``mapping``), dictionary-encoded."""
    keys = np.array(sorted(mapping), np.int64)
    raw = np.asarray(pc.fill_null(codes, -1))
    at = np.minimum(np.searchsorted(keys, raw), len(keys) - 1)
    found = (keys[at] == raw) & np.asarray(codes.is_valid())
    return pa.DictionaryArray.from_arrays(pa.array(at.astype(np.int32), mask=~found),
                                          pa.array([mapping[k] for k in keys.tolist()], pa.string()))


def _is_peer(copy_kind: pa.DictionaryArray) -> pa.Array:
    """Peer-to-peer copies: communication between GPUs (an unknown kind is not)."""
    return pc.fill_null(pc.equal(copy_kind.cast(pa.string()), "PtoP"), False)


def _enum_values(mapping: dict[int, str]) -> str:
    rows = ", ".join(f"({k}, '{v}')" for k, v in mapping.items())
    return f"(SELECT * FROM (VALUES {rows}) AS e(id, label))"


def adapter_for(source: Source, con: duckdb.DuckDBPyConnection) -> Adapter:
    meta = source.meta()
    version = meta.get("EXPORT_SCHEMA_VERSION")
    if version is None:
        if "StringIds" not in source.tables():
            raise BadInputError(f"{source.path}: not an Nsight Systems export (no META_DATA_EXPORT or StringIds "
                                "table); export the report with `nsys export -t sqlite` or give the .nsys-rep")
        raise BadInputError(f"{source.path}: Nsight Systems export without EXPORT_SCHEMA_VERSION; "
                            "export it again with nsys 2022.4 or newer")
    major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else -1
    if major not in SUPPORTED_MAJOR:
        raise SchemaVersionError(f"{source.path}: nsys export schema version {version} is not supported "
                                 f"(traceql reads {sorted(SUPPORTED_MAJOR)}.x); export the .nsys-rep with a "
                                 "supported nsys or upgrade traceql")
    return Adapter(source, con, version)
