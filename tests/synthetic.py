"""Build small synthetic run stores with the real schema, for tests with hand-computed answers.

    make_store(path,
               kernels=[dict(start_ns=0, end_ns=1000, name="gemm", ctas=100)],
               memcpy=[dict(start_ns=0, end_ns=500, is_peer=True)],
               devices=[dict(device_id=0, sm_count=100)])

Every table of :data:`traceql.store.schema.TABLES` is written (empty ones too) with
``traceql.store.schema.write`` into ``path/runs/run_id=<run_id>/<table>.parquet``, and the run is added to
``path/manifest.json`` in the format of :mod:`traceql.store` (several calls with different
``run_id`` build a store of several runs). Columns not given get sensible defaults:

- kernels: device 0, process 1, stream 7, a correlation id unique within the process, ``dur_ns``
  from start/end, ``grid = (ctas, 1, 1)`` and ``block = (128, 1, 1)``, ``kind`` compute (a ``comm``
  kernel gets an NCCL name), ``short_name`` = name;
- memcpy/memset: 1 MiB, device to device, ``is_peer`` False (a peer copy gets ``copy_kind`` PtoP);
- devices: one per device id used, H200-like (132 SMs, 50 MiB L2, 64 warps and 32 CTAs per SM);
- nvtx/runtime_api: thread ``global_tid = global_pid + 1``, push/pop ranges, ``cudaLaunchKernel``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from pathlib import Path

import pyarrow as pa

from traceql import store
from traceql.store import schema

RUN_ID = "5e7e7e7e00000001"
GPU_NAME = "NVIDIA H200"
NCCL_NAME = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"

DEVICE_DEFAULTS = dict(name=GPU_NAME, sm_count=132, l2_bytes=50 << 20, mem_bytes=141 << 30,
                       mem_bandwidth_Bps=4_800_000_000_000, clock_hz=1_980_000_000, cc_major=9, cc_minor=0,
                       max_smem_per_sm_bytes=233472, max_warps_per_sm=64, max_blocks_per_sm=32,
                       max_regs_per_sm=65536)


def _with_interval(row: dict) -> dict:
    if "end_ns" not in row and "dur_ns" in row:
        row["end_ns"] = row["start_ns"] + row["dur_ns"]
    row.setdefault("dur_ns", row["end_ns"] - row["start_ns"])
    return row


def _ids(row: dict, corr: itertools.count) -> dict:
    row.setdefault("device_id", 0)
    row.setdefault("global_pid", 1)
    row.setdefault("cuda_device", row["device_id"])
    row.setdefault("context_id", 1)
    row.setdefault("stream_id", 7)
    if row.get("correlation_id") is None:
        row["correlation_id"] = next(corr)
    row.setdefault("graph_node_id", None)
    return _with_interval(row)


def kernel_row(row: dict, corr: itertools.count) -> dict:
    r = _ids(dict(row), corr)
    kind = r.setdefault("kind", "compute")
    r.setdefault("name", NCCL_NAME if kind == "comm" else "kernel_A")
    r.setdefault("short_name", r["name"].split("(")[0].split("<")[0])
    if "grid_x" not in r:
        r["grid_x"] = r.get("ctas", 1)
    r.setdefault("grid_y", 1)
    r.setdefault("grid_z", 1)
    r.setdefault("block_x", 128)
    r.setdefault("block_y", 1)
    r.setdefault("block_z", 1)
    r.setdefault("ctas", r["grid_x"] * r["grid_y"] * r["grid_z"])
    r.setdefault("threads_per_block", r["block_x"] * r["block_y"] * r["block_z"])
    r.setdefault("static_smem_bytes", 0)
    r.setdefault("dynamic_smem_bytes", 0)
    r.setdefault("regs_per_thread", 0)  # 0: unknown, the occupancy model then ignores registers
    r.setdefault("family", "nccl" if kind == "comm" else None)
    for c in ("comm_op", "comm_algo", "comm_proto", "comm_dtype", "comm_redop"):
        r.setdefault(c, None)
    return r


def memcpy_row(row: dict, corr: itertools.count) -> dict:
    r = _ids(dict(row), corr)
    r.setdefault("is_peer", False)
    r.setdefault("bytes", 1 << 20)
    r.setdefault("copy_kind", "PtoP" if r["is_peer"] else "DtoD")
    r.setdefault("src_kind", "Device")
    r.setdefault("dst_kind", "Device")
    r.setdefault("src_device_id", r["device_id"])
    r.setdefault("dst_device_id", r["device_id"] + 1 if r["is_peer"] else r["device_id"])
    return r


def memset_row(row: dict, corr: itertools.count) -> dict:
    r = _ids(dict(row), corr)
    r.setdefault("bytes", 1 << 20)
    r.setdefault("value", 0)
    r.setdefault("mem_kind", "Device")
    return r


def _thread(row: dict) -> dict:
    row.setdefault("global_pid", 1)
    row.setdefault("global_tid", row["global_pid"] + 1)
    row.setdefault("tid", row["global_tid"] & 0xFFFFFF)
    return _with_interval(row)


def nvtx_row(row: dict) -> dict:
    r = _thread(dict(row))
    r.setdefault("event_type", "push_pop")
    r.setdefault("text", "range")
    r.setdefault("domain", None)
    r.setdefault("depth", 0)
    text = r["text"] or ""
    r.setdefault("case_name", text.split(";")[0].split(":", 1)[1] if text.startswith("case:") else None)
    if "labels" not in r:
        kv = [p.split("=", 1) for p in text.split(";") if p.find("=") > 0]
        r["labels"] = [(k, v) for k, v in kv] or None
    return r


def runtime_row(row: dict) -> dict:
    r = dict(row)
    if "dur_ns" not in r:
        r.setdefault("end_ns", r["start_ns"] + 5)
    r = _thread(r)
    r.setdefault("name", "cudaLaunchKernel")
    r.setdefault("return_value", 0)
    return r


def launches(kernels: Iterable[dict], *, lead_ns: int = 10, **extra) -> list[dict]:
    """runtime_api rows launching ``kernels`` (which need explicit correlation ids): ``lead_ns`` before each."""
    return [dict(global_pid=k.get("global_pid", 1), correlation_id=k["correlation_id"],
                 start_ns=k["start_ns"] - lead_ns, end_ns=k["start_ns"] - lead_ns + 5, **extra) for k in kernels]


def samples(metric: str, start_ns: int, end_ns: int, value: float, *, period_ns: int = 100,
            device_id: int = 0) -> list[dict]:
    """GPU metric samples of constant ``value`` every ``period_ns`` in [start_ns, end_ns)."""
    return [dict(device_id=device_id, ts_ns=t, metric=metric, value=float(value))
            for t in range(start_ns, end_ns, period_ns)]


def _table(name: str, rows: Sequence[dict], run_id: str) -> pa.Table:
    target = schema.LONG.get(name, schema.TABLES[name])  # GPU metrics given long, as nsys writes them (stored wide)
    cols = {}
    for f in target:
        if f.name == "run_id":
            cols[f.name] = pa.array([run_id] * len(rows), f.type)
        else:
            cols[f.name] = pa.array([r.get(f.name) for r in rows], f.type)
    unknown = {k for r in rows for k in r} - set(target.names)
    if unknown:
        raise KeyError(f"{name}: unknown columns {sorted(unknown)}")
    return pa.table(cols, schema=target)


def make_store(path: str | Path, *, kernels: Sequence[dict] = (), memcpy: Sequence[dict] = (),
               memset: Sequence[dict] = (), gpu_metrics: Sequence[dict] = (), devices: Sequence[dict] | None = None,
               nvtx: Sequence[dict] = (), runtime_api: Sequence[dict] = (), processes: Sequence[dict] | None = None,
               run_id: str = RUN_ID, gpu_name: str = GPU_NAME, **tables: Sequence[dict]) -> Path:
    """Write one synthetic run into the run store at ``path`` (created or added to); return ``path``."""
    root = Path(path)
    corr = itertools.count(1_000_000)
    rows: dict[str, list[dict]] = {t: [] for t in schema.TABLES if t != "runs"}
    rows["kernels"] = [kernel_row(k, corr) for k in kernels]
    rows["memcpy"] = [memcpy_row(m, corr) for m in memcpy]
    rows["memset"] = [memset_row(m, corr) for m in memset]
    rows["nvtx"] = [nvtx_row(n) for n in nvtx]
    rows["runtime_api"] = [runtime_row(r) for r in runtime_api]
    rows["gpu_metrics"] = [dict(m) for m in gpu_metrics]
    used = sorted({r["device_id"] for t in ("kernels", "memcpy", "memset") for r in rows[t]}
                  | {m["device_id"] for m in rows["gpu_metrics"]})
    given = {d.get("device_id", 0): dict(d) for d in devices or ()}
    for dev in used:
        given.setdefault(dev, {"device_id": dev})
    for dev, d in given.items():
        d.setdefault("device_id", dev)
        for k, v in DEVICE_DEFAULTS.items():
            d.setdefault(k, gpu_name if k == "name" else v)
        d.setdefault("uuid", f"GPU-5e7e7e7e-{run_id}-{dev}")
        d.setdefault("bus_id", f"0000:{dev + 0x18:02x}:00.0")
    rows["devices"] = [given[d] for d in sorted(given)]
    if processes is None:
        pids = sorted({r["global_pid"] for t in ("kernels", "memcpy", "memset", "nvtx", "runtime_api")
                       for r in rows[t]})
        processes = [dict(global_pid=p, pid=p >> 24 or p, name="python3", rank=None) for p in pids]
    rows["processes"] = [dict(p) for p in processes]
    for name, extra in tables.items():
        if name not in rows:
            raise KeyError(f"unknown table {name}")
        rows[name] = [dict(r) for r in extra]

    run_dir = store.run_dir(root, run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, table_rows in rows.items():
        schema.write(name, _table(name, table_rows, run_id), run_dir / f"{name}.parquet")
        counts[name] = len(table_rows)
    runs = [dict(run_id=run_id, source_path=str(root / f"{run_id}.synthetic"), source_sha256=run_id * 4,
                 source_bytes=0, format="synthetic", tool="traceql tests", tool_version="0",
                 export_schema_version="0", host="localhost", session_start_utc_ns=0,
                 gpu_names=",".join(sorted({d["name"] for d in rows["devices"]})),
                 ingested_at="2025-01-01T00:00:00+00:00", traceql_version="0", labels_json="{}")]
    schema.write("runs", _table("runs", runs, run_id), run_dir / "runs.parquet")
    counts["runs"] = 1
    with store.locked_manifest(root) as manifest:
        manifest["runs"][run_id] = dict(run_id=run_id, source_path=runs[0]["source_path"],
                                        sha256=runs[0]["source_sha256"], format="synthetic", tables=counts)
    return root

