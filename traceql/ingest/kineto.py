"""``traceql ingest trace.json[.gz]``: a torch.profiler (Kineto) trace becomes one run of the run store.

One rank's file is one run, keyed by the sha256 of its bytes like every other input, and written through the same
machinery: the tables in a staging folder of the run directory, odd rows screened and counted, each table in the
store's order, ``run.json`` last, then one rename. The run's ``format`` is ``kineto``: a Kineto trace has no GPU
metrics, no NVML samples and no Nsight Compute profile, so those tables are written empty, and attribution says
which factors it could not test for such a run (docs/kineto.md). What maps to what: :mod:`traceql.sources.kineto`.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from .. import store
from ..errors import BadInputError, MissingInputError
from ..sources.inputs import sha256_of
from ..sources.kineto import KINETO_FORMAT, KinetoTrace, is_kineto_path, read_trace
from ..sources.kineto.reader import TOOL
from ..store import schema, screen
from ..store.writer import ORDERS, RunInfo, finish_run
from ..version import __version__

__all__ = ["KINETO_FORMAT", "ingest_kineto", "is_kineto_trace", "kineto_intervals"]

TABLES = ("devices", "processes", "kernels", "memcpy", "memset", "nvtx", "runtime_api")
EVENTS = ("kernels", "memcpy", "memset", "nvtx", "runtime_api")


def is_kineto_trace(path: str | Path) -> bool:
    """A ``.json`` file, possibly compressed (``.json.gz``): what torch.profiler writes."""
    return is_kineto_path(path)


def _check(trace: Path) -> None:
    if not trace.exists():
        raise MissingInputError(f"{trace}: no such file")
    if trace.is_dir():
        raise BadInputError(f"{trace}: a directory, not a torch.profiler trace; give its trace.json files")
    if trace.stat().st_size == 0:
        raise BadInputError(f"{trace}: empty file; the profiler or the copy did not finish")


def ingest_kineto(trace: str | Path, out: str | Path, *, require_kernels: bool = True,
                  labels: dict[str, str] | None = None, index: bool = True, source: str | None = None) -> RunInfo:
    """Ingest one torch.profiler trace into the run directory ``out``; ``source``: what the run records as its
    source (by default the trace's resolved path)."""
    trace, out = Path(trace), Path(out)
    _check(trace)
    source = source or str(trace.resolve())
    digest = sha256_of(trace)
    run_id = digest[:16]
    if store.is_store(out) and run_id in (runs := store.read_manifest(out)["runs"]):
        entry = runs[run_id]
        return RunInfo(run_id, entry["source_path"], digest, entry["format"], entry.get("tables", {}), already=True,
                       repairs=entry.get("repairs", {}), labels=entry.get("labels", {}))
    read = read_trace(trace)  # bad input is refused before the run directory is touched
    if not any(read.tables[t].num_rows for t in EVENTS):
        raise BadInputError(f"{trace}: the trace holds no events (no kernels, copies, CPU ops or ranges); was the "
                            "program's work inside the profiler's schedule (its active steps)?")
    if require_kernels and read.tables["kernels"].num_rows == 0:
        raise BadInputError(f"{trace}: no CUDA kernels in the trace; was torch.profiler run with "
                            "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]? Pass --allow-no-kernels to "
                            "ingest it anyway")
    with store.staged_run(out) as tmp:
        info = RunInfo(run_id, source, digest, KINETO_FORMAT, labels=dict(labels or {}),
                       warnings=list(read.warnings))
        _write_run(read, trace, source, info, tmp)
        info.already = not store.publish_run(out, tmp, run_id, info.manifest_entry(), index=index)
    return info


def _write_run(read: KinetoTrace, trace: Path, source: str, info: RunInfo, tmp: Path) -> None:
    for table in TABLES:
        rows, dropped = _screened(table, read.tables[table])
        try:
            schema.write(table, _with_run_id(rows, info.run_id), tmp / f"{table}.parquet")
        except (pa.ArrowException, ValueError) as exc:
            raise BadInputError(f"{trace}: its {table} do not fit traceql's schema ({exc}); the trace holds values "
                                "torch.profiler does not write") from exc
        info.tables[table] = rows.num_rows
        info.repairs.update(dropped)
    for table in ("gpu_metrics", "power", "ncu_metrics", "ncu_kernels"):  # what a Kineto trace has none of
        schema.write(table, schema.empty(table), tmp / f"{table}.parquet")
        info.tables[table] = 0
    if info.repairs:
        info.warnings.append(f"{trace}: dropped {screen.describe(info.repairs)} (counted in the runs table's repairs "
                             "column)")
    devices = read.tables["devices"]
    gpus = sorted({n for n in devices.column("name").to_pylist() if n})
    meta = {k: v for k, v in read.meta.items() if v is not None}
    labels = {**info.labels, **{f"kineto_{k}": str(v) for k, v in meta.items()
                                if k not in ("baseTimeNanoseconds", "traceName")}}
    runs = pa.table({
        "run_id": [info.run_id], "source_path": [source], "source_sha256": [info.sha256],
        "source_bytes": [trace.stat().st_size], "format": [KINETO_FORMAT], "tool": [TOOL],
        "tool_version": [None],
        "export_schema_version": [None if meta.get("schemaVersion") is None else str(meta["schemaVersion"])],
        "host": [None], "session_start_utc_ns": [read.session_start_ns], "gpu_names": [",".join(gpus)],
        "ingested_at": [dt.datetime.now(dt.UTC).isoformat(timespec="seconds")], "traceql_version": [__version__],
        "labels_json": [json.dumps(labels, sort_keys=True)],
        "repairs": pa.array([sorted(info.repairs.items())], schema.TABLES["runs"].field("repairs").type),
    })
    schema.write("runs", runs, tmp / "runs.parquet")
    info.tables["runs"] = 1
    finish_run(tmp, info)


def _screened(table: str, data: pa.Table) -> tuple[pa.Table, dict[str, int]]:
    """``data`` without its odd rows (counted by reason), in the store's order for ``table``."""
    data, dropped = screen.screen(table, data)
    if table in ORDERS and data.num_rows:
        data = data.take(pc.sort_indices(data, ORDERS[table]))
    return data, dropped


def _with_run_id(data: pa.Table, run_id: str) -> pa.Table:
    return data.append_column("run_id", pa.repeat(pa.scalar(run_id, pa.string()), data.num_rows))


def kineto_intervals(trace: str | Path) -> tuple[RunInfo, dict[str, pa.Table]]:
    """What ``traceql overlap`` reads of a torch.profiler trace, as :func:`traceql.ingest.read_intervals` gives it
    for an nsys export: the run (id and source as ingest records them) and its screened ``kernels`` and ``memcpy``,
    each row tagged with the run id."""
    trace = Path(trace)
    _check(trace)
    read = read_trace(trace)
    digest = sha256_of(trace)
    info = RunInfo(digest[:16], str(trace.resolve()), digest, KINETO_FORMAT)
    data = {}
    for table, last in (("kernels", "kind"), ("memcpy", "is_peer")):  # the columns and order nsys's give
        rows, dropped = _screened(table, read.tables[table])
        info.repairs.update(dropped)
        rows = rows.select(["global_pid", "device_id", "correlation_id", "start_ns", "end_ns", last])
        data[table] = _with_run_id(rows, info.run_id)
    return info, data
