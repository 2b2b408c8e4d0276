"""A torch.profiler trace (Kineto's Chrome-trace JSON, ``trace.json`` or ``trace.json.gz``) as the normalized tables.

What maps to what (docs/kineto.md has the whole table):

- ``kernel`` events become ``kernels``: grid, block, registers per thread and shared memory from ``args`` (Kineto
  writes static and dynamic shared memory as one sum, stored as ``dynamic_smem_bytes`` with ``static_smem_bytes``
  0), ``device`` as the device id, ``stream``, ``context`` and ``correlation`` as the ids; kind, family and the NCCL
  columns from the name (:mod:`traceql.classify`), with PyTorch's ``Collective name`` and ``dtype`` where the name
  says none.
- ``gpu_memcpy`` and ``gpu_memset`` become ``memcpy`` and ``memset`` (kind and memory kinds from the event's name,
  ``Memcpy HtoD (Pageable -> Device)``); a peer copy names its devices (``fromDevice``, ``toDevice``).
- ``cuda_runtime`` and ``cuda_driver`` become ``runtime_api``, with the correlation id that links each to its kernel.
- CPU ranges become ``nvtx`` rows: ``user_annotation`` (``record_function``, ``ProfilerStep#N``) in the default
  domain, the user's, but for those PyTorch opens itself (``nccl:all_reduce``, ``DistributedDataParallel.forward``,
  ``Optimizer.step#AdamW.step``...: domain ``pytorch``); ``cpu_op`` in domain ``cpu_op``; ``record_param_comms``
  (the op that carries a collective's metadata) in domain ``NCCL``, with the labels NCCL's own NVTX payloads have
  (``Message size [bytes]``, ``NCCL communicator ID``) and PyTorch's fields; ``gpu_user_annotation`` (the user's
  ranges projected onto the GPU) in domain ``gpu_user_annotation``, on a pseudo-thread per device and stream.
- ``deviceProperties`` become ``devices``; ``distributedInfo`` gives the rank.

Times: Kineto writes ``ts`` and ``dur`` in microseconds with three decimals (nanoseconds); they are read as the text
they are written in and converted exactly, never through a binary float, to int64 ns on the trace's own timeline
(``baseTimeNanoseconds``, when the trace has it, is the session start). Process and thread ids become nsys-like
global ids: ``global_pid = pid << 24``, ``global_tid = global_pid | tid``.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import re
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from pathlib import Path

import pyarrow as pa

from ... import classify
from ...errors import BadInputError

KINETO_FORMAT = "kineto"
TOOL = "PyTorch Profiler (Kineto)"
TID_MASK = 0xFFFFFF
_COMPRESSED = {".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open}

# Kineto's activity categories (ActivityType's names; the capitalized ones are PyTorch 1.8-1.9's)
KERNEL = {"kernel"}
MEMCPY = {"gpu_memcpy", "memcpy"}
MEMSET = {"gpu_memset", "memset"}
RUNTIME = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
USER = {"user_annotation"}
CPU_OP = {"cpu_op", "operator"}
GPU_USER = {"gpu_user_annotation"}
KNOWN = KERNEL | MEMCPY | MEMSET | RUNTIME | USER | CPU_OP | GPU_USER | {
    "python_function", "cpu_instant_event", "overhead", "cuda_sync", "cuda_profiler_range", "external_correlation",
    "trace", "ac2g", "fwdbwd", "mtia_runtime", "mtia_ccp_events", "xpu_runtime", "privateuse1_runtime",
    "privateuse1_driver", "glow_runtime", "hpu_op"}

# record_function ranges that PyTorch itself opens (its collectives, DDP and FSDP, optimizers), not the user: domain
# "pytorch", which, like every library's domain, never makes a step
PYTORCH_RANGES = re.compile(r"(?:nccl|gloo|ucc|mpi|xccl):|DistributedDataParallel\.|FullyShardedDataParallel\.|FSDP::|"
                            r"Optimizer\.|autograd::|## ")
PARAM_COMMS = "record_param_comms"  # the CPU op that carries a collective's metadata (c10d)
# bytes per element of PyTorch's dtypes, as record_param_comms names them (c10::ScalarType)
DTYPE_BYTES = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Int": 4, "Long": 8, "Short": 2, "Char": 1,
               "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "ComplexHalf": 4, "UInt16": 2,
               "UInt32": 4, "UInt64": 8, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1,
               "Float8_e5m2fnuz": 1, "Float8_e8m0fnu": 1}
# the NCCL data type names traceql.classify gives, for PyTorch's
DTYPE_NAMES = {"Float": "f32", "Double": "f64", "Half": "f16", "BFloat16": "bf16", "Int": "i32", "Long": "i64",
               "Char": "i8", "Byte": "u8", "UInt32": "u32", "UInt64": "u64", "Float8_e4m3fn": "f8e4m3",
               "Float8_e5m2": "f8e5m2"}
# PyTorch's collective names (c10d), as traceql names the collective (kernels.comm_op)
COLLECTIVES = {"allreduce": "all_reduce", "allreduce_coalesced": "all_reduce", "allgather": "all_gather",
               "_allgather_base": "all_gather", "all_gather_into_tensor_coalesced": "all_gather",
               "allgather_into_tensor_coalesced": "all_gather", "allgather_coalesced": "all_gather",
               "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
               "reduce_scatter_tensor_coalesced": "reduce_scatter", "broadcast": "broadcast", "reduce": "reduce",
               "all_to_all": "all_to_all", "all_to_allv": "all_to_all", "alltoall": "all_to_all",
               "alltoall_base": "all_to_all", "send": "send", "recv": "recv"}
# CUPTI's memory kinds as Kineto names them in a copy's or set's name, as the nsys adapter names them
MEM_KINDS = {"pageable": "pageable", "pinned": "pinned", "device": "device", "array": "array", "managed": "managed",
             "device static": "device_static", "managed static": "managed_static", "unknown": "unknown"}
COPY_KINDS = {"HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP", "unknown"}
_MEMCPY_NAME = re.compile(r"Memcpy (\w+)(?: \((.+?) -> (.+?)\))?")
_MEMSET_NAME = re.compile(r"Memset \((.+?)\)")


@dataclass
class KinetoTrace:
    """One trace read: its normalized tables (Arrow, without run_id), what it says of itself, and notes."""

    path: Path
    tables: dict[str, pa.Table]
    meta: dict = field(default_factory=dict)  # schemaVersion, rank, world_size, base time, versions
    warnings: list[str] = field(default_factory=list)

    @property
    def rank(self) -> int | None:
        return self.meta.get("rank")

    @property
    def session_start_ns(self) -> int | None:
        base = self.meta.get("baseTimeNanoseconds")
        return base if isinstance(base, int) and base > 0 else None


def is_kineto_path(path: str | Path) -> bool:
    """``.json``, possibly compressed (``.json.gz``, ``.json.xz``, ``.json.bz2``, ``.json.zst``): torch.profiler's
    ``export_chrome_trace`` and ``tensorboard_trace_handler`` write ``*.pt.trace.json`` (``.gz`` with
    ``use_gzip=True``)."""
    name = Path(path).name.lower()
    return name.endswith(".json") or any(name.endswith(f".json{s}") for s in (*_COMPRESSED, ".zst"))


# -- reading the JSON ------------------------------------------------------------------------------------------------
def _open(path: Path):
    suffix = path.suffix.lower()
    if suffix == ".zst":  # not in the standard library before Python 3.14; pyarrow has it
        return pa.CompressedInputStream(pa.OSFile(str(path)), "zstd")
    return _COMPRESSED.get(suffix, open)(path, "rb")


def load(path: Path, shown: Path | None = None) -> dict:
    """The trace's top-level JSON object, numbers with a fraction kept as their text (exact times). A file that is
    truncated, damaged, not JSON or not a Chrome trace object is bad input that names it."""
    shown = shown or path
    damaged = (OSError, EOFError, lzma.LZMAError, zlib.error, pa.ArrowException)
    try:
        with _open(path) as fh:
            data = json.load(fh, parse_float=str)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":
            raise BadInputError(f"{shown}: several JSON values one after the other (line {exc.lineno}), not the one "
                                "object torch.profiler writes (newline-delimited JSON, as `nsys export -t json` "
                                "writes, is not a Kineto trace: give nsys's .nsys-rep or SQLite export "
                                "instead)") from exc
        raise BadInputError(f"{shown}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); a "
                            "torch.profiler trace cut short (the program stopped while writing it, or a partial "
                            "copy) reads so: export it again") from exc
    except UnicodeDecodeError as exc:
        raise BadInputError(f"{shown}: not a text JSON file ({exc.reason}); give the trace torch.profiler wrote "
                            "(trace.json or trace.json.gz)") from exc
    except damaged as exc:
        raise BadInputError(f"{shown}: cannot be read ({exc}); the file is damaged or truncated, copy it again") \
            from exc
    except RecursionError as exc:
        raise BadInputError(f"{shown}: JSON nested too deep to be a torch.profiler trace") from exc
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        what = "a JSON array" if isinstance(data, list) else "JSON without a traceEvents list" \
            if isinstance(data, dict) else "a JSON value that is not an object"
        raise BadInputError(f"{shown}: {what}, not a torch.profiler (Kineto) trace, which is an object with "
                            "\"traceEvents\"; give the file torch.profiler's export_chrome_trace or "
                            "tensorboard_trace_handler wrote")
    return data


def ns(value) -> int | None:
    """Kineto's microseconds (an int, or a number's text as :func:`load` keeps it) as int64 nanoseconds, exactly:
    ``1234.567`` us is 1234567 ns; a fourth decimal rounds half to even."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value * 1000
    if not isinstance(value, str):
        return None
    text = value.strip()
    whole, dot, frac = text.partition(".")
    if dot and len(frac) <= 3 and frac.isdigit() and whole.lstrip("-").isdigit():
        sign = -1 if whole.startswith("-") else 1
        return sign * (abs(int(whole)) * 1000 + int(frac.ljust(3, "0")))
    try:
        return int((Decimal(text) * 1000).to_integral_value(ROUND_HALF_EVEN))
    except (InvalidOperation, ValueError):
        return None


def _int(value) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            try:
                f = float(value)
            except ValueError:
                return None
            return int(f) if f.is_integer() else None
    return None


def _dims(value) -> tuple[int | None, int | None, int | None]:
    if isinstance(value, list) and len(value) == 3:
        x, y, z = (_int(v) for v in value)
        return x, y, z
    return None, None, None


def _text(value) -> str:
    """A label's value as text: strings as they are, numbers as written, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value)


# -- the tables ------------------------------------------------------------------------------------------------------
def read_trace(path: str | Path, shown: str | Path | None = None) -> KinetoTrace:
    """Read a torch.profiler trace into the normalized tables (``devices``, ``processes``, ``kernels``, ``memcpy``,
    ``memset``, ``nvtx``, ``runtime_api``). ``shown``: the name errors give (the user's file)."""
    path = Path(path)
    shown = Path(shown) if shown else path
    data = load(path, shown)
    events = [e for e in data["traceEvents"] if isinstance(e, dict)]
    cats = Counter(str(e.get("cat", "")).lower() for e in events if e.get("ph") == "X")
    if not any(c in KNOWN for c in cats) and "schemaVersion" not in data and "deviceProperties" not in data:
        seen = ", ".join(f"{c or '(none)'}" for c, _ in cats.most_common(5)) or "none"
        raise BadInputError(f"{shown}: a Chrome trace, but not one torch.profiler wrote: none of its events is of "
                            f"Kineto's categories (kernel, cpu_op, cuda_runtime, ...; this one has {seen}); give "
                            "the trace torch.profiler's export_chrome_trace or tensorboard_trace_handler wrote")
    dist = data.get("distributedInfo") if isinstance(data.get("distributedInfo"), dict) else {}
    meta = {"schemaVersion": data.get("schemaVersion"), "rank": _int(dist.get("rank")),
            "world_size": _int(dist.get("world_size")), "backend": dist.get("backend"),
            "baseTimeNanoseconds": _int(data.get("baseTimeNanoseconds")), "traceName": data.get("traceName")}
    for key in ("cupti_version", "cuda_runtime_version", "cuda_driver_version", "trace_id", "with_flops",
                "with_stack", "with_modules", "profile_memory", "record_shapes"):
        if key in data and not isinstance(data[key], dict | list):
            meta[key] = data[key]
    builder = _Builder(events, meta["rank"])
    tables = {"devices": _devices(data.get("deviceProperties"), builder.gpu_ids),
              "processes": builder.processes(), "kernels": builder.kernels(), "memcpy": builder.memcpy(),
              "memset": builder.memset(), "nvtx": builder.nvtx(), "runtime_api": builder.runtime_api()}
    return KinetoTrace(path, tables, meta, builder.warnings)


def _devices(props, gpu_ids: set[int]) -> pa.Table:
    """``deviceProperties`` (cudaGetDeviceProperties of every GPU the process saw) as ``devices``; a GPU that ran
    work but is not described gets a row with its id alone."""
    rows = {}
    for p in props if isinstance(props, list) else []:
        if not isinstance(p, dict) or _int(p.get("id")) is None:
            continue
        warp = _int(p.get("warpSize")) or 32
        threads = _int(p.get("maxThreadsPerMultiprocessor"))
        rows[_int(p["id"])] = {
            "device_id": _int(p["id"]), "name": p.get("name") if isinstance(p.get("name"), str) else None,
            "sm_count": _int(p.get("numSms")), "mem_bytes": _int(p.get("totalGlobalMem")),
            "cc_major": _int(p.get("computeMajor")), "cc_minor": _int(p.get("computeMinor")),
            "max_smem_per_sm_bytes": _int(p.get("sharedMemPerMultiprocessor")),
            "max_warps_per_sm": threads // warp if threads else None,
            "max_regs_per_sm": _int(p.get("regsPerMultiprocessor"))}
    for gpu in gpu_ids - set(rows):
        rows[gpu] = {"device_id": gpu}
    cols = {"device_id": pa.int32(), "name": pa.string(), "uuid": pa.string(), "bus_id": pa.string(),
            "sm_count": pa.int32(), "l2_bytes": pa.int64(), "mem_bytes": pa.int64(), "mem_bandwidth_Bps": pa.int64(),
            "clock_hz": pa.int64(), "cc_major": pa.int32(), "cc_minor": pa.int32(),
            "max_smem_per_sm_bytes": pa.int64(), "max_warps_per_sm": pa.int32(), "max_blocks_per_sm": pa.int32(),
            "max_regs_per_sm": pa.int32()}
    ordered = [rows[k] for k in sorted(rows)]
    return pa.table({c: pa.array([r.get(c) for r in ordered], t) for c, t in cols.items()})


def _labels(text: str) -> tuple[str | None, dict[str, str]]:
    """The ``case:NAME;key=value`` convention, parsed as the nsys adapter parses NVTX texts."""
    case = None
    if text.startswith("case:"):
        parts = text.split(";", 1)[0].split(":")
        case = parts[1] if len(parts) > 1 else ""
    labels = {}
    for part in text.split(";"):
        at = part.find("=")
        if at > 0:
            labels.setdefault(part[:at], part[at + 1:])
    return case, labels


class _Builder:
    """One pass over the events, sorted into columns per table."""

    def __init__(self, events: list[dict], rank: int | None):
        self.warnings: list[str] = []
        self.rank = rank
        self.names: dict[int, str] = {}  # pid -> process_name
        self.by_cat: dict[str, list[dict]] = defaultdict(list)
        for e in events:
            ph = e.get("ph")
            if ph == "M":
                if e.get("name") == "process_name" and _int(e.get("pid")) is not None and \
                        isinstance(e.get("args"), dict):
                    self.names.setdefault(_int(e["pid"]), str(e["args"].get("name", "")))
                continue
            if ph != "X":
                continue
            cat = str(e.get("cat", "")).lower()
            for group in (KERNEL, MEMCPY, MEMSET, RUNTIME, USER, CPU_OP, GPU_USER):
                if cat in group:
                    self.by_cat[min(group)].append(e)
                    break
        self.k_kernel, self.k_memcpy, self.k_memset = min(KERNEL), min(MEMCPY), min(MEMSET)
        self.k_runtime, self.k_user, self.k_cpu, self.k_gpu_user = min(RUNTIME), min(USER), min(CPU_OP), min(GPU_USER)
        # the process that launched each correlation id (CPU-side events carry the real pid)
        cpu_pids = Counter(_int(e.get("pid")) for k in (self.k_runtime, self.k_user, self.k_cpu)
                           for e in self.by_cat[k])
        cpu_pids.pop(None, None)
        self.main_pid = cpu_pids.most_common(1)[0][0] if cpu_pids else 0
        self.cpu_pids = sorted(cpu_pids)
        self.launcher: dict[int, int] = {}
        for e in self.by_cat[self.k_runtime]:
            args = e.get("args") if isinstance(e.get("args"), dict) else {}
            corr, pid = _int(args.get("correlation")), _int(e.get("pid"))
            if corr is not None and pid is not None:
                self.launcher.setdefault(corr, pid)
        self.gpu_ids: set[int] = set()

    # -- GPU activities -------------------------------------------------------------------------------------------
    def _activity(self, e: dict, cols: dict[str, list]) -> dict:
        """The columns every kernel, copy and set has; the event's args."""
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        start, dur = ns(e.get("ts")), ns(e.get("dur"))
        device = _int(args.get("device"))
        if device is None:
            device = _int(args.get("inDevice"))
        if device is None:
            device = _int(e.get("pid"))
        if device is not None:
            self.gpu_ids.add(device)
        corr = _int(args.get("correlation"))
        pid = self.launcher.get(corr, self.main_pid) if corr is not None else self.main_pid
        stream = _int(args.get("stream"))
        values = {"global_pid": pid << 24, "device_id": device, "cuda_device": device,
                  "context_id": _int(args.get("context", args.get("inContext"))),
                  "stream_id": stream if stream is not None else _int(e.get("tid")), "correlation_id": corr,
                  "start_ns": start, "end_ns": None if start is None or dur is None else start + dur,
                  "dur_ns": dur, "graph_node_id": None}
        for c, v in values.items():
            cols[c].append(v)
        return args

    def kernels(self) -> pa.Table:
        cols: dict[str, list] = defaultdict(list)
        collective, dtype = [], []
        for e in self.by_cat[self.k_kernel]:
            args = self._activity(e, cols)
            name = str(e.get("name", ""))
            cols["name"].append(name)
            grid, block = _dims(args.get("grid")), _dims(args.get("block"))
            for axis, g, b in zip("xyz", grid, block, strict=True):
                cols[f"grid_{axis}"].append(g)
                cols[f"block_{axis}"].append(b)
            cols["ctas"].append(grid[0] * grid[1] * grid[2] if None not in grid else None)
            cols["threads_per_block"].append(block[0] * block[1] * block[2] if None not in block else None)
            smem = _int(args.get("shared memory"))
            cols["static_smem_bytes"].append(0 if smem is not None else None)
            cols["dynamic_smem_bytes"].append(smem)
            cols["regs_per_thread"].append(_int(args.get("registers per thread")))
            collective.append(args.get("Collective name"))
            dtype.append(args.get("dtype"))
        names = cols["name"]
        classes = {n: classify.classify(n) for n in dict.fromkeys(names)}
        shorts = {n: classify.short_name(n) for n in classes}
        cols["short_name"] = [shorts[n] for n in names]
        for col in ("kind", "family", "comm_op", "comm_algo", "comm_proto", "comm_dtype", "comm_redop"):
            cols[col] = [getattr(classes[n], col) for n in names]
        for i, (coll, dt) in enumerate(zip(collective, dtype, strict=True)):  # PyTorch's metadata, where the name
            if cols["kind"][i] != "comm":                                    # says nothing of it
                continue
            if cols["comm_op"][i] in (None, "generic") and isinstance(coll, str) and coll in COLLECTIVES:
                cols["comm_op"][i] = COLLECTIVES[coll]
            if cols["comm_dtype"][i] is None and isinstance(dt, str) and dt in DTYPE_NAMES:
                cols["comm_dtype"][i] = DTYPE_NAMES[dt]
        return _table(cols, KERNEL_TYPES)

    def memcpy(self) -> pa.Table:
        cols: dict[str, list] = defaultdict(list)
        for e in self.by_cat[self.k_memcpy]:
            args = self._activity(e, cols)
            m = _MEMCPY_NAME.match(str(e.get("name", "")))
            kind = m.group(1) if m and m.group(1) in COPY_KINDS else None
            cols["copy_kind"].append(kind)
            cols["src_kind"].append(MEM_KINDS.get(m.group(2).lower()) if m and m.group(2) else None)
            cols["dst_kind"].append(MEM_KINDS.get(m.group(3).lower()) if m and m.group(3) else None)
            cols["bytes"].append(_int(args.get("bytes")))
            cols["src_device_id"].append(_int(args.get("fromDevice")))
            cols["dst_device_id"].append(_int(args.get("toDevice")))
            cols["is_peer"].append(kind == "PtoP")
        return _table(cols, MEMCPY_TYPES)

    def memset(self) -> pa.Table:
        cols: dict[str, list] = defaultdict(list)
        for e in self.by_cat[self.k_memset]:
            args = self._activity(e, cols)
            m = _MEMSET_NAME.match(str(e.get("name", "")))
            cols["bytes"].append(_int(args.get("bytes")))
            cols["value"].append(None)  # Kineto does not record the value set
            cols["mem_kind"].append(MEM_KINDS.get(m.group(1).lower()) if m else None)
        return _table(cols, MEMSET_TYPES)

    # -- CPU side -------------------------------------------------------------------------------------------------
    def runtime_api(self) -> pa.Table:
        cols: dict[str, list] = defaultdict(list)
        for e in self.by_cat[self.k_runtime]:
            pid, tid = _int(e.get("pid")), _int(e.get("tid"))
            args = e.get("args") if isinstance(e.get("args"), dict) else {}
            start, dur = ns(e.get("ts")), ns(e.get("dur"))
            gpid = (pid if pid is not None else self.main_pid) << 24
            cols["global_pid"].append(gpid)
            cols["global_tid"].append(gpid | ((tid or 0) & TID_MASK))
            cols["tid"].append(tid)
            cols["start_ns"].append(start)
            cols["end_ns"].append(None if start is None or dur is None else start + dur)
            cols["dur_ns"].append(dur)
            cols["name"].append(str(e.get("name", "")))
            cols["correlation_id"].append(_int(args.get("correlation")))
            cols["return_value"].append(None)
        return _table(cols, RUNTIME_TYPES)

    def nvtx(self) -> pa.Table:
        rows = []  # (global_pid, global_tid, tid, start, end, text, domain, labels)
        for key, domain in ((self.k_user, None), (self.k_cpu, "cpu_op")):
            for e in self.by_cat[key]:
                pid, tid = _int(e.get("pid")), _int(e.get("tid"))
                start, dur = ns(e.get("ts")), ns(e.get("dur"))
                gpid = (pid if pid is not None else self.main_pid) << 24
                name = str(e.get("name", ""))
                payload, dom = {}, domain
                if dom is None and PYTORCH_RANGES.match(name):
                    dom = "pytorch"
                if name == PARAM_COMMS:
                    dom, payload, name = "NCCL", _comms_labels(e.get("args")), _comms_text(e.get("args"), name)
                rows.append((gpid, gpid | ((tid or 0) & TID_MASK), tid, start,
                             None if start is None or dur is None else start + dur, name, dom, payload))
        for e in self.by_cat[self.k_gpu_user]:
            args = e.get("args") if isinstance(e.get("args"), dict) else {}
            device = _int(args.get("device"))
            device = _int(e.get("pid")) if device is None else device
            stream = _int(args.get("stream"))
            stream = _int(e.get("tid")) if stream is None else stream
            start, dur = ns(e.get("ts")), ns(e.get("dur"))
            gpid = self.main_pid << 24
            # a pseudo-thread per (device, stream), apart from every CPU thread: the device in nsys's VM byte
            gtid = gpid | (((device or 0) + 1) & 0xFF) << 48 | ((stream or 0) & TID_MASK)
            rows.append((gpid, gtid, stream, start, None if start is None or dur is None else start + dur,
                         str(e.get("name", "")), "gpu_user_annotation", {}))
        depth = _depths(rows)
        cols: dict[str, list] = defaultdict(list)
        for i, (gpid, gtid, tid, start, end, text, domain, payload) in enumerate(rows):
            case, labels = _labels(text)
            labels = {**labels, **payload}
            cols["global_pid"].append(gpid)
            cols["global_tid"].append(gtid)
            cols["tid"].append(tid)
            cols["start_ns"].append(start)
            cols["end_ns"].append(end)
            cols["dur_ns"].append(None if start is None or end is None else end - start)
            cols["event_type"].append("push_pop")
            cols["text"].append(text)
            cols["domain"].append(domain)
            cols["depth"].append(depth[i])
            cols["case_name"].append(case)
            cols["labels"].append(sorted(labels.items()) if labels else None)
        return _table(cols, NVTX_TYPES)

    def processes(self) -> pa.Table:
        pids = self.cpu_pids or ([self.main_pid] if self.by_cat[self.k_kernel] else [])
        return pa.table({"global_pid": pa.array([p << 24 for p in pids], pa.int64()),
                         "pid": pa.array(pids, pa.int64()),
                         "name": pa.array([self.names.get(p) for p in pids], pa.string()),
                         "rank": pa.array([self.rank] * len(pids), pa.int32())})


def _comms_text(args, name: str) -> str:
    """An NCCL-domain range's text: the collective PyTorch names (``allreduce``), as NCCL's own ranges name theirs."""
    coll = args.get("Collective name") if isinstance(args, dict) else None
    return coll if isinstance(coll, str) and coll else name


def _comms_labels(args) -> dict[str, str]:
    """record_param_comms' fields as labels, with the ones NCCL's NVTX payloads carry (nccl_calls reads them): the
    message size in bytes (elements of one rank's NCCL call: the output of a reduce-scatter, the input otherwise,
    times the dtype's size) and the communicator (the process group)."""
    if not isinstance(args, dict):
        return {}
    labels = {k: _text(v) for k, v in args.items() if k not in ("External id", "Record function id", "Ev Idx")
              and v is not None and not isinstance(v, list | dict)}  # not the recorded inputs' shapes and values
    coll, dtype = args.get("Collective name"), args.get("dtype")
    count = args.get("Out msg nelems") if COLLECTIVES.get(coll) == "reduce_scatter" else args.get("In msg nelems")
    if _int(count) is not None and dtype in DTYPE_BYTES:
        labels["Message size [bytes]"] = str(_int(count) * DTYPE_BYTES[dtype])
    group = args.get("Process Group Name")
    if group is not None:
        labels["NCCL communicator ID"] = _text(group)
    return labels


def _depths(rows: list[tuple]) -> list[int | None]:
    """Nesting depth of each range within its thread (0: outermost), as nsys counts push/pop ranges."""
    depth: list[int | None] = [None] * len(rows)
    by_thread: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        if r[3] is not None and r[4] is not None:
            by_thread[r[1]].append(i)
    for idx in by_thread.values():
        idx.sort(key=lambda i: (rows[i][3], -rows[i][4]))
        open_ends: list[int] = []
        for i in idx:
            start, end = rows[i][3], rows[i][4]
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            depth[i] = len(open_ends)
            open_ends.append(end)
    return depth


_IDS = {"global_pid": pa.int64(), "device_id": pa.int32(), "cuda_device": pa.int32(), "context_id": pa.int64(),
        "stream_id": pa.int64(), "correlation_id": pa.int64(), "start_ns": pa.int64(), "end_ns": pa.int64(),
        "dur_ns": pa.int64(), "graph_node_id": pa.int64()}
KERNEL_TYPES = {**_IDS, "name": pa.string(), "short_name": pa.string(),
                **{f"{p}_{a}": pa.int32() for p in ("grid", "block") for a in "xyz"}, "ctas": pa.int64(),
                "threads_per_block": pa.int32(), "static_smem_bytes": pa.int64(), "dynamic_smem_bytes": pa.int64(),
                "regs_per_thread": pa.int32(),
                **{c: pa.string() for c in ("kind", "family", "comm_op", "comm_algo", "comm_proto", "comm_dtype",
                                             "comm_redop")}}
MEMCPY_TYPES = {**_IDS, "bytes": pa.int64(), "copy_kind": pa.string(), "src_kind": pa.string(),
                "dst_kind": pa.string(), "src_device_id": pa.int32(), "dst_device_id": pa.int32(),
                "is_peer": pa.bool_()}
MEMSET_TYPES = {**_IDS, "bytes": pa.int64(), "value": pa.int64(), "mem_kind": pa.string()}
RUNTIME_TYPES = {"global_pid": pa.int64(), "global_tid": pa.int64(), "tid": pa.int64(), "start_ns": pa.int64(),
                 "end_ns": pa.int64(), "dur_ns": pa.int64(), "name": pa.string(), "correlation_id": pa.int64(),
                 "return_value": pa.int64()}
NVTX_TYPES = {"global_pid": pa.int64(), "global_tid": pa.int64(), "tid": pa.int64(), "start_ns": pa.int64(),
              "end_ns": pa.int64(), "dur_ns": pa.int64(), "event_type": pa.string(), "text": pa.string(),
              "domain": pa.string(), "depth": pa.int32(), "case_name": pa.string(),
              "labels": pa.map_(pa.string(), pa.string())}


def _table(cols: dict[str, list], types: dict[str, pa.DataType]) -> pa.Table:
    n = max((len(v) for v in cols.values()), default=0)
    return pa.table({c: pa.array(cols[c] if c in cols else [None] * n, t) for c, t in types.items()})
