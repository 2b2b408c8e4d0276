"""``traceql ingest``: nsys exports and reports into the run store (schema v1).

Accepts an nsys SQLite export, an ``nsys export -t parquetdir`` directory, or an ``.nsys-rep``
(exported once through nsys, cached beside it). Each trace becomes one run, keyed by the sha256
of its content: ingesting the same file again changes nothing.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from . import __version__, schema, store
from .errors import BadInputError, MissingInputError, TraceqlError
from .nsys.adapter import adapter_for
from .nsys.locate import export_report
from .nsys.source import open_source

EVENT_TABLES = ("kernels", "memcpy", "memset", "nvtx", "runtime_api", "gpu_metrics")


@dataclass
class RunInfo:
    run_id: str
    source_path: str
    sha256: str
    format: str
    tables: dict[str, int] = field(default_factory=dict)
    already: bool = False
    warnings: list[str] = field(default_factory=list)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        if path.is_dir():
            h.update(f.relative_to(path).as_posix().encode() + b"\0")
        with f.open("rb") as fh:
            while chunk := fh.read(1 << 22):
                h.update(chunk)
    return h.hexdigest()


DECOMPRESSORS = {".xz": "lzma", ".gz": "gzip", ".bz2": "bz2"}


def _decompress(path: Path, dest: Path) -> Path:
    """Decompress a compressed export (``run.sqlite.xz``) to ``dest``; the input is left as it is."""
    import importlib

    module = importlib.import_module(DECOMPRESSORS[path.suffix])
    try:
        with module.open(path, "rb") as src, dest.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 22)
    except (OSError, EOFError, ValueError) as exc:
        raise BadInputError(f"{path}: cannot decompress ({exc}); the file is damaged or truncated") from exc
    return dest


def _resolve_input(path: Path) -> tuple[Path, str]:
    """The export to read for ``path`` and the input's format name."""
    if not path.exists():
        raise MissingInputError(f"{path}: no such file or directory")
    if path.is_dir():
        if store.is_store(path):
            raise BadInputError(f"{path}: is already a traceql run directory; query it with `traceql sql {path} ...`")
        return path, "nsys-parquetdir"
    if path.suffix == ".qdstrm":
        raise BadInputError(f"{path}: an unfinished nsys collection (.qdstrm): the profiler was interrupted before "
                            f"it wrote the .nsys-rep; run `QdstrmImporter -i {path}` from the Nsight Systems host "
                            "folder to recover it, or collect again")
    if path.stat().st_size == 0:
        raise BadInputError(f"{path}: empty file; the export or copy did not finish")
    if path.suffix == ".nsys-rep":
        return path, "nsys-rep"
    return path, "nsys-sqlite"


def ingest_one(trace: str | Path, out: str | Path, *, require_kernels: bool = True,
               labels: dict[str, str] | None = None, power_file: str | Path | None = None) -> RunInfo:
    trace, out = Path(trace), Path(out)
    path, fmt = _resolve_input(trace)
    digest = sha256_of(path)
    run_id = digest[:16]
    if store.is_store(out) and run_id in store.read_manifest(out)["runs"]:
        info = store.read_manifest(out)["runs"][run_id]
        return RunInfo(run_id, info["source_path"], digest, info["format"], info.get("tables", {}), already=True)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out, prefix=f".tmp-{run_id}-"))
    try:
        if fmt == "nsys-rep":
            export = export_report(path, digest)
        elif path.suffix in DECOMPRESSORS:
            export = _decompress(path, tmp / "export.sqlite")
        else:
            export = path
        info = _write_run(trace, export, fmt, digest, run_id, tmp, require_kernels, labels or {},
                          Path(power_file) if power_file else None)
        if export.parent == tmp:
            export.unlink()
        final = out / "runs" / run_id
        final.parent.mkdir(exist_ok=True)
        with store.locked_manifest(out) as manifest:
            if run_id in manifest["runs"]:  # a parallel ingest of the same file won the race
                info.already = True
            else:
                if final.exists():  # files of a run whose manifest entry never got written
                    shutil.rmtree(final)
                tmp.rename(final)
                manifest["runs"][run_id] = {k: v for k, v in asdict(info).items() if k not in ("already", "warnings")}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return info


def _power(power_file: Path, devices: pa.Table | None, session_start: int | None, trace: Path) -> pa.Table:
    """NVML samples (epoch ns, by GPU uuid) onto the trace's timeline and its device ids."""
    import pyarrow.parquet as pq

    if session_start is None:
        raise BadInputError(f"{trace}: no session start time in the export, so power samples cannot be aligned")
    samples = pq.read_table(power_file)
    con = duckdb.connect()
    con.register("samples", samples)
    con.register("devs", devices if devices is not None else schema.empty("devices").drop(["run_id"]))
    return con.sql(f"""
        SELECT d.device_id, s.uuid, s.epoch_ns - {int(session_start)} AS ts_ns, s.power_w, s.energy_j,
               s.sm_clock_mhz, s.mem_clock_mhz, s.temp_c, s.throttle_reasons, s.power_limit_w
        FROM samples s LEFT JOIN devs d ON lower(replace(s.uuid, 'GPU-', '')) = lower(replace(d.uuid, 'GPU-', ''))
        ORDER BY device_id, ts_ns""").to_arrow_table()


def _write_run(trace: Path, export: Path, fmt: str, digest: str, run_id: str, tmp: Path,
               require_kernels: bool, labels: dict[str, str], power_file: Path | None = None) -> RunInfo:
    source = open_source(export)
    con = duckdb.connect()
    con.execute("SET threads TO 2")
    info = RunInfo(run_id, str(trace.resolve()), digest, fmt)
    try:
        adapter = adapter_for(source, con)
        meta = source.meta()

        def put(table: str, data: pa.Table | None) -> None:
            data = schema.empty(table).drop(["run_id"]) if data is None else data
            data = data.append_column("run_id", pa.repeat(pa.scalar(run_id, pa.string()), data.num_rows))
            schema.write(table, data, tmp / f"{table}.parquet")
            info.tables[table] = data.num_rows

        start = None
        if "TARGET_INFO_SESSION_START_TIME" in source.tables():
            rel, _ = adapter.load("TARGET_INFO_SESSION_START_TIME", ["utcEpochNs"])
            row = con.sql(f"SELECT max(utcEpochNs) FROM {rel}").fetchall()[0]
            start = row[0] if row else None
        devices = adapter.devices()
        put("devices", devices)
        put("power", _power(power_file, devices, start, trace) if power_file else None)
        put("processes", adapter.processes())
        for table in ("kernels", "memcpy", "memset", "nvtx", "runtime_api"):
            put(table, getattr(adapter, table)())
        info.tables["gpu_metrics"] = _write_streamed("gpu_metrics", adapter.gpu_metrics(), run_id,
                                                     tmp / "gpu_metrics.parquet")
        if not any(info.tables[t] for t in EVENT_TABLES):
            raise BadInputError(f"{trace}: the trace holds no events (no kernels, copies, NVTX ranges, API calls "
                                "or GPU metrics); was the program's work inside the collection range?")
        if require_kernels and info.tables["kernels"] == 0:
            raise BadInputError(f"{trace}: no CUDA kernel data (no CUPTI_ACTIVITY_KIND_KERNEL rows); was the program "
                                "run under `nsys profile -t cuda`? Pass --allow-no-kernels to ingest it anyway")
        gpu_names = ",".join(sorted(set(devices.column("name").to_pylist()))) if devices is not None else ""
        runs = pa.table({
            "run_id": [run_id], "source_path": [str(trace.resolve())], "source_sha256": [digest],
            "source_bytes": [trace.stat().st_size if trace.is_file() else None], "format": [fmt],
            "tool": [meta.get("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems")],
            "tool_version": [meta.get("EXPORT_PRODUCT_VERSION")],
            "export_schema_version": [adapter.schema_version], "host": [meta.get("EXPORT_HOST")],
            "session_start_utc_ns": [start], "gpu_names": [gpu_names],
            "ingested_at": [dt.datetime.now(dt.UTC).isoformat(timespec="seconds")],
            "traceql_version": [__version__], "labels_json": [json.dumps(labels, sort_keys=True)],
        })
        schema.write("runs", runs, tmp / "runs.parquet")
        info.tables["runs"] = 1
        (tmp / "run.json").write_text(json.dumps(asdict(info), indent=2))
    finally:
        con.close()
        source.close()
    return info


def _write_streamed(table: str, batches, run_id: str, path: Path) -> int:
    target = schema.TABLES[table]
    rows = 0
    with schema.writer(table, path) as w:
        for batch in batches or ():
            if batch.num_rows == 0:
                continue
            cols = [pa.repeat(pa.scalar(run_id, pa.string()), batch.num_rows) if n == "run_id" else batch.column(n)
                    for n in target.names]
            cols = [c.cast(f.type) for c, f in zip(cols, target, strict=True)]
            w.write_batch(pa.RecordBatch.from_arrays(cols, schema=target))
            rows += batch.num_rows
    return rows


def ingest(traces: Sequence[str | Path] | str | Path, out: str | Path, *, require_kernels: bool = True,
           labels: dict[str, str] | None = None, jobs: int = 1, on_error: str = "raise",
           progress: Callable[[RunInfo | Exception, Path], None] | None = None) -> list[RunInfo]:
    """Ingest each trace into the run directory ``out``; return one RunInfo per trace.

    ``jobs`` > 1 ingests several traces in parallel processes (one per rank file, say).
    ``on_error='skip'`` goes on past a bad trace and reports it through ``progress``.
    """
    if isinstance(traces, str | Path):
        traces = [traces]
    if not traces:
        raise BadInputError("no trace given")
    kwargs = dict(require_kernels=require_kernels, labels=labels)
    results: list[RunInfo] = []

    def done(result: RunInfo | Exception, trace: Path) -> None:
        if progress:
            progress(result, trace)
        if isinstance(result, Exception):
            if on_error == "raise":
                raise result
        else:
            results.append(result)

    if jobs <= 1 or len(traces) == 1:
        for t in traces:
            try:
                r = ingest_one(t, out, **kwargs)
            except TraceqlError as exc:  # bad input, missing input, no nsys...
                r = exc
            done(r, Path(t))
        return results
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [(pool.submit(ingest_one, t, out, **kwargs), Path(t)) for t in traces]
        for fut, t in futures:
            try:
                r = fut.result()
            except TraceqlError as exc:
                r = exc
            done(r, t)
    return results
