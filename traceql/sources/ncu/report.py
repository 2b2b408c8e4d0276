"""Read an Nsight Compute report (``.ncu-rep``) into plain records, one per profiled kernel.

The reading is done by NVIDIA's ``ncu_report`` package (``pip install ncu-report``; no GPU needed).
That package answers "no kernels" rather than failing for a foreign, truncated or too-old file, so
the file's framing is checked here first: the ``NVR\\0`` magic, then a chain of length-prefixed blocks
whose declared sizes must fit in the file (a block header carries its payload size and how many
profiling results the payload holds).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import BadInputError

MAGIC = b"NVR\0"
# Block header fields (protobuf field numbers), read from real reports: results in the payload, payload bytes.
_NUM_RESULTS, _PAYLOAD_SIZE = 2, 5
_FILE_VERSION = 1
_MAX_HEADER = 1 << 24  # a larger header length means the bytes are not a block chain


@dataclass(frozen=True)
class Metric:
    value: float | None  # numeric metrics
    text: str | None  # string metrics (device names, cache configs, section breakdowns)
    unit: str


@dataclass
class ProfiledKernel:
    kernel_id: int  # launch order in the report, from 0
    range_id: int
    workload: str  # kernel, range, graph, cmdlist
    name: str  # demangled
    short_name: str  # function base name
    nvtx: str | None
    metrics: dict[str, Metric]


@dataclass
class Report:
    kernels: list[ProfiledKernel]
    format_version: int | None
    package_version: str
    warnings: list[str] = field(default_factory=list)


@dataclass
class Framing:
    format_version: int | None
    results: int  # profiling results the blocks declare
    complete: bool  # False: the chain could not be followed to the end (unknown layout); no verdict


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def _int_fields(buf: bytes) -> dict[int, int]:
    """The varint fields of one protobuf message (first occurrence each); raises IndexError/ValueError if malformed."""
    out: dict[int, int] = {}
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
            out.setdefault(number, value)
        elif wire == 2:
            length, i = _varint(buf, i)
            i += length
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wire}")
    if i != len(buf):
        raise ValueError("message overruns its length")
    return out


def check_framing(path: Path, shown: Path | None = None) -> Framing:
    """Refuse a file that is not an Nsight Compute report, or one cut short; count the results it declares."""
    shown = shown or path
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8 or head[:4] != MAGIC:
            raise BadInputError(f"{shown}: not an Nsight Compute report (no NVR header); give a .ncu-rep written "
                                "by `ncu -o` or `traceql collect --ncu`")
        (header_len,) = struct.unpack("<I", head[4:])
        if header_len >= _MAX_HEADER:
            raise BadInputError(f"{shown}: not an Nsight Compute report (its header length is {header_len} bytes)")
        header = f.read(header_len)
        if len(header) != header_len:
            raise BadInputError(f"{shown}: truncated Nsight Compute report (it ends inside its file header); "
                                "copy it again or collect again")
        try:
            version = _int_fields(header).get(_FILE_VERSION)
        except (IndexError, ValueError):
            return Framing(None, 0, False)
        pos, results = 8 + header_len, 0
        while pos < size:
            raw = f.read(4)
            if len(raw) < 4:
                break
            (block_len,) = struct.unpack("<I", raw)
            if block_len >= _MAX_HEADER:
                return Framing(version, results, False)
            block = f.read(block_len)
            if len(block) < block_len:
                break
            try:
                fields = _int_fields(block)
            except (IndexError, ValueError):
                return Framing(version, results, False)
            pos += 4 + block_len + fields.get(_PAYLOAD_SIZE, 0)
            if pos > size:
                break
            results += fields.get(_NUM_RESULTS, 0)
            f.seek(pos)
        else:
            return Framing(version, results, True)
    raise BadInputError(f"{shown}: truncated Nsight Compute report ({size} bytes; its last block needs more); "
                        "the copy or the collection did not finish: copy it again or collect again")


def _package():
    try:
        import ncu_report
    except ImportError as exc:
        raise BadInputError("reading Nsight Compute reports needs NVIDIA's ncu-report package: "
                            "pip install ncu-report (or pip install 'traceql[ncu]')") from exc
    return ncu_report


def _workload(ncu_report, action) -> str:
    kinds = {getattr(ncu_report.IAction, f"WorkloadType_{k.upper()}", None): k
             for k in ("kernel", "range", "graph", "cmdlist")}
    return kinds.get(action.workload_type(), "other")


def _nvtx(action) -> str | None:
    """The NVTX context ncu recorded for the kernel: push/pop stacks as a/b/c, start/end ranges, by domain."""
    state = action.nvtx_state()
    if state is None:
        return None
    parts = []
    for domain_id in state.domains():
        domain = state.domain_by_id(domain_id)
        name = domain.name()
        prefix = "" if name in ("", "<default domain>") else f"{name}@"
        stack = list(domain.push_pop_ranges())
        if stack:
            parts.append(prefix + "/".join(stack))
        parts += [prefix + r for r in domain.start_end_ranges()]
    return ";".join(parts) or None


def _metrics(ncu_report, action) -> dict[str, Metric]:
    string_kind = ncu_report.IMetric.ValueKind_STRING
    out = {}
    for name in action.metric_names():
        m = action.metric_by_name(name)
        if m is None or not m.has_value():
            continue
        if m.kind() == string_kind:
            out[name] = Metric(None, m.as_string(), m.unit())
        else:
            out[name] = Metric(m.as_double(), None, m.unit())
    return out


def read_report(path: Path, shown: Path | None = None) -> Report:
    """Every profiled kernel of the report at ``path`` (``shown`` names the file in messages)."""
    shown = shown or path
    framing = check_framing(path, shown)
    ncu_report = _package()
    try:
        ctx = ncu_report.load_report(str(path))
    except Exception as exc:  # the package raises its own types for files it refuses
        raise BadInputError(f"{shown}: ncu_report could not open it ({exc})") from exc
    version = ctx.get_version() if hasattr(ctx, "get_version") else "unknown"
    ids = ncu_report.IAction
    kernels: list[ProfiledKernel] = []
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            kernels.append(ProfiledKernel(
                kernel_id=len(kernels), range_id=r, workload=_workload(ncu_report, action),
                name=action.name(ids.NameBase_DEMANGLED), short_name=action.name(ids.NameBase_FUNCTION),
                nvtx=_nvtx(action), metrics=_metrics(ncu_report, action)))
    report = Report(kernels, framing.format_version, version)
    if not kernels:
        if framing.results:
            raise BadInputError(f"{shown}: the installed ncu_report {version} cannot read this report (format "
                                f"version {framing.format_version}, {framing.results} profiled results, none read); "
                                "install the ncu-report matching the Nsight Compute that wrote it")
        raise BadInputError(f"{shown}: the report holds no profiled kernel; did ncu's --kernel-name / --nvtx-include "
                            "filters match nothing, or did the program end before its first kernel?")
    if framing.complete and framing.results > len(kernels):
        report.warnings.append(f"{shown}: ncu_report {version} read {len(kernels)} of the {framing.results} "
                               "profiling results the report declares; the others are not ingested")
    return report
