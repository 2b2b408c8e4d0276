"""``traceql ingest REPORT.ncu-rep``: an Nsight Compute report becomes one run of the run store.

Same store machinery as nsys traces: the run_id is the start of the input's sha256, the tables are
written in a temporary folder inside the run directory and renamed into ``runs/run_id=<run_id>/`` before
the manifest (written atomically, under its lock) names the run. The run holds ``ncu_metrics``
(every metric of every profiled kernel), ``ncu_kernels`` (one derived row per kernel) and ``runs``;
the tables an Nsight Systems trace fills are written empty.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa

from .. import store
from ..errors import BadInputError, MissingInputError
from ..sources.inputs import DECOMPRESSORS, decompress, sha256_of
from ..sources.ncu.derive import derive
from ..sources.ncu.report import ProfiledKernel, Report, read_report
from ..store import schema
from ..store.writer import RunInfo, finish_run
from ..version import __version__

SUFFIX = ".ncu-rep"
FORMAT = "ncu-rep"
TOOL = "NVIDIA Nsight Compute"
_LAUNCH_COLUMNS = ("kernel_id", "range_id", "name", "short_name", "device_id", "nvtx", "grid_x", "grid_y", "grid_z",
                   "block_x", "block_y", "block_z", "static_smem_bytes", "dynamic_smem_bytes")


def is_ncu_report(path: str | Path) -> bool:
    """``.ncu-rep``, possibly compressed (``.ncu-rep.xz``, ``.gz``, ``.bz2``)."""
    path = Path(path)
    if path.suffix in DECOMPRESSORS:
        path = path.with_suffix("")
    return path.suffix == SUFFIX


def ingest_ncu_report(trace: str | Path, out: str | Path, *, labels: dict[str, str] | None = None,
                      index: bool = True) -> RunInfo:
    """Ingest one Nsight Compute report into the run directory ``out``."""
    trace, out = Path(trace), Path(out)
    if not trace.exists():
        raise MissingInputError(f"{trace}: no such file")
    if trace.is_dir():
        raise BadInputError(f"{trace}: a directory, not an Nsight Compute report")
    if trace.stat().st_size == 0:
        raise BadInputError(f"{trace}: empty file; the collection or the copy did not finish")
    digest = sha256_of(trace)
    run_id = digest[:16]
    if store.is_store(out) and run_id in store.read_manifest(out)["runs"]:
        info = store.read_manifest(out)["runs"][run_id]
        return RunInfo(run_id, info["source_path"], digest, info["format"], info.get("tables", {}), already=True)
    with store.staged_run(out) as tmp:
        path = decompress(trace, tmp / f"report{SUFFIX}") if trace.suffix in DECOMPRESSORS else trace
        report = read_report(path, shown=trace)
        if path.parent == tmp:
            path.unlink()
        info = RunInfo(run_id, str(trace.resolve()), digest, FORMAT, warnings=list(report.warnings),
                       labels=dict(labels or {}))
        _write_run(report, trace, run_id, digest, labels or {}, tmp, info)
        info.already = not store.publish_run(out, tmp, run_id, info.manifest_entry(), index=index)
    return info


def _repeat(value, type_: pa.DataType, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, type_), n)


def _metric_batch(kernel: ProfiledKernel, launch: dict, run_id: str) -> pa.RecordBatch:
    target = schema.TABLES["ncu_metrics"]
    names = sorted(kernel.metrics)
    per_metric = {
        "metric": pa.array(names, pa.string()),
        "value": pa.array([kernel.metrics[n].value for n in names], pa.float64()),
        "value_text": pa.array([kernel.metrics[n].text for n in names], pa.string()),
        "unit": pa.array([kernel.metrics[n].unit or None for n in names], pa.string()),
    }
    fixed = {"run_id": run_id, **launch}
    cols = [per_metric[f.name] if f.name in per_metric else _repeat(fixed[f.name], f.type, len(names))
            for f in target]
    return pa.RecordBatch.from_arrays(cols, schema=target)


def _write_run(report: Report, trace: Path, run_id: str, digest: str, labels: dict[str, str], tmp: Path,
               info: RunInfo) -> None:
    rows = [derive(k) for k in report.kernels]
    with schema.writer("ncu_metrics", tmp / "ncu_metrics.parquet") as w:
        for kernel, row in zip(report.kernels, rows, strict=True):
            if kernel.metrics:
                w.write_batch(_metric_batch(kernel, {c: row[c] for c in _LAUNCH_COLUMNS}, run_id))
    info.tables["ncu_metrics"] = sum(len(k.metrics) for k in report.kernels)
    kernels = pa.Table.from_pylist([{**r, "run_id": run_id} for r in rows], schema=schema.TABLES["ncu_kernels"])
    schema.write("ncu_kernels", kernels, tmp / "ncu_kernels.parquet")
    info.tables["ncu_kernels"] = kernels.num_rows
    for table in schema.TABLES:  # the tables of an Nsight Systems trace: empty here
        if table not in ("runs", "ncu_metrics", "ncu_kernels"):
            schema.write(table, schema.empty(table), tmp / f"{table}.parquet")
            info.tables[table] = 0
    gpus = sorted({r["device_name"] for r in rows if r["device_name"]})
    runs = pa.table({
        "run_id": [run_id], "source_path": [str(trace.resolve())], "source_sha256": [digest],
        "source_bytes": [trace.stat().st_size], "format": [FORMAT], "tool": [TOOL], "tool_version": [None],
        "export_schema_version": [None if report.format_version is None else str(report.format_version)],
        "host": [None], "session_start_utc_ns": [None], "gpu_names": [",".join(gpus)],
        "ingested_at": [dt.datetime.now(dt.UTC).isoformat(timespec="seconds")], "traceql_version": [__version__],
        "labels_json": [json.dumps({**labels, "ncu_report_package": report.package_version}, sort_keys=True)],
        "repairs": pa.array([[]], schema.TABLES["runs"].field("repairs").type),
    })
    schema.write("runs", runs, tmp / "runs.parquet")
    info.tables["runs"] = 1
    finish_run(tmp, info)
