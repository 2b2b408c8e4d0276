"""``traceql ingest``: nsys exports and reports into the run store (schema v1).

Accepts an nsys SQLite export, an ``nsys export -t parquetdir`` directory, or an ``.nsys-rep``
(exported once through nsys, cached beside it). Each trace becomes one run, keyed by the sha256
of its content: ingesting the same file again changes nothing. An Nsight Compute ``.ncu-rep``
goes to :mod:`traceql.sources.ncu`, into the same run store.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import duck, store
from ..errors import BadInputError, MissingInputError, TraceqlError, UsageError, check_on_error
from ..executor import Executor, run_units
from ..executor import parse as parse_executor
from ..output import unwritable
from ..sources import urls
from ..sources.inputs import DECOMPRESSORS, decompress, sha256_of
from ..sources.nsys.adapter import adapter_for
from ..sources.nsys.locate import export_report
from ..sources.nsys.source import open_source
from ..store import remote, schema, screen
from ..store.metrics import write_wide
from ..store.wide import metric_names
from ..store.writer import (
    ORDERS,
    ROW_GROUP,
    RunInfo,
    file_digest,
    finish_run,
    own_columns,
    write_run_json,
    write_streamed,
)
from ..version import __version__

EVENT_TABLES = ("kernels", "memcpy", "memset", "nvtx", "runtime_api", "gpu_metrics")
# tables a lazy ingest leaves in the export until a query needs them (store.connect reads them then): the largest
# ones, which the overlap of kernels does not read
DEFERRABLE = ("runtime_api", "nvtx", "gpu_metrics")


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
               labels: dict[str, str] | None = None, power_file: str | Path | None = None,
               index: bool = True, source: str | None = None, defer: Collection[str] = ()) -> RunInfo:
    """Ingest one trace into the run directory ``out``. ``index=False`` leaves the manifest to the caller (a worker
    of a distributed ingest writes only its run's own files). ``source``: what the run records as its source (the URL
    a local copy was fetched from); by default the trace's resolved path. ``defer``: tables of :data:`DEFERRABLE`
    left in the export, read when a query needs them (:func:`complete_run`); only where the export stays (a trace
    given as .xz is decompressed for the ingest alone, so all of it is read at once)."""
    from .kineto import ingest_kineto, is_kineto_trace
    from .ncu import ingest_ncu_report, is_ncu_report

    if is_ncu_report(trace):  # Nsight Compute: its own reader, the same run store
        return ingest_ncu_report(trace, out, labels=labels, index=index)
    if is_kineto_trace(trace):  # torch.profiler (Kineto) JSON: its own reader, the same run store
        return ingest_kineto(trace, out, require_kernels=require_kernels, labels=labels, index=index, source=source)
    trace, out = Path(trace), Path(out)
    path, fmt = _resolve_input(trace)
    source = source or str(trace.resolve())
    ident = _Identity(path, out)
    # Waiting for the hash first keeps a repeated ingest cheap; otherwise the export is read meanwhile.
    if fmt == "nsys-rep" or path.suffix in DECOMPRESSORS or ident.seen(source):
        if (prior := ident.ingested()) is not None:
            return prior
    with store.staged_run(out) as tmp:
        if fmt == "nsys-rep":
            export = export_report(path, ident.digest)
        elif path.suffix in DECOMPRESSORS:
            export = decompress(path, tmp / "export.sqlite")
        else:
            export = path
        try:
            info = _write_run(trace, export, fmt, ident, tmp, require_kernels, labels or {},
                              Path(power_file) if power_file else None, source,
                              defer=() if export.parent == tmp else defer)
        except _Ingested as done:
            return done.info
        except TraceqlError as exc:  # name the user's file, not the export traceql made of it
            if export == path:
                raise
            made = "decompressed" if export.parent == tmp else f"exported to {export}"
            raise type(exc)(str(exc).replace(str(export), f"{trace} ({made})")) from exc
        if export.parent == tmp:
            export.unlink()
        info.already = not store.publish_run(out, tmp, info.run_id, info.manifest_entry(), index=index)
    if index and not info.already:
        _drop_stale(out, export, info)
    return info


def _drop_stale(out: Path, export: Path, info: RunInfo) -> None:
    """Remove the runs of ``out`` that a lazy ingest left to be completed from ``export``, whose content has changed
    since (``info``, just ingested from it, has another hash): they can no longer be completed, and would make every
    query of the store refuse. A note says so."""
    path = str(export.resolve())
    with store.locked_manifest(out) as manifest:
        stale = [rid for rid, e in manifest["runs"].items() if rid != info.run_id and e.get("deferred")
                 and (e.get("export") or {}).get("path") == path and e.get("sha256") != info.sha256]
        for rid in stale:
            shutil.rmtree(store.run_dir(out, rid), ignore_errors=True)
            del manifest["runs"][rid]
    for rid in stale:
        info.warnings.append(f"removed run {rid}: it was ingested lazily from {export}, which has changed since, so "
                             f"run {info.run_id} replaces it")


def read_intervals(trace: str | Path) -> tuple[RunInfo, dict[str, pa.Table]]:
    """The least of a trace that interval unions read, screened as ingest screens it, without a run directory:
    its run (id and source, as ingest would record them) and tables ``kernels`` (device, times, kind and ids) and
    ``memcpy`` (device, times, is_peer and ids), each row tagged with the run id. For ``traceql overlap``."""
    from .kineto import is_kineto_trace, kineto_intervals
    from .ncu import is_ncu_report

    trace = Path(trace)
    if is_ncu_report(trace):
        raise BadInputError(f"{trace}: an Nsight Compute report has no timeline; give an Nsight Systems trace")
    if is_kineto_trace(trace):
        return kineto_intervals(trace)
    path, fmt = _resolve_input(trace)
    with tempfile.TemporaryDirectory(prefix="traceql-read-") as tmp:
        ident = _Identity(path, Path(tmp) / "none")
        export = export_report(path, ident.digest) if fmt == "nsys-rep" else \
            decompress(path, Path(tmp) / "export.sqlite") if path.suffix in DECOMPRESSORS else path
        source = open_source(export)
        con = duck.connect()
        info = RunInfo("", str(trace.resolve()), "", fmt)
        data = {}
        try:
            adapter = adapter_for(source, con)
            for table, few in (("kernels", adapter.kernel_intervals), ("memcpy", adapter.copy_intervals)):
                rows = few()
                rows, dropped = screen.screen(table, rows if rows is not None else _no_intervals(table))
                if f"{table}.duplicate" in dropped:  # alike in these columns: ingest compares them all
                    every, dropped = screen.screen(table, getattr(adapter, table)())
                    rows = every.select(rows.column_names)
                info.repairs.update(dropped)
                data[table] = rows
        finally:
            con.close()
            source.close()
        info.sha256 = ident.digest
        info.run_id = info.sha256[:16]
    return info, {table: _with_run_id(rows, info.run_id) for table, rows in data.items()}


def _no_intervals(table: str) -> pa.Table:
    cols = ["global_pid", "device_id", "correlation_id", "start_ns", "end_ns", "kind" if table == "kernels" else
            "is_peer"]
    return schema.empty(table).select(cols)


class _Ingested(Exception):  # noqa: N818 (control flow, not an error)
    """The input turned out to be a run that the run directory holds already."""

    def __init__(self, info: RunInfo):
        self.info = info


class _Identity:
    """A run's identity: the input's sha256, computed in a thread of its own so that ingest reads the export
    meanwhile (hashing is a tenth of an ingest), and whether the run directory ``out`` holds that run already."""

    def __init__(self, path: Path, out: Path):
        self.out = out
        self._digest: Future[str] = Future()
        threading.Thread(target=self._hash, args=(path,), name="traceql-sha256", daemon=True).start()
        self._claimed = False

    def _hash(self, path: Path) -> None:
        try:
            self._digest.set_result(sha256_of(path))
        except BaseException as exc:  # handed to whoever waits for the digest
            self._digest.set_exception(exc)

    @property
    def digest(self) -> str:
        return self._digest.result()

    def seen(self, source: str) -> bool:
        """Whether a run of ``out`` came from this path (likely the same file again)."""
        runs = store.read_manifest(self.out)["runs"] if store.is_store(self.out) else {}
        return any(r.get("source_path") == source for r in runs.values())

    def ingested(self) -> RunInfo | None:
        """The run of ``out`` that holds this input, if any (waits for the hash)."""
        run_id = self.digest[:16]
        if store.is_store(self.out) and run_id in (runs := store.read_manifest(self.out)["runs"]):
            info = runs[run_id]
            return RunInfo(run_id, info["source_path"], self.digest, info["format"], info.get("tables", {}),
                           already=True, repairs=info.get("repairs", {}), labels=info.get("labels", {}))
        return None

    def claim(self) -> str:
        """The run_id, before the first file of the run is written; raises _Ingested if ``out`` holds it."""
        if not self._claimed and (prior := self.ingested()) is not None:
            raise _Ingested(prior)
        self._claimed = True
        return self.digest[:16]


def _write_table(table: str, data: pa.Table | None, run_id: str, folder: Path, trace: Path) \
        -> tuple[int, dict[str, int]]:
    """Screen ``data`` (odd rows dropped and counted), put it in the store's order and write ``folder/TABLE.parquet``;
    the rows written, and the rows dropped by reason."""
    data = schema.empty(table).drop(["run_id"]) if data is None else data
    data, dropped = screen.screen(table, data)
    order = pc.sort_indices(data, ORDERS[table]) if table in ORDERS else None
    try:
        if any(pa.types.is_dictionary(t) for t in data.schema.types):  # names once per distinct string
            rows = schema.conform(table, _with_run_id(data, ""), dictionaries=True).drop(["run_id"])
            # sorted a row group at a time: a sorted copy of the whole table would cost its memory again
            batches = rows.to_batches() if order is None else \
                (b for i in range(0, rows.num_rows, ROW_GROUP) for b in rows.take(order[i:i + ROW_GROUP]).to_batches())
            write_streamed(table, batches, run_id, folder / f"{table}.parquet")
        else:
            data = data if order is None else data.take(order)
            schema.write(table, _with_run_id(data, run_id), folder / f"{table}.parquet")
    except (pa.ArrowException, ValueError) as exc:  # values nsys does not write, e.g. fractional times
        raise BadInputError(f"{trace}: its {table} do not fit traceql's schema ({exc}); the export holds "
                            "values nsys does not write: export it again from the .nsys-rep") from exc
    return data.num_rows, dropped


def _read_table(adapter, table: str, run_id: str, folder: Path, trace: Path) -> tuple[int, dict[str, int]]:
    """Read ``table`` from the export and write ``folder/TABLE.parquet``: GPU metrics streamed (the largest table,
    never held whole), the others through :func:`_write_table`; the rows written, and the rows dropped by reason."""
    if table == "gpu_metrics":
        batches = adapter.gpu_metrics()
        rows, dropped = write_wide(batches, metric_names(adapter.metric_names()), run_id, folder / f"{table}.parquet")
        return rows, {**adapter.dropped_samples(), **{f"{table}.{k}": n for k, n in dropped.items() if n}}
    return _write_table(table, getattr(adapter, table)(), run_id, folder, trace)


def _exists(adapter, table: str) -> bool:
    """Whether the export holds the raw table that ``table`` is read from (else there is nothing to defer)."""
    raw = {"runtime_api": "CUPTI_ACTIVITY_KIND_RUNTIME", "nvtx": "NVTX_EVENTS", "gpu_metrics": "GPU_METRICS"}[table]
    return adapter.has(raw)


def _stamp(export: Path) -> dict[str, int]:
    """What tells a changed export from the one ingested: bytes and last modification (of each file of a
    Parquet export directory)."""
    files = sorted(export.glob("*.parquet")) if export.is_dir() else [export]
    stats = [f.stat() for f in files]
    return {"bytes": sum(s.st_size for s in stats), "mtime_ns": max((s.st_mtime_ns for s in stats), default=0)}


def _with_run_id(data: pa.Table, run_id: str) -> pa.Table:
    return data.append_column("run_id", pa.repeat(pa.scalar(run_id, pa.string()), data.num_rows))


def _power(power_file: Path, devices: pa.Table | None, session_start: int | None, trace: Path) -> pa.Table:
    """NVML samples (epoch ns, by GPU uuid) onto the trace's timeline and its device ids."""

    if session_start is None:
        raise BadInputError(f"{trace}: no session start time in the export, so power samples cannot be aligned")
    samples = pq.read_table(power_file)
    con = duck.connect()
    con.register("samples", samples)
    con.register("devs", devices if devices is not None else schema.empty("devices").drop(["run_id"]))
    return con.sql(f"""
        SELECT d.device_id, s.uuid, s.epoch_ns - {int(session_start)} AS ts_ns, s.power_w, s.energy_j,
               s.sm_clock_mhz, s.mem_clock_mhz, s.temp_c, s.throttle_reasons, s.power_limit_w
        FROM samples s LEFT JOIN devs d ON lower(replace(s.uuid, 'GPU-', '')) = lower(replace(d.uuid, 'GPU-', ''))
        ORDER BY device_id, ts_ns""").to_arrow_table()


def _write_run(trace: Path, export: Path, fmt: str, ident: _Identity, tmp: Path,
               require_kernels: bool, labels: dict[str, str], power_file: Path | None = None,
               source_name: str | None = None, defer: Collection[str] = ()) -> RunInfo:
    source = open_source(export)
    con = duck.connect()
    con.execute("SET threads TO 2")
    source_name = source_name or str(trace.resolve())
    info = RunInfo("", source_name, "", fmt, labels=dict(labels))  # run_id and sha256: at the first write
    try:
        adapter = adapter_for(source, con)
        meta = source.meta()

        def put(table: str, data: pa.Table | None) -> None:
            if not info.run_id:
                info.run_id, info.sha256 = ident.claim(), ident.digest
            info.tables[table], dropped = _write_table(table, data, info.run_id, tmp, trace)
            info.repairs.update(dropped)

        start = None
        if "TARGET_INFO_SESSION_START_TIME" in source.tables():
            rel, _ = adapter.load("TARGET_INFO_SESSION_START_TIME", ["utcEpochNs"])
            row = con.sql(f"SELECT max(utcEpochNs) FROM {rel}").fetchall()[0]
            start = row[0] if row else None
        devices = adapter.devices()
        first = {"devices": devices, "power": _power(power_file, devices, start, trace) if power_file else None,
                 "processes": adapter.processes(), "kernels": adapter.kernels()}
        for table, data in first.items():  # the input's hash is computed while these are read
            put(table, data)
        del first
        info.deferred = [t for t in DEFERRABLE if t in defer and _exists(adapter, t)]
        for table in ("ncu_metrics", "ncu_kernels"):  # Nsight Compute's tables: empty in an nsys run
            put(table, None)
        put("stream_waits", adapter.stream_waits() if hasattr(adapter, "stream_waits") else None)
        put("streams", adapter.streams() if hasattr(adapter, "streams") else None)
        for table in ("memcpy", "memset", "nvtx", "runtime_api", "gpu_metrics"):
            if table not in info.deferred:
                info.tables[table], dropped = _read_table(adapter, table, info.run_id, tmp, trace)
                info.repairs.update(dropped)
        if info.deferred:
            info.export = {"path": str(export.resolve()), **_stamp(export)}
        if info.repairs:
            info.warnings.append(f"{trace}: dropped {screen.describe(info.repairs)} (counted in the runs table's "
                                 "repairs column)")
        graphs = adapter.whole_graphs() if hasattr(adapter, "whole_graphs") else 0
        if graphs:
            info.warnings.append(f"{trace}: {graphs} CUDA graph launches were traced as whole graphs, so the kernels "
                                 "inside them are not in the trace and nothing about them can be attributed; profile "
                                 "with `nsys profile --cuda-graph-trace=node` (traceql collect does)")
        if not info.deferred and not any(info.tables.get(t) for t in EVENT_TABLES):
            raise BadInputError(f"{trace}: the trace holds no events (no kernels, copies, NVTX ranges, API calls "
                                "or GPU metrics); was the program's work inside the collection range?")
        if require_kernels and info.tables["kernels"] == 0:
            raise BadInputError(f"{trace}: no CUDA kernel data (no CUPTI_ACTIVITY_KIND_KERNEL rows); was the program "
                                "run under `nsys profile -t cuda`? Pass --allow-no-kernels to ingest it anyway")
        gpu_names = ",".join(sorted(set(devices.column("name").to_pylist()))) if devices is not None else ""
        runs = pa.table({
            "run_id": [info.run_id], "source_path": [source_name], "source_sha256": [info.sha256],
            "source_bytes": [trace.stat().st_size if trace.is_file() else None], "format": [fmt],
            "tool": [meta.get("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems")],
            "tool_version": [meta.get("EXPORT_PRODUCT_VERSION")],
            "export_schema_version": [adapter.schema_version], "host": [meta.get("EXPORT_HOST")],
            "session_start_utc_ns": [start], "gpu_names": [gpu_names],
            "ingested_at": [dt.datetime.now(dt.UTC).isoformat(timespec="seconds")],
            "traceql_version": [__version__], "labels_json": [json.dumps(labels, sort_keys=True)],
            "repairs": pa.array([sorted(info.repairs.items())], schema.TABLES["runs"].field("repairs").type),
        })
        schema.write("runs", runs, tmp / "runs.parquet")
        info.tables["runs"] = 1
        finish_run(tmp, info)
    finally:
        con.close()
        source.close()
    return info


def ingest(traces: Sequence[str | Path] | str | Path, out: str | Path, *, require_kernels: bool = True,
           labels: dict[str, str] | None = None, jobs: int = 1, on_error: str = "raise",
           progress: Callable[[RunInfo | Exception, Path | str], None] | None = None,
           executor: str | Executor | None = None, defer: Collection[str] = ()) -> list[RunInfo]:
    """Ingest each trace into the run directory ``out``; return one RunInfo per trace, in the order given.

    Each trace (one rank file, say) is one unit of work of ``executor`` (:mod:`traceql.executor`: ``local``,
    ``local:N`` processes, ``dask://HOST:PORT``; ``jobs`` > 1 is ``local:jobs``); on Dask, each trace is read where
    a worker runs, so traces and ``out`` must be paths every worker sees (a shared file system). Workers write only
    their run's files; the manifest is indexed here, once they are done. ``on_error='skip'`` goes on past a bad
    trace and reports each one through ``progress`` (as it completes, like every result). A trace may be a URL
    (``file://``, or any fsspec protocol, copied where its unit runs: :mod:`traceql.sources.urls`); so may ``out``: each
    unit writes its run locally, then uploads it (``run.json`` last), and the index is written here, once the units
    are done (:mod:`traceql.store.remote`). ``defer``: tables of :data:`DEFERRABLE` left in each export until a query
    needs them (a lazy ingest: :func:`complete_run`); not for a store at a URL, nor traces at URLs (their copies go).
    """
    if isinstance(traces, str | Path):
        traces = [traces]
    if not traces:
        raise BadInputError("no trace given")
    check_on_error(on_error)
    ex = parse_executor(executor, jobs)
    to_url = urls.is_remote(out)
    if to_url:  # its file system and its index are checked before any work
        out = str(out).rstrip("/")
        with remote.staged(out):
            pass
    else:
        out = urls.as_local(out, "the run directory")
    # a URL stays a URL (fetched by the unit that reads it), but a file:// one is a path
    paths = [t if urls.is_url(t) and urls.local_path(t) is None else urls.as_local(t, "a trace") for t in traces]
    if ex.distributed:  # the workers' working directories are not ours
        paths = [p if isinstance(p, str) else p.resolve() for p in paths]
        if not to_url:
            out = out.resolve()
            store.reindex(out)  # the store exists (a readable, empty index) before the first run arrives
    if unknown := set(defer) - set(DEFERRABLE):
        raise UsageError(f"cannot defer {', '.join(sorted(unknown))}: only {', '.join(DEFERRABLE)}")
    kwargs = dict(require_kernels=require_kernels, labels=labels, index=not ex.distributed and not to_url,
                  defer=() if to_url else tuple(defer))
    results: dict[int, RunInfo] = {}
    calls = [(t, out, kwargs) for t in paths]
    try:
        for i, result in run_units(ex, _ingest_to_url if to_url else _ingest_unit, calls, [str(t) for t in traces]):
            if progress:
                progress(result, traces[i] if urls.is_url(traces[i]) else Path(traces[i]))
            if isinstance(result, Exception):
                if on_error == "raise":
                    raise result
            else:
                results[i] = result
    finally:
        if to_url and results:  # the one writer of the index, in one put (nothing when it lists every run already)
            remote.write_index(out, {r.run_id: r.manifest_entry() for r in results.values() if not r.already})
        elif ex.distributed and results:  # the one writer of the index
            store.reindex(out, {r.run_id: r.manifest_entry() for r in results.values() if not r.already})
    if kwargs["index"] and (already := [r.run_id for r in results.values() if r.already]):
        store.index_runs(out, already)  # an ingest stopped after publishing them may have left them unindexed
    return [results[i] for i in sorted(results)]


def _ingest_to_url(trace: Path | str, url: str, kwargs: dict) -> RunInfo:
    """Ingest ``trace`` into a local staging store that knows the runs of the store at ``url``, then upload its run
    there (``run.json`` last); the index is the client's to write."""
    with remote.staged(url) as local:
        info = _ingest_unit(trace, local, kwargs)
        if not info.already:
            info.already = not remote.upload_run(url, local, info.run_id)
    return info


def _ingest_unit(trace: Path | str, out: Path, kwargs: dict) -> RunInfo:
    if isinstance(trace, Path):
        return ingest_one(trace, out, **kwargs)
    # another protocol: a local copy, where this unit runs
    with urls.fetched(trace, out, store.staging_prefix("fetch")) as copy:
        try:
            return ingest_one(copy, out, source=trace, **{**kwargs, "defer": ()})
        except TraceqlError as exc:  # name the URL, not the copy
            raise type(exc)(str(exc).replace(str(copy), trace)) from exc


def complete_run(root: Path, run_id: str) -> dict:
    """Read the tables a lazy ingest left in run ``run_id``'s export (:data:`DEFERRABLE`) into its folder; return
    the run's manifest entry, complete. One process completes a run at a time (the manifest's lock); the files
    appear whole or not at all, and ``run.json`` is rewritten last, so an interrupted completion is redone."""
    with store.locked_manifest(root) as manifest:
        entry = manifest["runs"][run_id]
        deferred = list(entry.get("deferred") or [])
        if not deferred:  # another process completed it meanwhile
            return entry
        export = Path(entry["export"]["path"])
        state = "missing" if not export.exists() else \
            "changed" if _stamp(export) != {k: entry["export"][k] for k in ("bytes", "mtime_ns")} else None
        if state == "changed" and export.is_file() and sha256_of(export) == entry.get("sha256"):
            state = None  # touched or copied, not changed: the same bytes as ingested
        if state:
            raise BadInputError(f"run {run_id} of {root}: its {', '.join(deferred)} were left to be read from the "
                                f"export {export} when needed (a lazy ingest), and that export is {state} since; "
                                "ingest the trace again (the new run replaces this one): "
                                f"`traceql ingest {entry.get('source_path', export)} -o {root}`")
        folder = store.run_dir(root, run_id)
        staged: dict[str, Path] = {}
        source = open_source(export)
        con = duck.connect()
        try:
            adapter = adapter_for(source, con)
            tables, repairs = {}, {}
            for table in deferred:
                part = folder / f"{store.staging_prefix()}{table}"
                part.mkdir(exist_ok=True)
                staged[table] = part / f"{table}.parquet"
                tables[table], dropped = _read_table(adapter, table, run_id, part, export)
                repairs.update(dropped)
        except BaseException as exc:
            for f in staged.values():
                shutil.rmtree(f.parent, ignore_errors=True)
            if isinstance(exc, OSError) and not isinstance(exc, TraceqlError):  # a full disk, a read-only store
                raise unwritable(folder, exc) from exc
            raise
        finally:
            con.close()
            source.close()
        try:
            return _finish_completion(folder, entry, staged, tables, repairs)
        except OSError as exc:
            raise unwritable(folder, exc) from exc


def _finish_completion(folder: Path, entry: dict, staged: dict[str, Path], tables: dict[str, int],
                       repairs: dict[str, int]) -> dict:
    """Put the completed tables in place and record them (run.json last); the manifest entry, updated."""
    for table, f in staged.items():
        os.replace(f, folder / f"{table}.parquet")
        f.parent.rmdir()
    info = store.read_run_info(folder) or dict(entry)
    info["tables"] = {**info.get("tables", {}), **tables}
    info["files"] = {**info.get("files", {}), **{t: (folder / f"{t}.parquet").stat().st_size for t in tables}}
    info["digests"] = {**info.get("digests", {}), **{t: file_digest(folder / f"{t}.parquet") for t in tables}}
    info["repairs"] = {**info.get("repairs", {}), **repairs}
    info["columns"] = {**info.get("columns", {}), **{t: own_columns(folder / f"{t}.parquet", t) for t in tables
                                                     if t in schema.WIDE}}
    info["deferred"] = []
    if repairs:  # the runs table counts them too
        runs = pq.read_table(folder / "runs.parquet")
        col = schema.TABLES["runs"].field("repairs").type
        runs = runs.set_column(runs.schema.get_field_index("repairs"), "repairs",
                               pa.array([sorted(info["repairs"].items())], col))
        schema.write("runs", runs, folder / "runs.parquet")
        info["files"]["runs"] = (folder / "runs.parquet").stat().st_size
        info["digests"]["runs"] = file_digest(folder / "runs.parquet")
    info.pop("already", None)
    info.pop("warnings", None)
    write_run_json(folder, info)
    entry.update({k: info[k] for k in ("tables", "files", "digests", "repairs", "columns", "deferred")})
    return entry


store.COMPLETE = complete_run  # the store reads deferred tables through this when a query needs them
