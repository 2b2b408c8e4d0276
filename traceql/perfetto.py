"""``traceql export --perfetto``: a run's GPU and CPU timeline, with traceql's findings on it, as a Perfetto trace.

The file is Perfetto's protobuf trace format: one ``Trace`` message, a stream of ``TracePacket`` fields, each
holding a track descriptor, interned strings, or one ``TrackEvent`` (a slice's begin or end, an instant, a counter
sample). It is written here with no protobuf runtime: each kind of packet is encoded column by column with numpy
(varints, fixed64 doubles, length-delimited fields, rows concatenated) a chunk of rows at a time, and the chunks
are appended to the file as the store's rows stream out of DuckDB, so neither the rows nor the file are ever held
whole. Names and strings are interned (an event name or an argument's string is written once per trace, then
referred to by a number), so a kernel name of many kilobytes costs two bytes per slice.

What goes where (docs/perfetto.md):

- a process per GPU (``GPU 0: NVIDIA H200``), with a track per CUDA stream holding its kernels, copies and sets as
  slices, each with its launch facts and traceql's findings as arguments (``traceql.slowdown``, ``traceql.class``,
  ``traceql.predicted.*``...); counter tracks for its GPU metrics and NVML samples; and traceql's own tracks: the
  verdict, the overlap state (compute, comm, overlap), and each wait for a late rank, with a flow to that rank's
  collective;
- a process per CPU process that launched GPU work or marked NVTX ranges, with a track per thread holding its NVTX
  ranges and a track per thread holding its CUDA API calls; a flow from each launch call to the activity it launched.

Slices that overlap on one track without nesting (which Perfetto cannot draw on one track) go to a second track
of the same name, ``(2)``, and so on.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import duck
from .attribute import attribute
from .errors import BadInputError
from .output import replacing

CHUNK = 1 << 17  # rows encoded at a time

# TrackEvent.Type
SLICE_BEGIN, SLICE_END, INSTANT, COUNTER = 1, 2, 3, 4
SEQ_ID = 1  # the one packet sequence of the file (trusted_packet_sequence_id)
_CLEARED, _NEEDS_STATE = 1, 2  # TracePacket.sequence_flags
# field numbers (perfetto/trace/trace_packet.proto, track_event/*.proto)
_PACKET = 1  # Trace.packet
_TS, _SEQ, _SEQ_FLAGS, _INTERNED, _TRACK_EVENT, _TRACK_DESCRIPTOR = 8, 10, 13, 12, 11, 60
_TE_TYPE, _TE_TRACK, _TE_NAME_IID, _TE_CATEGORY_IIDS, _TE_ARGS = 9, 11, 10, 3, 4
_TE_COUNTER_DOUBLE, _TE_FLOWS, _TE_TERMINATING_FLOWS = 44, 47, 48
_ARG_NAME_IID, _ARG_BOOL, _ARG_INT, _ARG_DOUBLE, _ARG_STRING_IID = 1, 2, 4, 5, 17
_INTERNED_FIELDS = {"categories": 1, "names": 2, "arg_names": 3, "strings": 29}

# -- the protobuf wire format, a column of rows at a time -----------------------------------------------------------

class Col:
    """A column of byte strings, one per row, kept as blocks of padded bytes: each block a (rows, width) array of
    bytes and a mask of those that are there (None: all are). Concatenating columns row by row is then a list of
    blocks, and the bytes come out in one pass (:func:`to_bytes`): the blocks side by side, read row after row,
    masked."""

    __slots__ = ("blocks", "lengths")

    def __init__(self, blocks: list[tuple[np.ndarray, np.ndarray | None]], lengths: np.ndarray):
        self.blocks, self.lengths = blocks, lengths

    def __len__(self) -> int:
        return len(self.lengths)


def varints(values) -> Col:
    """Base-128 varints; signed integers as their 64-bit two's complement (ten bytes when negative), as protobuf's
    int64 fields take them."""
    v = np.asarray(values)
    if v.dtype == np.bool_:
        v = v.astype(np.uint64)
    elif v.dtype.kind == "i":
        v = v.astype(np.int64, copy=False).view(np.uint64)
    else:
        v = v.astype(np.uint64, copy=False)
    nbytes = np.ones(len(v), np.int64)
    for k in range(1, 10):
        more = v >= np.uint64(1 << (7 * k))
        if not more.any():
            break
        nbytes += more
    width = int(nbytes.max()) if len(v) else 1
    shifts = np.arange(width, dtype=np.uint64) * np.uint64(7)
    groups = ((v[:, None] >> shifts[None, :]) & np.uint64(0x7F)).astype(np.uint8)
    place = np.arange(width)[None, :]
    groups |= (place < (nbytes[:, None] - 1)).astype(np.uint8) << np.uint8(7)
    valid = None if (nbytes == width).all() else place < nbytes[:, None]
    return Col([(groups, valid)], nbytes)


def fixed64(values) -> Col:
    """Little-endian 8-byte values: doubles (float input) or fixed64 (integer input)."""
    v = np.asarray(values)
    v = np.ascontiguousarray(v, "<f8" if v.dtype.kind == "f" else "<u8")
    n = len(v)
    return Col([(v.view(np.uint8).reshape(n, 8), None)], np.full(n, 8, np.int64))


def const(raw: bytes, n: int) -> Col:
    return Col([(np.broadcast_to(np.frombuffer(raw, np.uint8), (n, len(raw))), None)], np.full(n, len(raw), np.int64))


def _is_const(block) -> bool:
    data, valid = block
    return valid is None and data.strides[0] == 0


def cat(cols: Sequence[Col | None]) -> Col:
    """Row by row, the concatenation of the columns' byte strings (adjacent constants become one)."""
    cols = [c for c in cols if c is not None]
    blocks: list = []
    for c in cols:
        for block in c.blocks:
            if blocks and _is_const(block) and _is_const(blocks[-1]):
                raw = np.concatenate([blocks[-1][0][0], block[0][0]])
                blocks[-1] = (np.broadcast_to(raw, (len(c), len(raw))), None)
            else:
                blocks.append(block)
    return Col(blocks, np.sum([c.lengths for c in cols], axis=0))


def keep(col: Col, mask: np.ndarray | None) -> Col:
    """The column with the rows where ``mask`` is False emptied."""
    if mask is None or mask.all():
        return col
    rows = mask[:, None]
    return Col([(d, np.broadcast_to(rows, d.shape) if v is None else v & rows) for d, v in col.blocks],
               col.lengths * mask)


def padded(col: Col) -> tuple[np.ndarray, np.ndarray | None]:
    """The column as one block."""
    if len(col.blocks) == 1:
        return col.blocks[0]
    data = np.hstack([d for d, _ in col.blocks])
    if all(v is None for _, v in col.blocks):
        return data, None
    return data, np.hstack([np.broadcast_to(np.True_, d.shape) if v is None else v for d, v in col.blocks])


def to_bytes(col: Col) -> np.ndarray:
    data, valid = padded(col)
    if not len(data):
        return np.zeros(0, np.uint8)
    return np.ascontiguousarray(data).reshape(-1) if valid is None else data[valid]


def take(col: Col, index: np.ndarray) -> Col:
    """The rows ``index``, in that order."""
    data, valid = padded(col)
    return Col([(data[index], None if valid is None else valid[index])], col.lengths[index])


def stack(a: Col, b: Col) -> Col:
    """The rows of ``a``, then those of ``b``."""
    (da, va), (db, vb) = padded(a), padded(b)
    width = max(da.shape[1], db.shape[1])

    def wide(d, v):
        v = np.broadcast_to(np.True_, d.shape) if v is None else v
        if d.shape[1] == width:
            return d, v
        pad = ((0, 0), (0, width - d.shape[1]))
        return np.pad(d, pad), np.pad(v, pad)

    (da, va), (db, vb) = wide(da, va), wide(db, vb)
    return Col([(np.vstack([da, db]), np.vstack([va, vb]))], np.concatenate([a.lengths, b.lengths]))


def sparse(n: int, rows: dict[int, bytes]) -> Col:
    """A column that is empty but at ``rows`` (few: flows)."""
    width = max((len(v) for v in rows.values()), default=0)
    data, valid = np.zeros((n, width), np.uint8), np.zeros((n, width), bool)
    lengths = np.zeros(n, np.int64)
    for i, raw in rows.items():
        data[i, :len(raw)] = np.frombuffer(raw, np.uint8)
        valid[i, :len(raw)] = True
        lengths[i] = len(raw)
    return Col([(data, valid)], lengths)


def pvarint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def tag(field: int, wire: int) -> bytes:
    return pvarint(field << 3 | wire)


def pint(field: int, value: int) -> bytes:
    return tag(field, 0) + pvarint(int(value))


def pbytes(field: int, value: bytes | str) -> bytes:
    raw = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
    return tag(field, 2) + pvarint(len(raw)) + raw


def f_varint(field: int, values, mask: np.ndarray | None = None) -> Col:
    v = varints(values)
    return keep(cat([const(tag(field, 0), len(v)), v]), mask)


def f_fixed64(field: int, values, mask: np.ndarray | None = None) -> Col:
    v = fixed64(values)
    return keep(cat([const(tag(field, 1), len(v)), v]), mask)


def f_message(field: int, col: Col, mask: np.ndarray | None = None) -> Col:
    return keep(cat([const(tag(field, 2), len(col)), varints(col.lengths), col]), mask)


# -- the file -------------------------------------------------------------------------------------------------------

class Writer:
    """Packets appended to a binary file, with the sequence's interned strings and the tracks' ids."""

    def __init__(self, fh):
        self.fh = fh
        self.bytes = 0
        self.interned: dict[str, dict[str, int]] = {k: {} for k in _INTERNED_FIELDS}
        self.next_uuid = 1
        self.packet(pint(_SEQ, SEQ_ID) + pint(_SEQ_FLAGS, _CLEARED))  # incremental state starts here

    def packet(self, payload: bytes) -> None:
        raw = pbytes(_PACKET, payload)
        self.fh.write(raw)
        self.bytes += len(raw)

    def packets(self, col: Col) -> None:
        """Packets, one per row of ``col``, in that order."""
        if len(col):
            self.framed(f_message(_PACKET, col))

    def framed(self, col: Col) -> None:
        """Rows that are framed packets already (``Trace.packet`` fields), in that order."""
        raw = to_bytes(col)
        self.fh.write(memoryview(raw))
        self.bytes += len(raw)

    def intern(self, kind: str, strings: Sequence[str]) -> list[int]:
        """The iids of ``strings`` in one of the interning tables; new ones are written first."""
        table = self.interned[kind]
        new = []
        for s in strings:
            if s not in table:
                table[s] = len(table) + 1
                new.append(s)
        if new:
            field = _INTERNED_FIELDS[kind]
            entries = b"".join(pbytes(field, pint(1, table[s]) + pbytes(2, s)) for s in new)
            self.packet(pint(_SEQ, SEQ_ID) + pint(_SEQ_FLAGS, _NEEDS_STATE) + pbytes(_INTERNED, entries))
        return [table[s] for s in strings]

    def intern_column(self, kind: str, values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """(iid per row, valid per row) of a string column."""
        values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        if not pa.types.is_dictionary(values.type):
            values = pc.dictionary_encode(values)
        iids = np.asarray(self.intern(kind, values.dictionary.to_pylist()) + [0], np.uint64)
        valid = ~np.asarray(values.is_null(), bool)
        index = values.indices.fill_null(len(values.dictionary)).to_numpy(zero_copy_only=False)
        return iids[index], valid

    def track(self, name: str, *, parent: int | None = None, process: tuple[int, str] | None = None,
              thread: tuple[int, int, str] | None = None, counter: str | None = None, rank: int | None = None,
              description: str | None = None, explicit_order: bool = False) -> int:
        """Describe a track; its uuid."""
        uuid = self.next_uuid
        self.next_uuid += 1
        body = pint(1, uuid)
        if parent is not None:
            body += pint(5, parent)
        if process is not None:
            body += pbytes(3, pint(1, process[0]) + pbytes(6, process[1]))
        elif thread is not None:
            body += pbytes(4, pint(1, thread[0]) + pint(2, thread[1]) + pbytes(5, thread[2]))
        else:
            body += pbytes(2, name)
        if counter is not None:
            body += pbytes(8, pbytes(6, counter) if counter else b"")
        if description:
            body += pbytes(14, description)
        if rank is not None:
            body += pint(12, rank)
        if explicit_order:  # children in the order of their sibling_order_rank
            body += pint(11, 3)
        self.packet(pint(_SEQ, SEQ_ID) + pbytes(_TRACK_DESCRIPTOR, body))
        return uuid


@dataclasses.dataclass
class Arg:
    """One argument of a kind of slice: its name, type (int, double, bool, str) and values (NULL: left out)."""
    name: str
    kind: str
    values: object


_ARROW_TYPES = {"str": pa.string(), "int": pa.int64(), "double": pa.float64(), "bool": pa.bool_()}


def encode_args(w: Writer, args: Sequence[Arg], n: int) -> list[Col]:
    out = []
    for a in args:
        name = pint(_ARG_NAME_IID, w.intern("arg_names", [a.name])[0])
        arr = a.values
        if isinstance(arr, list):
            arr = pa.array(arr, _ARROW_TYPES[a.kind])
        elif isinstance(arr, pa.ChunkedArray | pa.Array) and arr.type != _ARROW_TYPES[a.kind]:
            arr = arr.cast(_ARROW_TYPES[a.kind])
        if a.kind == "str":
            iids, valid = w.intern_column("strings", arr)
            value = f_varint(_ARG_STRING_IID, iids)
        else:
            if isinstance(arr, pa.ChunkedArray | pa.Array):
                valid = ~np.asarray(arr.is_null(), bool)
                arr = arr.fill_null(False if a.kind == "bool" else 0).to_numpy(zero_copy_only=False)
            else:
                arr = np.asarray(arr)
                valid = np.ones(n, bool)
            if a.kind == "double":
                arr = arr.astype(np.float64)
                valid &= np.isfinite(arr)
                value = f_fixed64(_ARG_DOUBLE, arr)
            elif a.kind == "bool":
                value = f_varint(_ARG_BOOL, arr.astype(bool))
            else:
                value = f_varint(_ARG_INT, arr.astype(np.int64))
        out.append(f_message(_TE_ARGS, cat([const(name, n), value]), valid))
    return out


def emit_slices(w: Writer, track: np.ndarray, start: np.ndarray, end: np.ndarray, name_iid: np.ndarray,
                category: int | np.ndarray, args: Sequence[Col] = (), flows: Col | None = None,
                order: np.ndarray | None = None) -> None:
    """A chunk of slices as begin and end packets. Without ``order`` each slice's end follows its begin (tracks whose
    slices never overlap: ties at a time resolve in file order, which Perfetto keeps); ``order`` gives the packet
    order (rows of the begins, then of the ends) for tracks whose slices nest."""
    n = len(start)
    if n == 0:
        return
    trk = f_varint(_TE_TRACK, track)
    if isinstance(category, int):
        head = const(pint(_TE_TYPE, SLICE_BEGIN) + pint(_TE_CATEGORY_IIDS, category), n)
    else:
        head = cat([const(pint(_TE_TYPE, SLICE_BEGIN), n), f_varint(_TE_CATEGORY_IIDS, category)])
    begin_event = cat([head, trk, f_varint(_TE_NAME_IID, name_iid), *args, flows])
    seq = pint(_SEQ, SEQ_ID) + pint(_SEQ_FLAGS, _NEEDS_STATE)
    begins = cat([f_varint(_TS, start), f_message(_TRACK_EVENT, begin_event), const(seq, n)])
    ends = cat([f_varint(_TS, end), f_message(_TRACK_EVENT, cat([const(pint(_TE_TYPE, SLICE_END), n), trk])),
                const(pint(_SEQ, SEQ_ID), n)])
    begins, ends = f_message(_PACKET, begins), f_message(_PACKET, ends)
    if order is None:  # each row: a begin, then its end
        w.framed(cat([begins, ends]))
    else:
        w.framed(take(stack(begins, ends), order))


def emit_counters(w: Writer, track: int, ts: np.ndarray, values: np.ndarray) -> None:
    n = len(ts)
    if n == 0:
        return
    event = cat([const(pint(_TE_TYPE, COUNTER) + pint(_TE_TRACK, track), n), f_fixed64(_TE_COUNTER_DOUBLE, values)])
    w.packets(cat([f_varint(_TS, ts), f_message(_TRACK_EVENT, event), const(pint(_SEQ, SEQ_ID), n)]))


def nested_order(start: np.ndarray, end: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Packet order (begin rows 0..n-1, end rows n..2n-1) for slices that nest on their track: by time; at one time
    ends before begins, inner ends before outer ends, outer begins before inner begins (``rank``: a slice's place
    among those of its track sorted by start, longest first), and a slice of no duration ends right after it
    begins."""
    n = len(start)
    ts = np.concatenate([start, end])
    zero = np.concatenate([end == start, end == start])
    phase = np.concatenate([np.ones(n, np.int64), np.zeros(n, np.int64)])
    phase[n:][zero[n:]] = 1  # a zero-length slice's end goes with the begins...
    # ...right after its own begin: begins by (-end, rank, 0), ends of zero-length slices (-end, rank, 1)
    k1 = np.concatenate([-end, -start])
    k1[n:][zero[n:]] = -end[zero[n:]]
    k2 = np.concatenate([rank, -rank])
    k2[n:][zero[n:]] = rank[zero[n:]]
    k3 = np.concatenate([np.zeros(n, np.int64), np.ones(n, np.int64)])
    return np.lexsort((k3, k2, k1, phase, ts))


class Lanes:
    """Which of a track's lanes each slice goes to, so that no lane holds two slices that overlap without nesting
    (``nest``) or that overlap at all. Lanes are kept across chunks: call in order of start, per track."""

    def __init__(self, nest: bool):
        self.nest = nest
        self.state: dict[object, list[list[int]]] = {}  # key -> per lane, the ends of its open slices (a stack)

    def assign(self, key, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        lanes = self.state.setdefault(key, [[]])
        if len(start) == 0:
            return np.zeros(0, np.int64)
        if not self.nest and len(lanes) == 1:  # the common case: one lane, nothing overlaps
            prior = np.maximum.accumulate(end)
            first_ok = not lanes[0] or start[0] >= lanes[0][-1]
            if first_ok and (len(start) == 1 or (start[1:] >= prior[:-1]).all()):
                lanes[0][:] = [int(prior[-1])]
                return np.zeros(len(start), np.int64)
        out = np.empty(len(start), np.int64)
        for i, (s, e) in enumerate(zip(start.tolist(), end.tolist(), strict=True)):
            for j, stack_ in enumerate(lanes):
                while stack_ and stack_[-1] <= s:
                    stack_.pop()
                if not stack_ or (self.nest and e <= stack_[-1]):
                    stack_.append(e)
                    out[i] = j
                    break
            else:
                lanes.append([e])
                out[i] = len(lanes) - 1
        return out


# -- what is exported -----------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Summary:
    """What an export wrote: slices per kind, counter samples, flows, bytes and seconds."""
    path: Path
    slices: dict[str, int]
    counters: int
    flows: dict[str, int]
    bytes: int
    seconds: float
    runs: int

    def text(self) -> str:
        parts = ", ".join(f"{v} {k}" for k, v in self.slices.items() if v)
        flows = ", ".join(f"{v} {k}" for k, v in self.flows.items() if v) or "none"
        return (f"{self.path}: {self.runs} run(s): {parts}; {self.counters} counter samples; flows: {flows}; "
                f"{self.bytes / 1e6:.1f} MB in {self.seconds:.1f} s")


_GPU_SQL = """
SELECT f.run_id, f.device_id, f.global_pid, f.stream_id, f.activity, f.kind, f.name, f.start_ns, f.end_ns,
       f.correlation_id, f.grid, f.block, f.bytes, f.overlap_ns, f.overlap_fraction, f.comm_fraction,
       f.corunner_kind, f.corunner_sms, f.step_text,
       b.t0_ns, b.baseline, CASE WHEN b.t0_ns > 0 THEN f.dur_ns / b.t0_ns - 1 END AS slowdown,
       p.sm_pt, p.dram_pt, p.cache_pt, p.clock_pt, p.link_pt,
       a.class, a.reason, a.slowdown AS row_slowdown, a.slowdown_lo AS row_slowdown_lo,
       a.slowdown_hi AS row_slowdown_hi, a.significant, a.memory_explanation,
       l.flow_id AS launch_flow, wf.flows AS wait_flows
FROM instance_facts f
LEFT JOIN _instance_baselines b ON b.run_id = f.run_id AND b.activity_id = f.activity_id
LEFT JOIN _pf_predictions p ON p.run_id = f.run_id AND p.activity_id = f.activity_id
LEFT JOIN kernel_attribution a ON a.run_id = f.run_id AND a.group_id = b.group_id AND a.nvtx IS NULL
LEFT JOIN _pf_launches l ON l.run_id = f.run_id AND l.global_pid = f.global_pid
     AND l.correlation_id = f.correlation_id
LEFT JOIN (SELECT run_id, device_id, start_ns, end_ns, list(flow_id ORDER BY flow_id) AS flows FROM _pf_waits
           GROUP BY ALL) wf
     ON wf.run_id = f.run_id AND wf.device_id = f.device_id AND wf.start_ns = f.start_ns AND wf.end_ns = f.end_ns
     AND f.activity = 'kernel' AND f.kind = 'comm'
ORDER BY f.run_id, f.device_id, f.global_pid, f.stream_id, f.start_ns, f.end_ns DESC, f.activity_id
"""

# a launch call and the one GPU activity it launched (graph launches, which start many, are left without a flow)
_LAUNCHES_SQL = """
CREATE OR REPLACE TEMP TABLE _pf_launches AS
WITH acts AS (
    SELECT run_id, global_pid, correlation_id FROM instance_facts
    GROUP BY ALL HAVING count(*) = 1
), calls AS (
    SELECT run_id, global_pid, correlation_id FROM runtime_api WHERE correlation_id IS NOT NULL
    GROUP BY ALL HAVING count(*) = 1
)
SELECT run_id, global_pid, correlation_id, row_number() OVER (ORDER BY run_id, global_pid, correlation_id) AS flow_id
FROM acts JOIN calls USING (run_id, global_pid, correlation_id)
"""

# each wait of a rank for a late one: the waiting rank's interval, and the late rank's collective kernel
_WAITS_SQL = """
CREATE OR REPLACE TEMP TABLE _pf_waits AS
SELECT w.run_id, w.device_id AS waiting_device_id, w.comm_op, w.comm_id, w.message_bytes, w.seq, w.ranks,
       w.start_ns AS wait_start_ns, w.start_ns + w.wait_ns AS wait_end_ns, w.wait_ns, w.transfer_ns,
       c.device_id, c.start_ns, c.end_ns,
       (1::BIGINT << 40) + row_number() OVER (ORDER BY w.run_id, w.device_id, w.start_ns, w.comm_op, w.seq) AS flow_id
FROM collective_waits w
JOIN collective_waits c ON c.run_id = w.run_id AND c.device_id = w.late_device_id AND c.comm_op = w.comm_op
     AND c.comm_id IS NOT DISTINCT FROM w.comm_id AND c.seq = w.seq
WHERE w.wait_ns > 0 AND w.late_device_id <> w.device_id AND w.nvtx IS NULL AND c.nvtx IS NULL
"""


def _table(con: duckdb.DuckDBPyConnection, sql: str) -> pa.Table:
    return con.sql(sql).to_arrow_table()


def _batches(con: duckdb.DuckDBPyConnection, sql: str) -> Iterator[pa.RecordBatch]:
    for batch in con.sql(sql).to_arrow_reader(CHUNK):
        if batch.num_rows:
            yield batch


def _np(batch: pa.RecordBatch | pa.Table, name: str, fill=0) -> np.ndarray:
    col = batch.column(name)
    if col.null_count:
        col = col.fill_null(fill)
    return col.to_numpy(zero_copy_only=False)


def _codes(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A number per distinct value of a column (runs)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    return pc.dictionary_encode(col).indices.to_numpy(zero_copy_only=False).astype(np.int64)


def _segments(keys: list[np.ndarray]) -> list[tuple[int, int]]:
    """[begin, end) row ranges of equal keys (rows sorted by them)."""
    n = len(keys[0])
    if n == 0:
        return []
    change = np.zeros(n, bool)
    change[0] = True
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    starts = np.flatnonzero(change)
    return list(zip(starts.tolist(), [*starts[1:].tolist(), n], strict=True))


class _Exporter:
    def __init__(self, con: duckdb.DuckDBPyConnection, w: Writer, attribution, api: bool):
        self.con, self.w, self.attribution, self.api = con, w, attribution, api
        self.slices = {"kernels": 0, "memcpy": 0, "memset": 0, "nvtx": 0, "cuda_api": 0, "traceql": 0}
        self.counters = 0
        self.flows = {"launch": 0, "wait": 0}
        names = ["kernel", "memcpy", "memset", "nvtx", "cuda_api", "traceql"]
        self.cat = dict(zip(names, w.intern("categories", names), strict=True))
        self.runs = [r[0] for r in con.sql("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
        self.gpu: dict[tuple[str, int], int] = {}  # (run, device) -> its process track
        self.lane_tracks: dict[tuple, int] = {}

    def run_label(self, run_id: str) -> str:
        return f" (run {run_id})" if len(self.runs) > 1 else ""

    # GPUs ------------------------------------------------------------------------------------------------------
    def gpu_processes(self) -> None:
        rows = self.con.sql("""
            WITH used AS (SELECT DISTINCT run_id, device_id FROM instance_facts
                          UNION SELECT DISTINCT run_id, device_id FROM devices)
            SELECT u.run_id, u.device_id, d.name FROM used u LEFT JOIN devices d USING (run_id, device_id)
            ORDER BY 1, 2""").fetchall()
        for i, (run_id, device, name) in enumerate(rows):
            label = f"GPU {device}" + (f": {name}" if name else "") + self.run_label(run_id)
            self.gpu[(run_id, device)] = self.w.track(label, process=(_GPU_PID_BASE + i, label), rank=i,
                                                      explicit_order=True)

    def lane_track(self, key: tuple, lane: int, name: str, parent: int, rank: int | None = None, **kw) -> int:
        full = key + (lane,)
        if full not in self.lane_tracks:
            self.lane_tracks[full] = self.w.track(name if lane == 0 else f"{name} ({lane + 1})", parent=parent,
                                                  rank=rank, **kw)
        return self.lane_tracks[full]

    def gpu_lanes(self, lanes: Lanes, kind: str, title: str, rank: int, runs: pa.ChunkedArray | pa.Array,
                  device: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """The track of each slice of one of traceql's per-GPU tracks (rows ordered by run and device): its GPU's
        ``title`` track, or a second lane of it where slices overlap without nesting."""
        run = runs.to_pylist()
        track = np.empty(len(start), np.uint64)
        for b, e in _segments([_codes(runs), device]):
            key = (kind, run[b], int(device[b]))
            lane = lanes.assign(key, start[b:e], end[b:e])
            for j in np.unique(lane).tolist():
                track[b:e][lane == j] = self.lane_track(key, j, title, self.gpu[(run[b], int(device[b]))], rank=rank)
        return track

    def gpu_activities(self) -> None:
        lanes = Lanes(nest=False)
        by_activity = np.asarray([self.cat["kernel"], self.cat["memcpy"], self.cat["memset"]], np.uint64)
        for batch in _batches(self.con, _GPU_SQL):
            n = batch.num_rows
            run = batch.column("run_id").to_pylist()
            device = _np(batch, "device_id")
            pid = _np(batch, "global_pid")
            stream = _np(batch, "stream_id", -1)
            start, end = _np(batch, "start_ns"), _np(batch, "end_ns")
            track = np.empty(n, np.uint64)
            run_codes = _codes(batch.column("run_id"))
            for b, e in _segments([run_codes, device, pid, stream]):
                key = ("stream", run[b], int(device[b]), int(pid[b]), int(stream[b]))
                lane = lanes.assign(key, start[b:e], end[b:e])
                parent = self.gpu[(run[b], int(device[b]))]
                name = f"stream {int(stream[b])}" if stream[b] >= 0 else "no stream"
                for j in np.unique(lane).tolist():
                    uuid = self.lane_track(key, j, name, parent, rank=int(stream[b]) if stream[b] >= 0 else 0,
                                           description=f"CUDA stream {int(stream[b])} of process "
                                                       f"{self.pid_of(run[b], int(pid[b]))}")
                    track[b:e][lane == j] = uuid
            name_iid, _ = self.w.intern_column("names", batch.column("name"))
            args = encode_args(self.w, self.gpu_args(batch), n)
            flows = self.gpu_flows(batch)
            activity = batch.column("activity").to_numpy(zero_copy_only=False)
            category = by_activity[np.where(activity == "memcpy", 1, np.where(activity == "memset", 2, 0))]
            emit_slices(self.w, track, start, end, name_iid, category, args, flows)
            self.slices["kernels"] += int((activity == "kernel").sum())
            self.slices["memcpy"] += int((activity == "memcpy").sum())
            self.slices["memset"] += int((activity == "memset").sum())

    def pid_of(self, run_id: str, global_pid: int) -> int:
        """The process id the trace recorded (``global_pid`` where it has none)."""
        pid = self.real_pids.get((run_id, global_pid))
        return global_pid if pid is None else pid

    def gpu_args(self, b: pa.RecordBatch) -> list[Arg]:
        overlapped = pc.fill_null(pc.greater(b.column("overlap_ns"), 0), False)
        has_t0 = pc.is_valid(b.column("t0_ns"))

        def when(cond, col):
            return pc.if_else(cond, col, pa.nulls(len(col), col.type))

        sm, dram, cache, clock, link = (np.nan_to_num(_np(b, f"{f}_pt", np.nan)) for f in
                                        ("sm", "dram", "cache", "clock", "link"))
        expl = b.column("memory_explanation").to_numpy(zero_copy_only=False)
        memory = np.where(expl == "cache", cache, np.where(expl == "dram_bw", dram, 0.0))
        has_pred = np.asarray(pc.is_valid(b.column("sm_pt")), bool)
        one = (1 + sm) * (1 + memory) * (1 + clock) * (1 + link)
        predicted = one - 1
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(np.abs(np.log(one)) > 1e-12, predicted / np.log(one), 1.0)
            parts = {"sm": sm, "dram_bw": np.where(expl == "dram_bw", dram, 0.0),
                     "cache": np.where(expl == "cache", cache, 0.0), "clock": clock, "link": link}
            parts = {k: np.where(has_pred, scale * np.log1p(v), np.nan) for k, v in parts.items()}
        raw = {k: np.where(has_pred, v, np.nan) for k, v in
               {"sm": sm, "dram_bw": dram, "cache": cache, "clock": clock, "link": link}.items()}
        grouped = pc.and_(overlapped, has_t0)
        return [
            Arg("kind", "str", b.column("kind")),
            Arg("correlation_id", "int", b.column("correlation_id")),
            Arg("grid", "str", b.column("grid")),
            Arg("block", "str", b.column("block")),
            Arg("bytes", "int", b.column("bytes")),
            Arg("nvtx_range", "str", b.column("step_text")),
            Arg("traceql.overlap_ns", "int", b.column("overlap_ns")),
            Arg("traceql.overlap_fraction", "double", when(overlapped, b.column("overlap_fraction"))),
            Arg("traceql.comm_fraction", "double", when(overlapped, b.column("comm_fraction"))),
            Arg("traceql.corunner_kind", "str", b.column("corunner_kind")),
            Arg("traceql.corunner_sms", "double", when(overlapped, b.column("corunner_sms"))),
            Arg("traceql.t0_ns", "double", b.column("t0_ns")),
            Arg("traceql.baseline", "str", b.column("baseline")),
            Arg("traceql.slowdown", "double", b.column("slowdown")),
            Arg("traceql.class", "str", when(grouped, b.column("class"))),
            Arg("traceql.reason", "str", when(grouped, b.column("reason"))),
            Arg("traceql.row.slowdown", "double", when(grouped, b.column("row_slowdown"))),
            Arg("traceql.row.slowdown_lo", "double", when(grouped, b.column("row_slowdown_lo"))),
            Arg("traceql.row.slowdown_hi", "double", when(grouped, b.column("row_slowdown_hi"))),
            Arg("traceql.row.significant", "bool", when(grouped, b.column("significant"))),
            Arg("traceql.predicted", "double", np.where(has_pred, predicted, np.nan)),
            *[Arg(f"traceql.predicted.{k}", "double", v) for k, v in parts.items()],
            *[Arg(f"traceql.model.{k}", "double", v) for k, v in raw.items()],
        ]

    def gpu_flows(self, b: pa.RecordBatch) -> Col | None:
        n = b.num_rows
        launch = b.column("launch_flow")
        waits = b.column("wait_flows")
        cols = []
        if launch.null_count < n:
            ids = _np(b, "launch_flow")
            cols.append(f_fixed64(_TE_TERMINATING_FLOWS, ids.astype(np.uint64), np.asarray(pc.is_valid(launch))))
            self.flows["launch"] += n - launch.null_count
        if waits.null_count < n:
            rows = {}
            for i, ids in enumerate(waits.to_pylist()):
                if ids:
                    rows[i] = b"".join(tag(_TE_TERMINATING_FLOWS, 1) + int(x).to_bytes(8, "little") for x in ids)
            cols.append(sparse(n, rows))
        return cat(cols) if cols else None

    def gpu_findings(self) -> None:
        """traceql's tracks on each GPU: the verdict, the overlap state, the waits for late ranks."""
        verdicts = {(v["run_id"], v["device_id"]): v for v in self.attribution.to_json()["verdicts"]}
        span = {(r, d): (s, e) for r, d, s, e in self.con.sql(
            "SELECT run_id, device_id, min(start_ns), max(end_ns) FROM instance_facts GROUP BY ALL").fetchall()}
        cat_tq = self.cat["traceql"]
        keys = [k for k in self.gpu if k in verdicts and k in span]
        if keys:
            tracks = np.asarray([self.w.track("traceql: verdict", parent=self.gpu[k], rank=-3) for k in keys],
                                np.uint64)
            rows = [verdicts[k] for k in keys]
            args = [Arg("traceql.text", "str", [r.get("text") for r in rows])]
            for name in ("compute_ms", "comm_ms", "hidden_comm_ms", "exposed_comm_ms", "compute_lost_ms",
                         "compute_lost_lo_ms", "compute_lost_hi_ms", "compute_lost_beside_comm_ms", "saved_ms",
                         "coverage_compute", "coverage_comm", "wait_ms"):
                args.append(Arg(f"traceql.{name}", "double", pa.array([r.get(name) for r in rows], pa.float64())))
            for cause in ("sm", "dram_bw", "cache", "clock", "link", "unexplained"):
                args.append(Arg(f"traceql.lost_by_cause_ms.{cause}", "double",
                                pa.array([(r.get("lost_by_cause_ms") or {}).get(cause) for r in rows], pa.float64())))
            args.append(Arg("traceql.instances_left_out", "int",
                            pa.array([r.get("instances_left_out") for r in rows], pa.int64())))
            args.append(Arg("traceql.late_device_id", "int", pa.array([r.get("late_device_id") for r in rows],
                                                                        pa.int64())))
            start = np.asarray([span[k][0] for k in keys], np.int64)
            end = np.asarray([span[k][1] for k in keys], np.int64)
            name_iid = np.asarray(self.w.intern("names", ["verdict"]) * len(keys), np.uint64)
            emit_slices(self.w, tracks, start, end, name_iid, cat_tq, encode_args(self.w, args, len(keys)))
            self.slices["traceql"] += len(keys)
        # overlap state: compute alone, communication alone, both
        lanes = Lanes(nest=False)
        for batch in _batches(self.con, "SELECT run_id, device_id, state, start_ns, end_ns FROM timeline_segments "
                                        "ORDER BY run_id, device_id, start_ns"):
            start, end = _np(batch, "start_ns"), _np(batch, "end_ns")
            track = self.gpu_lanes(lanes, "overlap", "traceql: overlap", -2, batch.column("run_id"),
                                   _np(batch, "device_id"), start, end)
            name_iid, _ = self.w.intern_column("names", batch.column("state"))
            emit_slices(self.w, track, start, end, name_iid, cat_tq)
            self.slices["traceql"] += batch.num_rows
        # waits for a late rank, each with a flow to the late rank's collective
        waits = _table(self.con, "SELECT * FROM _pf_waits ORDER BY run_id, waiting_device_id, wait_start_ns, flow_id")
        if waits.num_rows:
            start, end = _np(waits, "wait_start_ns"), _np(waits, "wait_end_ns")
            track = self.gpu_lanes(lanes, "waits", "traceql: waits for other ranks", -1, waits.column("run_id"),
                                   _np(waits, "waiting_device_id"), start, end)
            late = _np(waits, "device_id")
            names = pa.array([f"wait for device {d} ({op})" for d, op in
                              zip(late.tolist(), waits.column("comm_op").to_pylist(), strict=True)])
            name_iid, _ = self.w.intern_column("names", names)
            args = encode_args(self.w, [
                Arg("traceql.late_device_id", "int", waits.column("device_id")),
                Arg("traceql.comm_op", "str", waits.column("comm_op")),
                Arg("traceql.comm_id", "str", waits.column("comm_id")),
                Arg("traceql.message_bytes", "int", waits.column("message_bytes")),
                Arg("traceql.seq", "int", waits.column("seq")),
                Arg("traceql.ranks", "int", waits.column("ranks")),
                Arg("traceql.wait_ns", "int", waits.column("wait_ns")),
                Arg("traceql.transfer_ns", "int", waits.column("transfer_ns")),
            ], waits.num_rows)
            flows = f_fixed64(_TE_FLOWS, _np(waits, "flow_id").astype(np.uint64))
            emit_slices(self.w, track, start, end, name_iid, cat_tq, args, flows)
            self.slices["traceql"] += waits.num_rows
            self.flows["wait"] += waits.num_rows

    def gpu_counters(self) -> None:
        """GPU metrics (a counter track per GPU and metric) and NVML samples."""
        for table, skip in (("gpu_metrics_wide", ()), ("power", ("uuid",))):
            columns = [r[0] for r in self.con.sql(f"DESCRIBE {table}").fetchall()
                       if r[0] not in ("run_id", "device_id", "ts_ns", *skip)
                       and r[1] in ("DOUBLE", "BIGINT", "INTEGER", "FLOAT")]
            if not columns:
                continue
            tracks: dict[tuple, int] = {}
            quoted = ", ".join(f'"{c}"' for c in columns)
            for batch in _batches(self.con, f"SELECT run_id, device_id, ts_ns, {quoted} FROM {table} "
                                            "ORDER BY run_id, device_id, ts_ns"):
                run = batch.column("run_id").to_pylist()
                device = _np(batch, "device_id")
                ts = _np(batch, "ts_ns")
                codes = _codes(batch.column("run_id"))
                for b, e in _segments([codes, device]):
                    parent = self.gpu.get((run[b], int(device[b])))
                    if parent is None:
                        continue
                    for c in columns:
                        col = batch.column(c).slice(b, e - b)
                        if col.null_count == len(col):
                            continue
                        key = (table, run[b], int(device[b]), c)
                        if key not in tracks:
                            name = c if table == "gpu_metrics_wide" else f"NVML {c}"
                            tracks[key] = self.w.track(name, parent=parent, counter=_unit(c), rank=1000 + len(tracks))
                        valid = np.asarray(col.is_valid(), bool)
                        values = col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.float64)
                        valid &= np.isfinite(values)
                        emit_counters(self.w, tracks[key], ts[b:e][valid], values[valid])
                        self.counters += int(valid.sum())

    # CPUs ------------------------------------------------------------------------------------------------------
    def cpu_processes(self) -> None:
        """A process per CPU process with NVTX ranges or API calls (or GPU work), a thread track per thread."""
        api = "UNION SELECT DISTINCT run_id, global_pid, global_tid, tid FROM runtime_api" if self.api else ""
        threads = self.con.sql(f"""
            WITH t AS (SELECT DISTINCT run_id, global_pid, global_tid, tid FROM nvtx {api})
            SELECT t.run_id, t.global_pid, t.global_tid, t.tid, p.pid, p.name FROM t
            LEFT JOIN processes p USING (run_id, global_pid) ORDER BY 1, 2, 4, 3""").fetchall()
        gpu_pids = self.con.sql("""
            SELECT DISTINCT f.run_id, f.global_pid, p.pid, p.name FROM instance_facts f
            LEFT JOIN processes p USING (run_id, global_pid) ORDER BY 1, 2""").fetchall()
        procs: dict[tuple[str, int], tuple[int | None, str | None]] = {}
        for run_id, gpid, pid, name in gpu_pids:
            procs[(run_id, gpid)] = (pid, name)
        for run_id, gpid, _, _, pid, name in threads:
            procs.setdefault((run_id, gpid), (pid, name))
        real = [pid for pid, _ in procs.values() if pid is not None]
        unique = len(set(real)) == len(real) and all(0 < p < _GPU_PID_BASE for p in real)
        self.pids = {}
        self.real_pids = {k: pid for k, (pid, _) in procs.items()}
        self.process_track: dict[tuple[str, int], int] = {}
        for i, ((run_id, gpid), (pid, name)) in enumerate(sorted(procs.items())):
            shown = pid if unique and pid is not None else _CPU_PID_BASE + i
            self.pids[(run_id, gpid)] = shown
            label = f"{name or 'process'} (pid {pid if pid is not None else gpid}){self.run_label(run_id)}"
            self.process_track[(run_id, gpid)] = self.w.track(label, process=(shown, label), rank=100 + i)
        self.thread_track: dict[tuple[str, int], int] = {}
        tids = [row[3] for row in threads]
        tids_unique = len(set(tids)) == len(tids) and all(t is not None and 0 < t < (1 << 31) for t in tids)
        self.tids: dict[tuple[str, int], int] = {}
        for i, (run_id, gpid, gtid, tid, _, _) in enumerate(threads):
            shown_tid = tid if tids_unique else _CPU_PID_BASE + i
            self.tids[(run_id, gtid)] = tid
            self.thread_track[(run_id, gtid)] = self.w.track(
                f"thread {tid}", thread=(self.pids[(run_id, gpid)], shown_tid, f"thread {tid}"))

    def nvtx(self) -> None:
        """NVTX ranges (push/pop on their thread's track, start/end on a track of their process), marks as
        instants."""
        lanes = Lanes(nest=True)
        cat_nvtx = self.cat["nvtx"]
        rows = self.con.sql("""
            SELECT run_id, global_pid, global_tid, event_type, text, domain, start_ns, end_ns, depth,
                   CASE WHEN event_type = 'push_pop' THEN global_tid ELSE -1 END AS lane_key
            FROM nvtx WHERE end_ns IS NOT NULL AND end_ns >= start_ns
            ORDER BY run_id, global_pid, lane_key, start_ns, end_ns DESC, depth""").to_arrow_table()
        if rows.num_rows:
            run = rows.column("run_id").to_pylist()
            gpid, key = _np(rows, "global_pid"), _np(rows, "lane_key")
            gtid = _np(rows, "global_tid")
            start, end = _np(rows, "start_ns"), _np(rows, "end_ns")
            codes = _codes(rows.column("run_id"))
            track = np.empty(rows.num_rows, np.uint64)
            for b, e in _segments([codes, gpid, key]):
                k = ("nvtx", run[b], int(gpid[b]), int(key[b]))
                lane = lanes.assign(k, start[b:e], end[b:e])
                for j in np.unique(lane).tolist():
                    if key[b] >= 0 and j == 0:
                        uuid = self.thread_track[(run[b], int(gtid[b]))]
                    elif key[b] >= 0:
                        uuid = self.lane_track(k, j, f"NVTX thread {self.tids[(run[b], int(gtid[b]))]}",
                                               self.process_track[(run[b], int(gpid[b]))])
                    else:
                        uuid = self.lane_track(k, j, "NVTX start/end ranges",
                                               self.process_track[(run[b], int(gpid[b]))])
                    track[b:e][lane == j] = uuid
            texts = pc.fill_null(rows.column("text"), "(no text)")
            name_iid, _ = self.w.intern_column("names", texts)
            args = encode_args(self.w, [Arg("domain", "str", rows.column("domain")),
                                        Arg("event_type", "str", rows.column("event_type")),
                                        Arg("depth", "int", rows.column("depth"))], rows.num_rows)
            # the order of begins and ends, per track: ranks of the rows within their track as sorted
            emit_slices(self.w, track, start, end, name_iid, cat_nvtx, args,
                        order=nested_order(start, end, np.arange(rows.num_rows)))
            self.slices["nvtx"] += rows.num_rows
        marks = self.con.sql("""
            SELECT run_id, global_tid, text, domain, start_ns FROM nvtx
            WHERE end_ns IS NULL OR end_ns < start_ns ORDER BY run_id, global_tid, start_ns""").to_arrow_table()
        if marks.num_rows:
            n = marks.num_rows
            track = np.asarray([self.thread_track[(r, t)] for r, t in
                                zip(marks.column("run_id").to_pylist(), marks.column("global_tid").to_pylist(),
                                    strict=True)], np.uint64)
            name_iid, _ = self.w.intern_column("names", pc.fill_null(marks.column("text"), "(no text)"))
            args = encode_args(self.w, [Arg("domain", "str", marks.column("domain"))], n)
            event = cat([const(pint(_TE_TYPE, INSTANT) + pint(_TE_CATEGORY_IIDS, cat_nvtx), n),
                         f_varint(_TE_TRACK, track), f_varint(_TE_NAME_IID, name_iid), *args])
            self.w.packets(cat([f_varint(_TS, _np(marks, "start_ns")), f_message(_TRACK_EVENT, event),
                                const(pint(_SEQ, SEQ_ID) + pint(_SEQ_FLAGS, _NEEDS_STATE), n)]))
            self.slices["nvtx_marks"] = n

    def cuda_api(self) -> None:
        """CUDA runtime and driver calls, a track per thread, with a flow from each launch to its activity."""
        lanes = Lanes(nest=True)
        cat_api = self.cat["cuda_api"]
        for batch in _batches(self.con, """
                SELECT a.run_id, a.global_pid, a.global_tid, a.name, a.start_ns, a.end_ns, a.correlation_id,
                       a.return_value, l.flow_id
                FROM runtime_api a LEFT JOIN _pf_launches l USING (run_id, global_pid, correlation_id)
                WHERE a.end_ns >= a.start_ns
                ORDER BY a.run_id, a.global_tid, a.start_ns, a.end_ns DESC, a.correlation_id"""):
            n = batch.num_rows
            run = batch.column("run_id").to_pylist()
            gpid, gtid = _np(batch, "global_pid"), _np(batch, "global_tid")
            start, end = _np(batch, "start_ns"), _np(batch, "end_ns")
            codes = _codes(batch.column("run_id"))
            track = np.empty(n, np.uint64)
            flat = True
            for b, e in _segments([codes, gtid]):
                k = ("api", run[b], int(gtid[b]))
                lane = lanes.assign(k, start[b:e], end[b:e])
                flat &= bool(not (start[b + 1:e] < np.maximum.accumulate(end[b:e])[:-1]).any()) if e - b > 1 else True
                for j in np.unique(lane).tolist():
                    track[b:e][lane == j] = self.lane_track(
                        k, j, f"CUDA API (thread {self.tids[(run[b], int(gtid[b]))]})",
                        self.process_track[(run[b], int(gpid[b]))])
            name_iid, _ = self.w.intern_column("names", batch.column("name"))
            args = encode_args(self.w, [Arg("correlation_id", "int", batch.column("correlation_id")),
                                        Arg("return_value", "int", batch.column("return_value"))], n)
            launch = batch.column("flow_id")
            flows = None
            if launch.null_count < n:
                flows = f_fixed64(_TE_FLOWS, _np(batch, "flow_id").astype(np.uint64), np.asarray(pc.is_valid(launch)))
            emit_slices(self.w, track, start, end, name_iid, cat_api, args, flows,
                        order=None if flat else nested_order(start, end, np.arange(n)))
            self.slices["cuda_api"] += n


_GPU_PID_BASE = 1 << 30  # process ids shown for GPUs (never a real one's)
_CPU_PID_BASE = (1 << 30) + (1 << 20)  # shown for CPU processes whose ids repeat across runs


def _unit(column: str) -> str:
    for unit in ("%", "MHz", "W", "J", "C"):
        if column.endswith(f"[{unit}]") or column.endswith(f"_{unit.lower()}") or column.endswith(f"{unit} ]"):
            return unit
    if column.endswith("_pct") or "[Throughput %]" in column:
        return "%"
    return ""


def export_perfetto(inputs: Sequence[str | Path] | str | Path, out: str | Path, *, api: bool = True,
                    con: duckdb.DuckDBPyConnection | None = None,
                    progress: Callable[[str], None] | None = None) -> Summary:
    """Write the runs of ``inputs`` (run directories, nsys exports or reports: what ``traceql attribute`` takes) as
    one Perfetto protobuf trace at ``out``, whole or not at all. ``api=False`` leaves out the CUDA API calls (and the
    launch flows). Returns what was written."""
    t0 = time.perf_counter()
    say = progress or (lambda _: None)
    out = Path(out)
    with tempfile.TemporaryDirectory(prefix="traceql-export-") as workdir:
        con = con or duck.connect()
        say("attribute")
        result = attribute(inputs if not isinstance(inputs, str | Path) else [inputs], con=con, workdir=workdir)
        say("predictions")  # per instance: instance_predictions, which attribute takes medians of without keeping
        con.execute("CREATE OR REPLACE TEMP TABLE _pf_predictions AS SELECT run_id, activity_id, sm_pt, dram_pt, "
                    "cache_pt, clock_pt, link_pt FROM instance_predictions")
        say("write")
        con.execute(_LAUNCHES_SQL if api else "CREATE OR REPLACE TEMP TABLE _pf_launches AS SELECT NULL::VARCHAR AS "
                    "run_id, NULL::BIGINT AS global_pid, NULL::BIGINT AS correlation_id, NULL::BIGINT AS flow_id "
                    "WHERE false")
        con.execute(_WAITS_SQL)
        low = con.sql("SELECT min(start_ns) FROM instance_facts").fetchall()[0][0]
        if low is not None and low < 0:
            raise BadInputError(f"{', '.join(map(str, inputs if not isinstance(inputs, str | Path) else [inputs]))}: "
                                f"activities start before time 0 ({low} ns), which a Perfetto trace cannot hold")
        with replacing(out) as tmp, open(tmp, "wb", buffering=1 << 22) as fh:
            w = Writer(fh)
            ex = _Exporter(con, w, result, api)
            ex.gpu_processes()
            ex.cpu_processes()
            ex.gpu_activities()
            ex.gpu_findings()
            ex.gpu_counters()
            ex.nvtx()
            if api:
                ex.cuda_api()
            if not api:
                ex.flows["launch"] = 0
            size = w.bytes
    return Summary(out, ex.slices, ex.counters, ex.flows, size, time.perf_counter() - t0, len(ex.runs))

