"""The reliability suite: every kind of bad input traceql meets, one case each, across ingest, sql, attribute, report
and collect (the harness and the checks every case passes are in tests/reliability.py; docs/reliability.md lists
the cases and is generated from them by benchmarks/reliability_report.py).

Inputs are built once per session from the real exports in tests/data and copied or edited per case; commands run
in this process where they can, in a child where a signal, a resource limit or a second process is the point.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import resource
import shutil
import signal
import sqlite3
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import H200, NSYS2022
from conftest import foreign_sqlite as foreign_sqlite_at
from reliability import CASES, Env, Run, case, check
from synthetic import launches, make_store

from traceql.store import run_dir

RESULTS: dict[str, dict] = {}


# -- inputs, built once ------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def inputs(tmp_path_factory, contention_sqlite, contention_parquet_run, cpu_nvtx_run) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("reliability-inputs")
    ncu = root / "kernels.ncu-rep"
    with lzma.open(H200 / "kernels.ncu-rep.xz") as src, ncu.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    synthetic = root / "synthetic"
    alone = [dict(start_ns=i * 10_000, end_ns=i * 10_000 + 1000, name="gemm", ctas=8, correlation_id=i + 1)
             for i in range(4)]
    beside = [dict(start_ns=50_000 + i * 10_000, end_ns=50_000 + i * 10_000 + 1500, name="gemm", ctas=8,
                   correlation_id=10 + i) for i in range(2)]
    comm = [dict(start_ns=50_000 + i * 10_000, end_ns=50_000 + i * 10_000 + 1500, kind="comm", ctas=4,
                 correlation_id=20 + i, stream_id=9) for i in range(2)]
    make_store(synthetic, kernels=alone + beside + comm, runtime_api=launches(alone + beside + comm))
    other_gpu = root / "other_gpu"
    make_store(other_gpu, kernels=alone + beside + comm, runtime_api=launches(alone + beside + comm),
               devices=[dict(device_id=0, name="NVIDIA A100-SXM4-80GB", sm_count=108)])
    ncu_store = root / "ncu_store"
    import traceql

    traceql.ingest(ncu, ncu_store)
    return {"cpu_nvtx": NSYS2022 / "cpu_nvtx.sqlite", "contention": contention_sqlite,
            "contention_xz": H200 / "contention.sqlite.xz", "parquetdir": H200 / "contention_parquetdir",
            "cpu_rep": NSYS2022 / "cpu_nvtx.nsys-rep", "new_rep": H200 / "contention.nsys-rep",
            "ncu_xz": H200 / "kernels.ncu-rep.xz", "ncu": ncu, "store": contention_parquet_run,
            "nvtx_store": cpu_nvtx_run, "synthetic": synthetic, "other_gpu": other_gpu, "ncu_store": ncu_store}


def pytest_generate_tests(metafunc):
    if "cid" in metafunc.fixturenames:  # every case registered below, once the module is read
        metafunc.parametrize("cid", sorted(CASES))


def test_case(cid, inputs, tmp_path):
    c = CASES[cid]
    started = time.perf_counter()
    run = c.fn(Env(tmp_path, inputs))
    problems = check(c, run)
    message = next((line for line in reversed(run.err.splitlines()) if line.startswith(("traceql:", "Error:"))), "")
    RESULTS[cid] = {"command": c.command, "what": c.what, "expect": c.expect, "rc": run.rc, "clean": not problems,
                    "seconds": round(time.perf_counter() - started, 2), "message": _portable(message, tmp_path)}
    if problems:
        RESULTS[cid]["problems"] = [_portable(p, tmp_path)[:2000] for p in problems]
    assert not problems, "\n".join(problems)


def _portable(text: str, case_dir: Path) -> str:
    """A message with this machine's temporary folders replaced, for docs/reliability.md."""
    import re

    text = text.replace(str(case_dir), "CASE").replace(str(Path(__file__).resolve().parent.parent), ".")
    return re.sub(r"/tmp/pytest-of-[^/]+/pytest-\d+/[^/ ]+", "TMP", text)


@pytest.fixture(scope="module", autouse=True)
def _results_file():
    """With TRACEQL_RELIABILITY_JSON set, every case's outcome goes there (benchmarks/reliability_report.py)."""
    yield
    out = os.environ.get("TRACEQL_RELIABILITY_JSON")
    if out and RESULTS:
        Path(out).write_text(json.dumps(RESULTS, indent=1, sort_keys=True))


# -- builders ----------------------------------------------------------------------------------------------------

def copy(env: Env, key: str, name: str | None = None) -> Path:
    src = env.inputs[key]
    dest = env.path(name or src.name)
    if src.is_dir():
        shutil.copytree(src, dest)
    else:
        shutil.copy(src, dest)
        dest.chmod(0o644)
    return dest


def edited(env: Env, name: str, *sql: str, src: str = "cpu_nvtx", rebuild: tuple[str, ...] = ()) -> Path:
    """A copy of a real export with ``sql`` run on it; ``rebuild`` tables lose their NOT NULL constraints first."""
    p = copy(env, src, name)
    con = sqlite3.connect(p)
    for table in rebuild:
        con.execute(f"CREATE TABLE _copy AS SELECT * FROM {table}")
        con.execute(f"DROP TABLE {table}")
        con.execute(f"ALTER TABLE _copy RENAME TO {table}")
    for s in sql:
        con.execute(s)
    con.commit()
    con.close()
    return p


def without_column(env: Env, name: str, table: str, column: str, src: str = "contention") -> Path:
    p = copy(env, src, name)
    con = sqlite3.connect(p)
    con.execute(f'ALTER TABLE {table} DROP COLUMN "{column}"')
    con.commit()
    con.close()
    return p


def written(env: Env, name: str, data: bytes) -> Path:
    p = env.path(name)
    p.write_bytes(data)
    return p


def foreign_sqlite(env: Env) -> Path:
    """An SQLite database of another program (an inventory of parts)."""
    return foreign_sqlite_at(env.path("inventory.sqlite"))


def ingest(env: Env, trace: Path, *extra, words_path: Path | None = None, store: str = "fresh") -> Run:
    """``traceql ingest TRACE -o OUT``: into a fresh folder, or into a copy of a store holding one run."""
    out = env.path("out")
    if store == "existing":
        shutil.copytree(env.inputs["store"], out)
    return env.cli("ingest", trace, "-o", out, *extra, named=words_path or trace, watch=[out, env.tmp])


KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RANDOM = os.urandom(1 << 16)  # the same bytes for the whole session; their content does not matter


# -- ingest: files that are not exports ---------------------------------------------------------------------------

@case("ingest", "a text file named .sqlite", words="not an SQLite file")
def _text_file(env):
    return ingest(env, written(env, "notes.sqlite", b"this is not a database\n" * 50))


@case("ingest", "an SQLite database of another program", words="not an Nsight Systems export")
def _foreign_sqlite(env):
    return ingest(env, foreign_sqlite(env))


@case("ingest", "an export cut in half (a copy that did not finish)", words=("truncated", "again"))
def _truncated_half(env):
    data = env.inputs["contention"].read_bytes()
    return ingest(env, written(env, "cut.sqlite", data[: len(data) // 2]))


@case("ingest", "an export cut after its first page", words=("truncated", "again"))
def _truncated_first_page(env):
    data = env.inputs["contention"].read_bytes()
    return ingest(env, written(env, "page.sqlite", data[:4096]))


@case("ingest", "an export cut inside its 100-byte header", words="not an SQLite file")
def _truncated_header(env):
    return ingest(env, written(env, "head.sqlite", env.inputs["cpu_nvtx"].read_bytes()[:60]))


@case("ingest", "an empty file", words=("empty file", "did not finish"))
def _empty_file(env):
    return ingest(env, written(env, "empty.sqlite", b""))


@case("ingest", "a path that does not exist", words="no such file")
def _missing_file(env):
    return ingest(env, env.path("does_not_exist.sqlite"))


@case("ingest", "random bytes named .sqlite", words="not an SQLite file")
def _random_bytes(env):
    return ingest(env, written(env, "random.sqlite", RANDOM))


@case("ingest", "an export whose pages after the header are zeroed (a damaged disk)", words="export it again")
def _zeroed_pages(env):
    data = bytearray(env.inputs["cpu_nvtx"].read_bytes())
    data[100:] = bytes(len(data) - 100)
    return ingest(env, written(env, "zeroed.sqlite", bytes(data)))


@case("ingest", "an export with its table pages overwritten by garbage", words="export it again")
def _garbled_pages(env):
    data = bytearray(env.inputs["cpu_nvtx"].read_bytes())
    page = int.from_bytes(data[16:18], "big")
    for start in range(page, len(data), page):  # every page but the first (the schema) loses its middle
        data[start + 8: start + page // 2] = RANDOM[: page // 2 - 8]
    return ingest(env, written(env, "garbled.sqlite", bytes(data)))


@case("ingest", "an unfinished nsys collection (.qdstrm)", words="QdstrmImporter")
def _qdstrm(env):
    return ingest(env, written(env, "report.qdstrm", b"\x00qdstrm partial collection" * 10))


@case("ingest", "an empty folder", words="no .parquet files")
def _empty_folder(env):
    d = env.path("export")
    d.mkdir()
    return ingest(env, d)


@case("ingest", "a folder of other files", words="no .parquet files")
def _folder_of_text(env):
    d = env.path("notes")
    d.mkdir()
    (d / "README.txt").write_text("hello")
    return ingest(env, d)


@case("ingest", "a run store given as a trace", words="traceql sql")
def _run_store_as_trace(env):
    return ingest(env, env.inputs["store"])


@case("ingest", "a special file (/dev/null) as the trace", words="empty file")
def _dev_null(env):
    return ingest(env, Path("/dev/null"))


# -- ingest: exports of unknown or broken schema ------------------------------------------------------------------

@case("ingest", "an export schema version of an unknown major (9.0.0)", words=("9.0.0", "supported nsys"))
def _schema_unknown_major(env):
    return ingest(env, edited(env, "future.sqlite",
                              "UPDATE EXPORT_META_DATA SET value = '9.0.0' WHERE name = 'EXPORT_SCHEMA_VERSION'"))


@case("ingest", "an export schema version that is not a number", words=("abc", "supported nsys"))
def _schema_version_garbage(env):
    return ingest(env, edited(env, "garbage_version.sqlite",
                              "UPDATE EXPORT_META_DATA SET value = 'abc' WHERE name = 'EXPORT_SCHEMA_VERSION'"))


@case("ingest", "an export without EXPORT_SCHEMA_VERSION", words="export it again")
def _schema_version_missing(env):
    return ingest(env, edited(env, "noversion.sqlite",
                              "DELETE FROM EXPORT_META_DATA WHERE name = 'EXPORT_SCHEMA_VERSION'"))


@case("ingest", "an export without its metadata table and string table", words="not an Nsight Systems export")
def _no_meta_no_strings(env):
    return ingest(env, edited(env, "bare.sqlite", "DROP TABLE EXPORT_META_DATA", "DROP TABLE StringIds"))


@case("ingest", "an export whose string table was dropped", words="StringIds")
def _no_string_table(env):
    return ingest(env, edited(env, "nostrings.sqlite", "DROP TABLE StringIds", src="contention"))


@case("ingest", "a trace without CUDA kernels", words="--allow-no-kernels")
def _no_kernels(env):
    return ingest(env, copy(env, "cpu_nvtx"))


@case("ingest", "a trace without any event", words="no events")
def _no_events(env):
    return ingest(env, edited(env, "no_events.sqlite", "DELETE FROM NVTX_EVENTS"))


@case("ingest", "a trace without any event, with --allow-no-kernels", words="no events")
def _no_events_allowed(env):
    return ingest(env, edited(env, "no_events.sqlite", "DELETE FROM NVTX_EVENTS"), "--allow-no-kernels")


@case("ingest", "a trace without events into a store that holds a run", words="no events")
def _no_events_existing_store(env):
    return ingest(env, edited(env, "no_events.sqlite", "DELETE FROM NVTX_EVENTS"), "--allow-no-kernels",
                  store="existing")


@case("ingest", "a truncated export into a store that holds a run", words="truncated")
def _truncated_existing_store(env):
    data = env.inputs["contention"].read_bytes()
    return ingest(env, written(env, "cut.sqlite", data[: len(data) // 3]), store="existing")


@case("ingest", "kernel start times stored as text", words=("CUPTI_ACTIVITY_KIND_KERNEL", "export it again"))
def _kernel_start_text(env):
    return ingest(env, edited(env, "start_text.sqlite", f"UPDATE {KERNEL} SET start = 'soon' WHERE rowid % 2 = 0",
                              src="contention", rebuild=(KERNEL,)))


@case("ingest", "kernel end times stored as real numbers with fractions", words=("kernels", "export it again"))
def _kernel_end_fraction(env):
    return ingest(env, edited(env, "end_real.sqlite", f'UPDATE {KERNEL} SET "end" = "end" + 0.5',
                              src="contention", rebuild=(KERNEL,)))


@case("ingest", "a kernel table without its start column", words=("CUPTI_ACTIVITY_KIND_KERNEL", "start"))
def _kernel_no_start_column(env):
    return ingest(env, without_column(env, "nostart.sqlite", KERNEL, "start"))


@case("ingest", "a kernel table without its end column", words=("CUPTI_ACTIVITY_KIND_KERNEL", "end"))
def _kernel_no_end_column(env):
    return ingest(env, without_column(env, "noend.sqlite", KERNEL, "end"))


@case("ingest", "a kernel table without its device column", words=("CUPTI_ACTIVITY_KIND_KERNEL", "deviceId"))
def _kernel_no_device_column(env):
    return ingest(env, without_column(env, "nodevice.sqlite", KERNEL, "deviceId"))


@case("ingest", "a kernel table without its name column", words=("CUPTI_ACTIVITY_KIND_KERNEL", "demangledName"))
def _kernel_no_name_column(env):
    return ingest(env, without_column(env, "noname.sqlite", KERNEL, "demangledName"))


@case("ingest", "GPU metric timestamps stored as text", words=("GPU_METRICS", "export it again"))
def _metrics_time_text(env):
    return ingest(env, edited(env, "metrics_text.sqlite", "UPDATE GPU_METRICS SET timestamp = 'later' "
                                                          "WHERE rowid % 3 = 0", src="contention",
                              rebuild=("GPU_METRICS",)))


@case("ingest", "GPU metric values stored as text", words=("GPU_METRICS", "export it again"))
def _metrics_value_text(env):
    return ingest(env, edited(env, "values_text.sqlite", "UPDATE GPU_METRICS SET value = 'high' WHERE rowid % 5 = 0",
                              src="contention", rebuild=("GPU_METRICS",)))


@case("ingest", "NVTX event times stored as text", words=("NVTX_EVENTS", "export it again"))
def _nvtx_time_text(env):
    return ingest(env, edited(env, "nvtx_text.sqlite", "UPDATE NVTX_EVENTS SET start = 'then' WHERE rowid % 2 = 0",
                              rebuild=("NVTX_EVENTS",)), "--allow-no-kernels")


@case("ingest", "CUDA API call times stored as text", words=("CUPTI_ACTIVITY_KIND_RUNTIME", "export it again"))
def _runtime_time_text(env):
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    return ingest(env, edited(env, "api_text.sqlite", f"UPDATE {table} SET start = 'x' WHERE rowid % 2 = 0",
                              src="contention", rebuild=(table,)))


@case("ingest", "a device map whose ids are text", words=("TARGET_INFO_CUDA_DEVICE", "export it again"))
def _device_map_text(env):
    table = "TARGET_INFO_CUDA_DEVICE"
    return ingest(env, edited(env, "devmap_text.sqlite", f"UPDATE {table} SET gpuId = 'first'",
                              src="contention", rebuild=(table,)))


@case("ingest", "a kernel table replaced by a table of another shape", words=("CUPTI_ACTIVITY_KIND_KERNEL", "start"))
def _kernel_table_foreign(env):
    return ingest(env, edited(env, "foreign_kernels.sqlite", f"DROP TABLE {KERNEL}",
                              f"CREATE TABLE {KERNEL} (id INTEGER, note TEXT)", f"INSERT INTO {KERNEL} VALUES (1, 'x')",
                              src="contention"))


# -- ingest: odd rows, repaired and counted (exit 0, a warning naming the file) ------------------------------------

def _repaired(env, name, *sql, rebuild=(), extra=()):
    p = edited(env, name, *sql, src="contention", rebuild=rebuild)
    out = env.path("out")
    return env.cli("ingest", p, "-o", out, *extra, named=p, watch=out, grow=out)


@case("ingest", "CUDA graphs traced as whole graphs (their kernels absent): a warning naming the nsys option", expect=0,
      words="--cuda-graph-trace=node")
def _whole_graphs(env):
    # the table nsys writes under its default --cuda-graph-trace=graph: one row per graph launch, no kernel rows
    return _repaired(env, "graphs.sqlite",
                     "CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                     "deviceId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, graphId INTEGER, "
                     "graphExecId INTEGER)",
                     f"INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE SELECT start, \"end\", deviceId, streamId, "
                     f"correlationId, globalPid, 7, 1 FROM {KERNEL} WHERE rowid % 50 = 0")


@case("ingest", "kernels ending before they start: dropped, counted", expect=0, words="ending before they start")
def _kernels_end_before_start(env):
    return _repaired(env, "backwards.sqlite", f'UPDATE {KERNEL} SET "end" = start - 10 WHERE rowid % 7 = 0')


@case("ingest", "kernels without a start time: dropped, counted", expect=0, words="without a start or end time")
def _kernels_null_start(env):
    return _repaired(env, "nostart.sqlite", f"UPDATE {KERNEL} SET start = NULL WHERE rowid % 9 = 0",
                     rebuild=(KERNEL,))


@case("ingest", "kernels without an end time: dropped, counted", expect=0, words="without a start or end time")
def _kernels_null_end(env):
    return _repaired(env, "noend.sqlite", f'UPDATE {KERNEL} SET "end" = NULL WHERE rowid % 9 = 1', rebuild=(KERNEL,))


@case("ingest", "kernel rows repeated exactly: dropped, counted", expect=0, words="duplicated")
def _kernels_duplicated(env):
    return _repaired(env, "dup.sqlite", f"INSERT INTO {KERNEL} SELECT * FROM {KERNEL} WHERE rowid % 4 = 0")


@case("ingest", "kernels on a negative device id: dropped, counted", expect=0, words="negative or missing device")
def _kernels_negative_device(env):
    return _repaired(env, "negdev.sqlite", f"UPDATE {KERNEL} SET deviceId = -3 WHERE rowid % 11 = 0")


@case("ingest", "copies repeated exactly: dropped, counted", expect=0, words="memcpy rows duplicated")
def _copies_duplicated(env):
    t = "CUPTI_ACTIVITY_KIND_MEMCPY"
    return _repaired(env, "dupcopy.sqlite", f"INSERT INTO {t} SELECT * FROM {t} WHERE rowid % 3 = 0")


@case("ingest", "memsets ending before they start: dropped, counted", expect=0, words="memset rows ending before")
def _memsets_backwards(env):
    t = "CUPTI_ACTIVITY_KIND_MEMSET"
    return _repaired(env, "backset.sqlite", f'UPDATE {t} SET "end" = start - 1 WHERE rowid % 5 = 0')


@case("ingest", "CUDA API calls ending before they start: dropped, counted", expect=0,
      words="runtime_api rows ending before")
def _api_backwards(env):
    t = "CUPTI_ACTIVITY_KIND_RUNTIME"
    return _repaired(env, "backapi.sqlite", f'UPDATE {t} SET "end" = start - 1 WHERE rowid % 50 = 0')


@case("ingest", "GPU metric samples of an undescribed metric: dropped, counted", expect=0,
      words="of a metric the export does not describe")
def _metrics_unknown(env):
    return _repaired(env, "unknown_metric.sqlite", "UPDATE GPU_METRICS SET metricId = 4242 WHERE rowid % 10 = 0")


@case("ingest", "GPU metric samples without a value: dropped, counted", expect=0, words="without a time or value")
def _metrics_null_value(env):
    return _repaired(env, "null_metric.sqlite", "UPDATE GPU_METRICS SET value = NULL WHERE rowid % 10 = 0",
                     rebuild=("GPU_METRICS",))


@case("ingest", "GPU metric samples whose metric table was dropped: every sample counted", expect=0,
      words="of a metric the export does not describe")
def _metrics_no_descriptions(env):
    return _repaired(env, "no_metric_table.sqlite", "DROP TABLE TARGET_INFO_GPU_METRICS")


# -- ingest: compressed exports ------------------------------------------------------------------------------------

def _compressed(data: bytes, suffix: str) -> bytes:
    if suffix == ".zst":
        sink = pa.BufferOutputStream()
        with pa.CompressedOutputStream(sink, "zstd") as f:
            f.write(data)
        return sink.getvalue().to_pybytes()
    return {".xz": lzma.compress, ".gz": gzip.compress, ".bz2": bz2.compress}[suffix](data)


def _compressed_case(suffix: str, kind: str, what: str, words):
    def fn(env):
        cpu = env.inputs["cpu_nvtx"].read_bytes()
        if kind == "corrupt":
            data = _compressed(cpu, suffix)
            data = data[:64] + RANDOM[:4096] + data[64 + 4096:]
        elif kind == "truncated":
            data = _compressed(cpu, suffix)
            data = data[: len(data) // 2]
        elif kind == "random":
            data = RANDOM
        elif kind == "of_text":
            data = _compressed(b"not an export\n" * 100, suffix)
        elif kind == "of_truncated_export":
            data = _compressed(cpu[: len(cpu) // 2], suffix)
        else:  # empty
            data = b""
        return ingest(env, written(env, f"{kind}.sqlite{suffix}", data))
    case("ingest", what, words=words, name=f"{suffix[1:]}_{kind}")(fn)


for _suffix in (".xz", ".gz", ".bz2", ".zst"):
    _compressed_case(_suffix, "corrupt", f"a {_suffix} export with damaged compressed data", ("cannot decompress",
                                                                                             "damaged"))
    _compressed_case(_suffix, "truncated", f"a {_suffix} export cut in half", ("cannot decompress", "truncated"))
    _compressed_case(_suffix, "random", f"random bytes named .sqlite{_suffix}", "cannot decompress")
    _compressed_case(_suffix, "of_text", f"a valid {_suffix} file holding text, not an export", "not an SQLite file")
    _compressed_case(_suffix, "of_truncated_export", f"a valid {_suffix} file holding a truncated export",
                     "truncated")
    _compressed_case(_suffix, "empty", f"an empty .sqlite{_suffix} file", "empty file")


@case("ingest", "an .xz export of an unknown schema version", words="9.0.0")
def _xz_of_unknown_schema(env):
    p = edited(env, "future.sqlite", "UPDATE EXPORT_META_DATA SET value = '9.0.0' WHERE name = 'EXPORT_SCHEMA_VERSION'")
    return ingest(env, written(env, "future.sqlite.xz", lzma.compress(p.read_bytes())))


@case("ingest", "an export compressed twice (.xz inside .xz)", words="not an SQLite file")
def _xz_twice(env):
    once = lzma.compress(env.inputs["cpu_nvtx"].read_bytes())
    return ingest(env, written(env, "twice.sqlite.xz", lzma.compress(once)))


@case("ingest", "a .zst export, read like the others", expect=0)
def _zst_export(env):
    p = written(env, "cpu.sqlite.zst", _compressed(env.inputs["cpu_nvtx"].read_bytes(), ".zst"))
    out = env.path("out")
    return env.cli("ingest", p, "-o", out, "--allow-no-kernels", watch=out, grow=out)


# -- ingest: reports (.nsys-rep, .ncu-rep) -------------------------------------------------------------------------

@case("ingest", "random bytes named .nsys-rep", words=("nsys export", "copy it again"))
def _rep_random(env):
    return ingest(env, written(env, "random.nsys-rep", RANDOM))


# 64 random bytes whose "version" nsys echoes in its error: bytes that are not UTF-8 (found by a random case)
NOT_UTF8_REP = bytes.fromhex("f9af6847e411f4b7d33c0dc61be6c357a98367d1ca70dbeadd3b632275764099"
                             "c17b21e124c97ef9f0836e2d6e9bf26b7b0ba09726205bb4350abee9e82a2e30")


@case("ingest", "an .nsys-rep whose header nsys echoes back as bytes that are not UTF-8",
      words=("nsys export", "Version number is invalid", "copy it again"))
def _rep_not_utf8(env):
    return ingest(env, written(env, "echoed.nsys-rep", NOT_UTF8_REP))


@case("ingest", "an empty .nsys-rep", words="empty file")
def _rep_empty(env):
    return ingest(env, written(env, "empty.nsys-rep", b""))


@case("ingest", "an .nsys-rep cut in half", words=("nsys export", "copy it again"))
def _rep_truncated(env):
    data = env.inputs["cpu_rep"].read_bytes()
    return ingest(env, written(env, "cut.nsys-rep", data[: len(data) // 2]), "--allow-no-kernels")


@case("ingest", "an .nsys-rep written by an nsys newer than the one installed", words=("newer", "nsys"))
def _rep_newer_than_nsys(env):
    return ingest(env, copy(env, "new_rep"))


@case("ingest", "a text file named .nsys-rep", words=("nsys export", "copy it again"))
def _rep_text(env):
    return ingest(env, written(env, "notes.nsys-rep", b"hello\n" * 100))


@case("ingest", "an .nsys-rep and no nsys anywhere", words=("no nsys executable found", "TRACEQL_NSYS"))
def _rep_without_nsys(env):
    from traceql.sources.nsys import locate

    rep = copy(env, "cpu_rep")
    saved = locate.INSTALL_GLOBS
    locate.INSTALL_GLOBS = ()
    try:
        path = os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                               if d and not os.path.exists(os.path.join(d, "nsys")))
        out = env.path("out")
        return env.cli("ingest", rep, "-o", out, "--allow-no-kernels", named=rep, watch=out,
                       env={"TRACEQL_NSYS": "/nonexistent/nsys", "PATH": path})
    finally:
        locate.INSTALL_GLOBS = saved


@case("ingest", "a report whose cached export was swapped for another trace's: exported again, not taken for it",
      expect=0, words="exporting the report again")
def _rep_cache_swapped(env):
    rep = copy(env, "cpu_rep")
    first = env.cli("ingest", rep, "-o", env.path("first"), "--allow-no-kernels")
    stamp = rep.with_name(rep.name + ".traceql") / "export.json"
    export = stamp.parent / json.loads(stamp.read_text())["export"]
    if export.is_dir():  # a Parquet export: another trace's Parquet export in its place
        shutil.rmtree(export)
        shutil.copytree(env.inputs["parquetdir"], export)
    else:
        shutil.copy(env.inputs["contention"], export)
    out = env.path("out")
    run = env.cli("ingest", rep, "-o", out, "--allow-no-kernels", named=[export], watch=[out], grow=[out])
    (entry,) = json.loads(_manifest(out).read_text())["runs"].values() if _manifest(out).exists() else [{}]
    if first.rc or entry.get("tables", {}).get("kernels") != 0:  # the report has no kernels; the other trace has
        run.err += f"\ntraceql: the run of {rep} holds {entry.get('tables')}"
        run.rc = 99
    return run


@case("ingest", "random bytes named .ncu-rep", words="Nsight Compute")
def _ncu_random(env):
    return ingest(env, written(env, "random.ncu-rep", RANDOM))


@case("ingest", "an empty .ncu-rep", words="empty file")
def _ncu_empty(env):
    return ingest(env, written(env, "empty.ncu-rep", b""))


@case("ingest", "an .ncu-rep cut in half", words="Nsight Compute")
def _ncu_truncated(env):
    data = env.inputs["ncu"].read_bytes()
    return ingest(env, written(env, "cut.ncu-rep", data[: len(data) // 2]))


@case("ingest", "an .ncu-rep.xz with damaged compressed data", words="cannot decompress")
def _ncu_xz_corrupt(env):
    data = env.inputs["ncu_xz"].read_bytes()
    return ingest(env, written(env, "bad.ncu-rep.xz", data[:64] + RANDOM[:4096] + data[4160:]))


@case("ingest", "an nsys SQLite export renamed .ncu-rep", words="Nsight Compute")
def _ncu_is_sqlite(env):
    return ingest(env, copy(env, "cpu_nvtx", "cpu.ncu-rep"))


@case("ingest", "a folder named .ncu-rep", words="directory")
def _ncu_folder(env):
    d = env.path("x.ncu-rep")
    d.mkdir()
    return ingest(env, d)


@case("ingest", "an .ncu-rep that does not exist", words="no such file")
def _ncu_missing(env):
    return ingest(env, env.path("gone.ncu-rep"))


# -- ingest: Parquet export folders (nsys export -t parquetdir) ------------------------------------------------------

def _parquetdir(env, name="export") -> Path:
    return copy(env, "parquetdir", name)


@case("ingest", "a Parquet export whose kernel file is garbage",
      words=("CUPTI_ACTIVITY_KIND_KERNEL", "export it again"))
def _pq_kernel_garbage(env):
    d = _parquetdir(env)
    (d / f"{KERNEL}.parquet").write_bytes(RANDOM)
    return ingest(env, d, words_path=d / f"{KERNEL}.parquet")


@case("ingest", "a Parquet export whose kernel file is cut in half",
      words=("CUPTI_ACTIVITY_KIND_KERNEL", "export it again"))
def _pq_kernel_truncated(env):
    d = _parquetdir(env)
    f = d / f"{KERNEL}.parquet"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    return ingest(env, d, words_path=f)


@case("ingest", "a Parquet export whose kernel file is empty", words=("CUPTI_ACTIVITY_KIND_KERNEL", "export it again"))
def _pq_kernel_empty(env):
    d = _parquetdir(env)
    (d / f"{KERNEL}.parquet").write_bytes(b"")
    return ingest(env, d, words_path=d / f"{KERNEL}.parquet")


@case("ingest", "a Parquet export whose GPU metrics file is garbage", words=("GPU_METRICS", "export it again"))
def _pq_metrics_garbage(env):
    d = _parquetdir(env)
    (d / "GPU_METRICS.parquet").write_bytes(RANDOM)
    return ingest(env, d, words_path=d / "GPU_METRICS.parquet")


@case("ingest", "a Parquet export whose string file is garbage", words=("StringIds", "export it again"))
def _pq_strings_garbage(env):
    d = _parquetdir(env)
    (d / "StringIds.parquet").write_bytes(RANDOM)
    return ingest(env, d, words_path=d / "StringIds.parquet")


@case("ingest", "a Parquet export without its metadata and string files", words="not an Nsight Systems export")
def _pq_no_meta(env):
    d = _parquetdir(env)
    (d / "META_DATA_EXPORT.parquet").unlink()
    (d / "StringIds.parquet").unlink()
    return ingest(env, d)


@case("ingest", "a Parquet export of an unknown schema version", words=("9.1.0", "supported nsys"))
def _pq_unknown_schema(env):
    d = _parquetdir(env)
    f = d / "META_DATA_EXPORT.parquet"
    t = pq.read_table(f).to_pylist()
    for r in t:
        if r["name"] == "EXPORT_SCHEMA_VERSION":
            r["value"] = "9.1.0"
    pq.write_table(pa.Table.from_pylist(t), f)
    return ingest(env, d)


@case("ingest", "a Parquet export whose kernel start times are text",
      words=("CUPTI_ACTIVITY_KIND_KERNEL", "export it again"))
def _pq_kernel_start_text(env):
    d = _parquetdir(env)
    f = d / f"{KERNEL}.parquet"
    t = pq.read_table(f)
    t = t.set_column(t.column_names.index("start"), "start", pa.array([f"t{v}" for v in t["start"].to_pylist()]))
    pq.write_table(t, f)
    return ingest(env, d, words_path=d)


@case("ingest", "a Parquet export whose kernel file lacks the end column", words=("CUPTI_ACTIVITY_KIND_KERNEL", "end"))
def _pq_kernel_no_end(env):
    d = _parquetdir(env)
    f = d / f"{KERNEL}.parquet"
    pq.write_table(pq.read_table(f).drop(["end"]), f)
    return ingest(env, d, words_path=d)


@case("ingest", "a Parquet export whose GPU metric values are text", words=("GPU_METRICS", "export it again"))
def _pq_metrics_value_text(env):
    d = _parquetdir(env)
    f = d / "GPU_METRICS.parquet"
    t = pq.read_table(f)
    t = t.set_column(t.column_names.index("value"), "value", pa.array([f"{v} units" for v in t["value"].to_pylist()]))
    pq.write_table(t, f)
    return ingest(env, d, words_path=d)


# -- ingest: hostile names and values (accepted, stored exactly) ----------------------------------------------------

def _accepted(env, trace: Path, out: Path, *extra, check_sql: str | None = None, expected=None) -> Run:
    run = env.cli("ingest", trace, "-o", out, *extra, watch=out, grow=out)
    if run.rc == 0 and check_sql is not None:
        import traceql

        con = traceql.connect(out, views=False)
        got = con.sql(check_sql).fetchall()
        con.close()
        if got != expected:
            run.err += f"\ntraceql: stored {got!r}, expected {expected!r}"
            run.rc = 99
    return run


@case("ingest", "a trace path with quotes, spaces, a semicolon and non-ASCII letters", expect=0)
def _path_hostile(env):
    d = env.path("it's a \"trace\"; DROP TABLE runs; -- éè 東京")
    d.mkdir()
    trace = d / "cpu's.sqlite"
    shutil.copy(env.inputs["cpu_nvtx"], trace)
    return _accepted(env, trace, env.path("out"), "--allow-no-kernels", check_sql="SELECT source_path FROM runs",
                     expected=[(str(trace.resolve()),)])


@case("ingest", "a trace path with a newline in it", expect=0)
def _path_newline(env):
    trace = env.path("two\nlines.sqlite")
    shutil.copy(env.inputs["cpu_nvtx"], trace)
    return _accepted(env, trace, env.path("out"), "--allow-no-kernels", check_sql="SELECT source_path FROM runs",
                     expected=[(str(trace.resolve()),)])


@case("ingest", "a trace file name of 255 characters", expect=0)
def _path_long_name(env):
    trace = env.path("t" * 248 + ".sqlite")
    shutil.copy(env.inputs["cpu_nvtx"], trace)
    return _accepted(env, trace, env.path("out"), "--allow-no-kernels")


@case("ingest", "a run directory whose path has quotes and brackets (read back through SQL)", expect=0)
def _out_hostile(env):
    out = env.path("runs ['a'] \"b\" {c}")
    return _accepted(env, env.inputs["cpu_nvtx"], out, "--allow-no-kernels", check_sql="SELECT count(*) FROM nvtx",
                     expected=[(19,)])


@case("ingest", "a label whose value is SQL and markup", expect=0)
def _label_hostile(env):
    value = "'); DROP TABLE runs; -- <script>alert(1)</script>"
    return _accepted(env, env.inputs["cpu_nvtx"], env.path("out"), "--allow-no-kernels", "--label", f"note={value}",
                     check_sql="SELECT json_extract_string(labels_json, '$.note') FROM runs", expected=[(value,)])


@case("ingest", "an NVTX range text of 1 MB with markup, quotes and control characters", expect=0)
def _nvtx_huge_text(env):
    text = ("<script>alert('x')</script>\"\t\x01;" * 40_000)[:1_000_000]
    sql_text = text.replace("'", "''")
    p = edited(env, "huge_nvtx.sqlite", f"UPDATE NVTX_EVENTS SET text = '{sql_text}', textId = NULL WHERE rowid = "
                                        "(SELECT min(rowid) FROM NVTX_EVENTS WHERE eventType = 59)")
    return _accepted(env, p, env.path("out"), "--allow-no-kernels",
                     check_sql="SELECT max(length(text)) FROM nvtx", expected=[(len(text),)])


@case("ingest", "a kernel name of 100 kB, a C++ template full of quotes and markup", expect=0)
def _kernel_huge_name(env):
    name = ("void k<\"'</script>&amp;;--" * 4_000)[:100_000]
    sql_name = name.replace("'", "''")
    p = edited(env, "huge_kernel.sqlite", f"UPDATE StringIds SET value = '{sql_name}' WHERE id = (SELECT "
                                          f"demangledName FROM {KERNEL} LIMIT 1)", src="contention")
    return _accepted(env, p, env.path("out"), check_sql=f"SELECT count(*) > 0 FROM kernels WHERE name = '{sql_name}'",
                     expected=[(True,)])


# -- ingest: options ----------------------------------------------------------------------------------------------

@case("ingest", "a label that is not KEY=VALUE", words=("KEY=VALUE",))
def _label_not_kv(env):
    out = env.path("out")
    return env.cli("ingest", env.inputs["cpu_nvtx"], "-o", out, "--label", "just-a-word", named="just-a-word",
                   watch=out)


@case("ingest", "a label with an empty key", words=("KEY=VALUE",))
def _label_empty_key(env):
    out = env.path("out")
    return env.cli("ingest", env.inputs["cpu_nvtx"], "-o", out, "--label", "=v", named="=v", watch=out)


@case("ingest", "no -o/--out", words=("--out",))
def _no_out(env):
    return env.cli("ingest", env.inputs["cpu_nvtx"], named="Missing option", watch=env.tmp)


@case("ingest", "no trace at all", words=("TRACES",))
def _no_traces(env):
    out = env.path("out")
    return env.cli("ingest", "-o", out, named="Missing argument", watch=out)


@case("ingest", "an unknown --on-error policy", words=("'raise', 'skip'",))
def _bad_on_error(env):
    out = env.path("out")
    return env.cli("ingest", env.inputs["cpu_nvtx"], "-o", out, "--on-error", "ignore", named="ignore", watch=out)


@case("ingest", "a bad trace among good ones with --on-error skip: the good ones are ingested", words="skipped")
def _skip_one_bad(env):
    bad = written(env, "bad.sqlite", b"junk" * 100)
    out = env.path("out")
    run = env.cli("ingest", env.inputs["cpu_nvtx"], bad, "-o", out, "--allow-no-kernels", "--on-error", "skip",
                  named=bad, watch=out, grow=out)
    manifest = json.loads((out / "manifest.json").read_text())
    if len(manifest["runs"]) != 1:
        run.err += f"\ntraceql: expected the good run in the store, found {list(manifest['runs'])}"
    return run


# -- ingest: outputs ------------------------------------------------------------------------------------------------

def _into(env, out: Path, named=None, watch=None) -> Run:
    return env.cli("ingest", env.inputs["cpu_nvtx"], "-o", out, "--allow-no-kernels", named=named or out,
                   watch=watch or out)


@case("ingest", "-o names an existing regular file", words="cannot write here")
def _out_is_file(env):
    f = written(env, "store.txt", b"my notes")
    return _into(env, f)


@case("ingest", "-o names a path below a regular file", words="cannot write here")
def _out_under_file(env):
    f = written(env, "store.txt", b"my notes")
    return _into(env, f / "runs", named=f / "runs", watch=f)


def full_device(env: Env) -> Path:
    """A device that is always full, of the case's own: a node of /dev/full's kind in the case's folder, so that a
    command that wrongly renamed over or deleted its output harms no device of the machine. Where no such node can be
    made or written (not root, a file system mounted nodev), /dev/full itself: a user who cannot make a device node
    cannot replace /dev/full either."""
    import errno
    import stat

    node, machine = env.path("full"), os.stat("/dev/full")
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, machine.st_rdev)
        with node.open("wb") as f:
            f.write(b"x")
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            return node
        node.unlink(missing_ok=True)
    return Path("/dev/full")


@case("ingest", "-o names a device (a private /dev/full)", words="cannot write here")
def _out_dev_full(env):
    return _into(env, full_device(env), watch=env.tmp)


@case("ingest", "-o on a read-only file system (/sys)", words="cannot write here")
def _out_read_only(env):
    return _into(env, Path("/sys/traceql-runs"), watch=env.tmp)


def _store_copy(env: Env, key: str = "store", name: str = "out") -> Path:
    return copy(env, key, name)


def _manifest(store: Path) -> Path:
    return store / "manifest.json"


@case("ingest", "a run store whose manifest is not JSON", words=("manifest", "re-ingest"))
def _out_manifest_garbage(env):
    s = _store_copy(env)
    _manifest(s).write_text("{not json")
    return _into(env, s, named=_manifest(s))


@case("ingest", "a run store whose manifest is a JSON list", words="not a traceql manifest")
def _out_manifest_list(env):
    s = _store_copy(env)
    _manifest(s).write_text("[]")
    return _into(env, s, named=_manifest(s))


@case("ingest", "a run store whose manifest has another format", words="not a traceql manifest")
def _out_manifest_other_format(env):
    s = _store_copy(env)
    _manifest(s).write_text(json.dumps({"format": "something-else", "schema_version": 1, "runs": {}}))
    return _into(env, s, named=_manifest(s))


@case("ingest", "a run store of a future schema version", words=("schema version 99", "traceql"))
def _out_future_store(env):
    s = _store_copy(env)
    m = json.loads(_manifest(s).read_text())
    m["schema_version"] = 99
    _manifest(s).write_text(json.dumps(m))
    return _into(env, s, named=_manifest(s))


@case("ingest", "a run store whose runs list is not an object", words=("manifest", "re-ingest"))
def _out_manifest_runs_list(env):
    s = _store_copy(env)
    m = json.loads(_manifest(s).read_text())
    m["runs"] = ["a", "b"]
    _manifest(s).write_text(json.dumps(m))
    return _into(env, s, named=_manifest(s))


@case("ingest", "a run store whose manifest is a folder", words=("manifest", "re-ingest"))
def _out_manifest_folder(env):
    s = _store_copy(env)
    _manifest(s).unlink()
    _manifest(s).mkdir()
    return _into(env, s, named=_manifest(s))


@case("ingest", "a run store whose runs folder is a file", words=("not a folder", "re-ingest"))
def _out_runs_is_file(env):
    s = _store_copy(env)
    shutil.rmtree(s / "runs")
    (s / "runs").write_text("oops")
    m = json.loads(_manifest(s).read_text())
    m["runs"] = {}
    _manifest(s).write_text(json.dumps(m))
    return _into(env, s, named=s / "runs")


@case("ingest", "a run store whose lock file is a folder", words="cannot write here")
def _out_lock_is_folder(env):
    s = _store_copy(env)
    (s / ".lock").unlink(missing_ok=True)
    (s / ".lock").mkdir()
    run = _into(env, s, named=s)
    run.grew.add(s)  # a run may be in place, found by readers though the index could not be written: still consistent
    return run


# -- ingest: two writers, a kill, Ctrl-C, a full disk ----------------------------------------------------------------

def _spawn(args, **kw):
    import subprocess

    return subprocess.Popen([sys.executable, "-m", "traceql.cli", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parent.parent, **kw)


def _wait_for(predicate, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def _runs_in(store: Path) -> set[str]:
    return set(json.loads(_manifest(store).read_text())["runs"]) if _manifest(store).exists() else set()


@case("ingest", "two ingests of different traces into one store at once: both runs land", expect=0)
def _two_writers(env):
    s = _store_copy(env)
    before = _runs_in(s)
    other = copy(env, "cpu_nvtx")
    procs = [_spawn(["ingest", t, "-o", s, "--allow-no-kernels"]) for t in (other, env.inputs["contention_xz"])]
    outs = [p.communicate(timeout=300) for p in procs]
    run = Run(max(p.returncode for p in procs), "".join(o for o, _ in outs), "".join(e for _, e in outs), [],
              {s: None}, {s})
    if len(_runs_in(s) - before) != 2:
        run.err += f"\ntraceql: expected two new runs, found {sorted(_runs_in(s) - before)}"
        run.rc = 99
    return run


@case("ingest", "two ingests of the same trace into one store at once: one run", expect=0)
def _two_writers_same_trace(env):
    out = env.path("out")
    trace = copy(env, "contention_xz")
    procs = [_spawn(["ingest", trace, "-o", out]) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    run = Run(max(p.returncode for p in procs), "".join(o for o, _ in outs), "".join(e for _, e in outs), [],
              {out: None}, {out})
    if len(_runs_in(out)) != 1:
        run.err += f"\ntraceql: expected one run, found {sorted(_runs_in(out))}"
        run.rc = 99
    return run


def _staging(store: Path) -> list[Path]:
    return list(store.glob(".tmp-*"))


@case("ingest", "an ingest killed (SIGKILL) mid-way: the store is as it was, the next ingest clears the leftovers",
      expect=0)
def _sigkill_mid_ingest(env):
    s = _store_copy(env)
    before = _runs_in(s)
    proc = _spawn(["ingest", env.inputs["contention_xz"], "-o", s])
    started = _wait_for(lambda: _staging(s))
    proc.kill()
    proc.communicate()
    left = _runs_in(s)
    run = env.cli("ingest", env.inputs["cpu_nvtx"], "-o", s, "--allow-no-kernels", watch=s, grow=s)
    if not started or left != before or _staging(s):
        run.err += f"\ntraceql: staging seen {started}, runs after the kill {sorted(left)}, left {_staging(s)}"
        run.rc = 99
    return run


@case("ingest", "Ctrl-C (SIGINT) mid-ingest: exit 130, the store as it was, no staging folder left", expect=130,
      words="interrupted")
def _ctrl_c_mid_ingest(env):
    s = _store_copy(env)

    def interrupt(proc):
        _wait_for(lambda: _staging(s))
        proc.send_signal(signal.SIGINT)

    return env.child(["ingest", env.inputs["contention_xz"], "-o", s], watch=s, run=interrupt)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    kids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                kids.append(int(d.name))
    return kids


def _running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _workers_die_with_parent(env, args: list, sig: signal.Signals, **kw) -> Run:
    """``traceql ARGS`` (two local workers) sent ``sig`` once both workers run: none of them may outlive it by more
    than a few seconds (those that do are ended here, and named)."""
    kids: list[int] = []
    survivors: list[int] = []

    def signalled(proc):
        _wait_for(lambda: len(_children(proc.pid)) >= 2)
        kids.extend(_children(proc.pid))
        proc.send_signal(sig)
        proc.wait(timeout=60)
        _wait_for(lambda: not any(map(_running, kids)), timeout=10)
        survivors.extend(k for k in kids if _running(k))
        for k in survivors:
            os.kill(k, signal.SIGKILL)

    run = env.child(args, run=signalled, **kw)
    if len(kids) < 2 or survivors:
        run.err += f"\ntraceql: workers seen {kids}, still running after their parent ended: {survivors}"
        run.rc = 99
    return run


def _four_traces(env) -> list[Path]:
    return [env.inputs["contention_xz"], copy(env, "contention"), env.inputs["parquetdir"], copy(env, "cpu_nvtx")]


@case("ingest", "four traces ingested by two workers (-j 2), the ingest killed (SIGKILL): the workers die with it",
      expect=-9)
def _sigkill_workers(env):
    return _workers_die_with_parent(env, ["ingest", *_four_traces(env), "-o", env.path("out"), "-j", "2",
                                          "--allow-no-kernels"], signal.SIGKILL)


@case("ingest", "four traces ingested by two workers (-j 2), the ingest sent SIGTERM: exit 143, the workers end, no "
      "half run", expect=143, words="terminated")
def _sigterm_workers(env):
    s = _store_copy(env)
    return _workers_die_with_parent(env, ["ingest", *_four_traces(env), "-o", s, "-j", "2", "--allow-no-kernels"],
                                    signal.SIGTERM, watch=s, grow=s)


def _file_size_limit(limit: int):
    def preexec():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return preexec


@case("ingest", "the disk fills while a compressed export is unpacked", words=("cannot write here", "ulimit"))
def _full_while_unpacking(env):
    s = _store_copy(env)
    return env.child(["ingest", env.inputs["contention_xz"], "-o", s], named=s, watch=s,
                     preexec=_file_size_limit(1 << 20))


@case("ingest", "the disk fills while the run's tables are written", words=("cannot write here", "ulimit"))
def _full_while_writing(env):
    s = _store_copy(env)
    return env.child(["ingest", env.inputs["contention"], "-o", s], named=s, watch=s,
                     preexec=_file_size_limit(100_000))


@case("ingest", "the disk fills while a new store's first run is written", words=("cannot write here", "ulimit"))
def _full_new_store(env):
    out = env.path("out")
    return env.child(["ingest", env.inputs["contention"], "-o", out], named=out, watch=[out, env.tmp],
                     preexec=_file_size_limit(100_000))


# -- sql: run stores that are not what they should be -----------------------------------------------------------------

def _sql(env, store: Path, query: str = "SELECT count(*) FROM kernels", *extra, named=None, watch=None) -> Run:
    return env.cli("sql", store, query, *extra, named=named if named is not None else store,
                   watch=watch if watch is not None else [store])


def _run_file(store: Path, table: str) -> Path:
    (run_id,) = json.loads(_manifest(store).read_text())["runs"]
    return run_dir(store, run_id) / f"{table}.parquet"


@case("sql", "a folder that is not a run store", words="traceql ingest")
def _sql_plain_folder(env):
    d = env.path("plain")
    d.mkdir()
    (d / "notes.txt").write_text("hi")
    return _sql(env, d)


@case("sql", "a run store that does not exist", words="traceql ingest")
def _sql_missing(env):
    return _sql(env, env.path("nowhere"), watch=[env.tmp])


@case("sql", "a regular file given as the run store", words="traceql ingest")
def _sql_file_as_store(env):
    return _sql(env, written(env, "notes.txt", b"hello"))


@case("sql", "the manifest itself given as the run store", words="traceql ingest")
def _sql_manifest_as_store(env):
    s = _store_copy(env)
    return _sql(env, _manifest(s), watch=[s])


@case("sql", "a manifest that is not JSON", words=("manifest", "re-ingest"))
def _sql_manifest_garbage(env):
    s = _store_copy(env)
    _manifest(s).write_text("{oops")
    return _sql(env, s, named=_manifest(s))


@case("sql", "a manifest that is a JSON list", words="not a traceql manifest")
def _sql_manifest_list(env):
    s = _store_copy(env)
    _manifest(s).write_text("[1, 2]")
    return _sql(env, s, named=_manifest(s))


@case("sql", "a manifest of another format", words="not a traceql manifest")
def _sql_manifest_format(env):
    s = _store_copy(env)
    _manifest(s).write_text(json.dumps({"format": "other", "schema_version": 1, "runs": {}}))
    return _sql(env, s, named=_manifest(s))


@case("sql", "a run store of a future schema version", words=("schema version 99", "traceql"))
def _sql_future_store(env):
    s = _store_copy(env)
    m = json.loads(_manifest(s).read_text())
    m["schema_version"] = 99
    _manifest(s).write_text(json.dumps(m))
    return _sql(env, s, named=_manifest(s))


@case("sql", "a manifest whose runs are not a mapping", words=("manifest", "re-ingest"))
def _sql_manifest_runs_list(env):
    s = _store_copy(env)
    m = json.loads(_manifest(s).read_text())
    m["runs"] = [1]
    _manifest(s).write_text(json.dumps(m))
    return _sql(env, s, named=_manifest(s))


@case("sql", "a run listed in the manifest whose folder is gone", words="re-ingest")
def _sql_run_folder_missing(env):
    s = _store_copy(env)
    f = _run_file(s, "kernels")
    shutil.rmtree(f.parent)
    return _sql(env, s, named=f.parent)


@case("sql", "a table file of a run deleted", words="re-ingest")
def _sql_table_missing(env):
    s = _store_copy(env)
    f = _run_file(s, "kernels")
    f.unlink()
    return _sql(env, s, named=f)


def _damaged_table(env, how: str, table: str = "kernels") -> Run:
    s = _store_copy(env)
    f = _run_file(s, table)
    data = f.read_bytes()
    if how == "garbage":
        f.write_bytes(RANDOM)
    elif how == "truncated":
        f.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        f.write_bytes(b"")
    elif how == "future":
        t = pq.read_table(f)
        pq.write_table(t.replace_schema_metadata({**t.schema.metadata, b"traceql.schema_version": b"99"}), f)
    elif how == "foreign":
        t = pq.read_table(f)
        pq.write_table(t.replace_schema_metadata({}), f)
    elif how == "other_table":
        shutil.copy(_run_file(s, "nvtx"), f)
    elif how == "wrong_types":
        t = pq.read_table(f)
        i = t.column_names.index("start_ns")
        t = t.set_column(i, "start_ns", pa.array([str(v) for v in t["start_ns"].to_pylist()]))
        pq.write_table(t, f)
    elif how == "missing_column":
        t = pq.read_table(f)
        pq.write_table(t.drop(["end_ns"]), f)
    elif how == "text_metric":  # a metric column of text where every metric is a number
        t = pq.read_table(f)
        name = t.column_names[-1]
        pq.write_table(t.set_column(t.num_columns - 1, name, pa.array([str(v) for v in t[name].to_pylist()])), f)
    elif how == "long":  # GPU metrics a row per sample and metric, as a store of layout 3 wrote them
        t = pq.read_table(f)
        keys, own = t.column_names[:3], t.column_names[3:]
        long = pa.concat_tables([t.select(keys).append_column("metric", pa.array([m] * t.num_rows))
                                 .append_column("value", t[m]) for m in own])
        pq.write_table(long.replace_schema_metadata(t.schema.metadata), f)
    return _sql(env, s, f"SELECT count(*) FROM {table}", named=f)


@case("sql", "a table file of garbage bytes", words="re-run `traceql ingest`")
def _sql_table_garbage(env):
    return _damaged_table(env, "garbage")


@case("sql", "a table file cut in half", words="re-run `traceql ingest`")
def _sql_table_truncated(env):
    return _damaged_table(env, "truncated")


@case("sql", "a table file of zero bytes", words="re-run `traceql ingest`")
def _sql_table_empty(env):
    return _damaged_table(env, "empty")


@case("sql", "a table file of a future schema version", words=("schema version 99", "re-ingest"))
def _sql_table_future(env):
    return _damaged_table(env, "future")


@case("sql", "a Parquet file not written by traceql in place of a table", words=("not written by traceql", "re-ingest"))
def _sql_table_foreign(env):
    return _damaged_table(env, "foreign")


@case("sql", "the file of another table in place of the kernels file", words=("holds table nvtx", "re-ingest"))
def _sql_table_swapped(env):
    return _damaged_table(env, "other_table")


@case("sql", "a table file whose times are text", words=("start_ns", "re-ingest"))
def _sql_table_wrong_types(env):
    return _damaged_table(env, "wrong_types")


@case("sql", "a table file without one of its columns", words=("end_ns", "re-ingest"))
def _sql_table_missing_column(env):
    return _damaged_table(env, "missing_column")


@case("sql", "a GPU metrics file of garbage bytes", words="re-run `traceql ingest`")
def _sql_metrics_garbage(env):
    return _damaged_table(env, "garbage", "gpu_metrics")


@case("sql", "a GPU metrics file with a metric column of text", words=("is string, not double", "re-ingest"))
def _sql_metrics_text(env):
    return _damaged_table(env, "text_metric", "gpu_metrics")


@case("sql", "a GPU metrics file a row per sample and metric in a store of layout 4",
      words=("layout 3", "re-ingest"))
def _sql_metrics_long(env):
    return _damaged_table(env, "long", "gpu_metrics")


# -- sql: queries ----------------------------------------------------------------------------------------------------

def _query(env, query: str, *extra, named=None) -> Run:
    s = env.inputs["store"]
    return env.cli("sql", s, query, *extra, named=named or [], watch=[s, env.tmp])


@case("sql", "a query with a syntax error", words=("query failed", "syntax error"))
def _sql_syntax(env):
    return _query(env, "SELEC count(*) FROM kernels", named="SELEC")


@case("sql", "a query of a table that does not exist", words="query failed")
def _sql_unknown_table(env):
    return _query(env, "SELECT * FROM kernelz", named="kernelz")


@case("sql", "a query of a column that does not exist", words="query failed")
def _sql_unknown_column(env):
    return _query(env, "SELECT duration FROM kernels", named="duration")


@case("sql", "a query that mixes types", words="query failed")
def _sql_type_error(env):
    return _query(env, "SELECT name + 1 FROM kernels", named="+")


@case("sql", "a query with a parameter and no value for it", words="query failed")
def _sql_unbound_parameter(env):
    return _query(env, "SELECT * FROM kernels WHERE device_id = $device", named="device")


@case("sql", "a query that is only a comment", words="give a query")
def _sql_only_comment(env):
    s = env.inputs["store"]
    return env.cli("sql", s, "--query=-- nothing to run", named="no SQL statement", watch=[s])


@case("sql", "no query", words="give a query")
def _sql_no_query(env):
    s = env.inputs["store"]
    return env.cli("sql", s, named="traceql sql", watch=[s])


@case("sql", "COPY over a table file of the store", words=("query refused", "--allow-files"))
def _sql_copy_over_store(env):
    s = _store_copy(env)
    f = _run_file(s, "kernels")
    return _sql(env, s, f"COPY (SELECT 1 AS a) TO '{f}' (FORMAT parquet, USE_TMP_FILE false)", named=f)


@case("sql", "COPY into a new file", words=("query refused", "--allow-files"))
def _sql_copy_out(env):
    return _query(env, f"COPY (SELECT 1) TO '{env.path('out.csv')}'", named=env.path("out.csv"))


@case("sql", "read_text of a file outside the store", words=("query refused", "--allow-files"))
def _sql_read_text(env):
    return _query(env, "SELECT * FROM read_text('/etc/passwd')", named="/etc/passwd")


@case("sql", "read_csv of a file outside the store", words=("query refused", "--allow-files"))
def _sql_read_csv(env):
    return _query(env, "SELECT * FROM read_csv('/etc/passwd', sep=':')", named="/etc/passwd")


@case("sql", "read_parquet of a store file by path", words=("query refused", "--allow-files"))
def _sql_read_parquet(env):
    f = _run_file(env.inputs["store"], "kernels")
    return _query(env, f"SELECT count(*) FROM read_parquet('{f}')", named=f)


@case("sql", "glob over the file system", words=("query refused", "--allow-files"))
def _sql_glob(env):
    return _query(env, "SELECT * FROM glob('/etc/*')", named="/etc/*")


@case("sql", "ATTACH of another database", words=("query refused", "--allow-files"))
def _sql_attach(env):
    return _query(env, f"ATTACH '{env.path('x.duckdb')}' AS x", named=env.path("x.duckdb"))


@case("sql", "INSTALL of an extension", words=("query refused", "--allow-files"))
def _sql_install(env):
    return _query(env, "INSTALL httpfs", named="extensions")


@case("sql", "SET that turns file access back on", words=("query failed", "locked"))
def _sql_set_access(env):
    return _query(env, "SET enable_external_access = true", named="enable_external_access")


@case("sql", "an unknown --format", words="'table', 'csv', 'json', 'parquet'")
def _sql_bad_format(env):
    return _query(env, "SELECT 1", "--format", "xml", named="xml")


@case("sql", "--format parquet without -o", words="-o FILE")
def _sql_parquet_stdout(env):
    return _query(env, "SELECT 1", "--format", "parquet", named="--format parquet")


# -- sql: outputs ----------------------------------------------------------------------------------------------------

def _sql_out(env, out: Path, *extra, watch=None) -> Run:
    s = env.inputs["store"]
    return env.cli("sql", s, "SELECT * FROM kernels", "-o", out, *extra, named=out, watch=watch or [out, env.tmp])


@case("sql", "-o names a folder", words=("is a folder", "give a file name"))
def _sql_out_folder(env):
    d = env.path("results")
    d.mkdir()
    return _sql_out(env, d, "--format", "csv")


@case("sql", "-o below a regular file", words=("not a folder", "give a folder"))
def _sql_out_under_file(env):
    f = written(env, "notes.txt", b"x")
    return _sql_out(env, f / "out.csv", "--format", "csv", watch=[f, env.tmp])


@case("sql", "-o in a folder that does not exist", words="cannot write here")
def _sql_out_missing_folder(env):
    return _sql_out(env, env.path("no/such/folder/out.csv"), "--format", "csv")


@case("sql", "-o on a read-only file system (/sys)", words="cannot write here")
def _sql_out_read_only(env):
    return _sql_out(env, Path("/sys/traceql.csv"), "--format", "csv", watch=[env.tmp])


@case("sql", "-o a full device (a private /dev/full), CSV", words=("cannot write here", "free space"))
def _sql_out_dev_full(env):
    return _sql_out(env, full_device(env), "--format", "csv", watch=[env.tmp])


@case("sql", "-o a full device (a private /dev/full), Parquet", words=("cannot write here", "free space"))
def _sql_out_dev_full_parquet(env):
    return _sql_out(env, full_device(env), "--format", "parquet", watch=[env.tmp])


@case("sql", "the disk fills while the result is written", words=("cannot write here", "ulimit"))
def _sql_out_file_limit(env):
    s = env.inputs["store"]
    out = env.path("all.json")
    return env.child(["sql", s, "SELECT * FROM gpu_metrics", "--format", "json", "-o", out], named=out,
                     watch=[env.tmp], preexec=_file_size_limit(100_000))


@case("sql", "Ctrl-C during a long query: exit 130, no output file", expect=130, words="interrupted")
def _sql_ctrl_c(env):
    s = env.inputs["store"]
    out = env.path("out.csv")
    slow = ("SELECT count(*) FROM kernels a, kernels b, kernels c, kernels d "
            "WHERE a.start_ns + b.start_ns > c.start_ns + d.start_ns")

    def interrupt(proc):
        time.sleep(4)
        proc.send_signal(signal.SIGINT)

    return env.child(["sql", s, slow, "--format", "csv", "-o", out], watch=[env.tmp], run=interrupt)


# -- attribute -------------------------------------------------------------------------------------------------------

def _attribute(env, *args, named=(), watch=None) -> Run:
    return env.cli("attribute", *args, named=named, watch=watch if watch is not None else [env.tmp])


@case("attribute", "an input that does not exist", words="no such file")
def _attr_missing(env):
    p = env.path("nothing.sqlite")
    return _attribute(env, p, named=p)


@case("attribute", "a folder that is neither a run store nor an export", words="no .parquet files")
def _attr_plain_folder(env):
    d = env.path("plain")
    d.mkdir()
    (d / "a.txt").write_text("x")
    return _attribute(env, d, named=d)


@case("attribute", "an empty file", words="empty file")
def _attr_empty_file(env):
    return _attribute(env, written(env, "empty.sqlite", b""), named=env.path("empty.sqlite"))


@case("attribute", "an SQLite database of another program", words="not an Nsight Systems export")
def _attr_foreign_sqlite(env):
    p = env.path("other.sqlite")
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    return _attribute(env, p, named=p)


@case("attribute", "an export cut in half", words="truncated")
def _attr_truncated(env):
    data = env.inputs["contention"].read_bytes()
    p = written(env, "cut.sqlite", data[: len(data) // 2])
    return _attribute(env, p, named=p)


@case("attribute", "a run store whose runs hold no CUDA kernels", words="nsys profile -t cuda")
def _attr_no_kernels(env):
    s = env.inputs["nvtx_store"]
    return _attribute(env, s, named=s, watch=[s])


@case("attribute", "a run store whose manifest is not JSON", words=("manifest", "re-ingest"))
def _attr_manifest_garbage(env):
    s = _store_copy(env, "synthetic")
    _manifest(s).write_text("nope")
    return _attribute(env, s, named=_manifest(s))


@case("attribute", "TRACEQL_MEMORY_LIMIT that is not a size", words=("not a size", "e.g. 2GB"))
def _attr_memory_limit_garbage(env):
    s = env.inputs["store"]
    return env.cli("attribute", s, named="TRACEQL_MEMORY_LIMIT='lots'", watch=[s], env={"TRACEQL_MEMORY_LIMIT": "lots"})


@case("attribute", "TRACEQL_MEMORY_LIMIT too small for the work", words=("out of memory", "raise it"))
def _attr_memory_limit_tiny(env):
    s = env.inputs["store"]
    return env.cli("attribute", s, named="TRACEQL_MEMORY_LIMIT=4MB", watch=[s], env={"TRACEQL_MEMORY_LIMIT": "4MB"})


@case("attribute", "a run store of a future schema version", words=("schema version 99", "traceql"))
def _attr_future_store(env):
    s = _store_copy(env, "synthetic")
    m = json.loads(_manifest(s).read_text())
    m["schema_version"] = 99
    _manifest(s).write_text(json.dumps(m))
    return _attribute(env, s, named=_manifest(s))


@case("attribute", "a run store whose kernels file is garbage", words="re-run `traceql ingest`")
def _attr_table_garbage(env):
    s = _store_copy(env, "synthetic")
    f = _run_file(s, "kernels")
    f.write_bytes(RANDOM)
    return _attribute(env, s, named=f)


@case("attribute", "a run store whose kernels file lacks a column", words=("lacks column", "re-ingest"))
def _attr_table_missing_column(env):
    s = _store_copy(env, "synthetic")
    f = _run_file(s, "kernels")
    t = pq.read_table(f)
    pq.write_table(t.drop(["dur_ns"]), f)
    return _attribute(env, s, named=f)


@case("attribute", "--baseline that does not exist", words="no such file")
def _attr_baseline_missing(env):
    p = env.path("base.sqlite")
    return _attribute(env, env.inputs["synthetic"], "--baseline", p, named=p)


@case("attribute", "--baseline that is also an input", words="give the baseline run only once")
def _attr_baseline_is_input(env):
    s = env.inputs["synthetic"]
    return _attribute(env, s, "--baseline", s, named=s)


@case("attribute", "--baseline recorded on another GPU model", words=("same GPU model",))
def _attr_baseline_other_gpu(env):
    b = env.inputs["other_gpu"]
    return _attribute(env, env.inputs["synthetic"], "--baseline", b, named=[b, "A100"])


@case("attribute", "--baseline that is a text file", words="not an SQLite file")
def _attr_baseline_text(env):
    p = written(env, "base.sqlite", b"text\n" * 30)
    return _attribute(env, env.inputs["synthetic"], "--baseline", p, named=p)


@case("attribute", "--ncu that does not exist", words="no such file")
def _attr_ncu_missing(env):
    p = env.path("k.ncu-rep")
    return _attribute(env, env.inputs["synthetic"], "--ncu", p, named=p)


@case("attribute", "--ncu given an nsys export", words="not an Nsight Compute report")
def _attr_ncu_not_report(env):
    p = env.inputs["cpu_nvtx"]
    return _attribute(env, env.inputs["synthetic"], "--ncu", p, named=p)


@case("attribute", "--ncu given a run store without an Nsight Compute run", words="holds no Nsight Compute run")
def _attr_ncu_store_without(env):
    s = env.inputs["nvtx_store"]
    return _attribute(env, env.inputs["synthetic"], "--ncu", s, named=s, watch=[s, env.tmp])


@case("attribute", "--ncu whose profiled kernels never ran in the input", words="traceql collect --ncu")
def _attr_ncu_no_match(env):
    s = env.inputs["ncu_store"]
    return _attribute(env, env.inputs["synthetic"], "--ncu", s, named=s, watch=[s, env.tmp])


@case("attribute", "--ncu of random bytes", words="Nsight Compute")
def _attr_ncu_garbage(env):
    p = written(env, "bad.ncu-rep", RANDOM)
    return _attribute(env, env.inputs["synthetic"], "--ncu", p, named=p)


@case("attribute", "an unknown --format", words="'table', 'json', 'csv'")
def _attr_bad_format(env):
    return _attribute(env, env.inputs["synthetic"], "--format", "xml", named="xml")


@case("attribute", "an unknown --focus", words="'any', 'comm'")
def _attr_bad_focus(env):
    return _attribute(env, env.inputs["synthetic"], "--focus", "gemm", named="gemm")


@case("attribute", "-o names a regular file", words=("not a folder", "give a folder"))
def _attr_out_is_file(env):
    f = written(env, "results", b"x")
    return _attribute(env, env.inputs["synthetic"], "-o", f, named=f)


@case("attribute", "-o below a regular file", words=("not a folder", "give a folder"))
def _attr_out_under_file(env):
    f = written(env, "results", b"x")
    return _attribute(env, env.inputs["synthetic"], "-o", f / "sub", named=f / "sub")


@case("attribute", "-o on a read-only file system (/sys)", words="cannot write here")
def _attr_out_read_only(env):
    return _attribute(env, env.inputs["synthetic"], "-o", "/sys/traceql-attr", named="/sys/traceql-attr")


@case("attribute", "-o where attribution.json is a folder", words=("is a folder", "give a file name"))
def _attr_out_json_folder(env):
    d = env.path("results")
    (d / "attribution.json").mkdir(parents=True)
    return _attribute(env, env.inputs["synthetic"], "-o", d, named=d / "attribution.json")


@case("attribute", "the disk fills while the attribution files are written", words=("cannot write here", "ulimit"))
def _attr_out_full(env):
    d = env.path("results")
    return env.child(["attribute", env.inputs["synthetic"], "-o", d, "--format", "json"], named=d,
                     watch=[env.tmp], preexec=_file_size_limit(2_000))


# -- report ----------------------------------------------------------------------------------------------------------

def _report(env, *args, named=(), watch=None, out: Path | None = None) -> Run:
    out = out or env.path("report.html")
    return env.cli("report", *args, "-o", out, named=named, watch=watch if watch is not None else [env.tmp])


@case("report", "an input that does not exist", words="no such file")
def _rep_missing(env):
    p = env.path("none.sqlite")
    return _report(env, p, named=p)


@case("report", "a folder that is neither a run store nor an export", words="no .parquet files")
def _rep_plain_folder(env):
    d = env.path("plain")
    d.mkdir()
    (d / "x.txt").write_text("x")
    return _report(env, d, named=d)


@case("report", "a store holding only an Nsight Compute profile", words="no Nsight Systems runs")
def _rep_only_ncu(env):
    s = env.inputs["ncu_store"]
    return _report(env, s, named=s, watch=[s, env.tmp])


@case("report", "a store whose only run has no CUDA kernels", words=("no CUDA kernels", "--on-error skip"))
def _rep_no_kernels(env):
    s = env.inputs["nvtx_store"]
    (run_id,) = json.loads(_manifest(s).read_text())["runs"]
    return _report(env, s, named=run_id, watch=[s, env.tmp])


@case("report", "every run bad, with --on-error skip: the page lists them, exit 2", words="skipped run")
def _rep_skip_all(env):
    s = env.inputs["nvtx_store"]
    out = env.path("report.html")
    run = env.cli("report", s, "-o", out, "--on-error", "skip", named=[], watch=[s])
    if not out.is_file() or 'id="skipped"' not in out.read_text():
        run.err += "\ntraceql: expected a whole page listing the skipped run"
        run.rc = 99
    return run


@case("report", "a damaged run (a table file of random bytes) among good ones, with --on-error skip: the others are "
      "reported, the damaged one named as skipped, exit 2", words=("skipped run", "not a readable Parquet file"))
def _rep_skip_damaged(env):
    s = env.path("two")
    alone = [dict(start_ns=i * 10_000, end_ns=i * 10_000 + 1000, name="gemm", ctas=8, correlation_id=i + 1)
             for i in range(4)]
    for run_id in ("5e7e7e7e00000001", "5e7e7e7e00000002"):
        make_store(s, kernels=alone, runtime_api=launches(alone), run_id=run_id)
    damaged = run_dir(s, "5e7e7e7e00000002") / "kernels.parquet"
    damaged.write_bytes(RANDOM[:4096])
    out = env.path("report.html")
    run = env.cli("report", s, "-o", out, "--on-error", "skip", named=[damaged], watch=[s])
    if not out.is_file() or "5e7e7e7e00000001" not in out.read_text():
        run.err += "\ntraceql: expected a page over the good run"
        run.rc = 99
    return run


@case("report", "a run store whose manifest is not JSON", words=("manifest", "re-ingest"))
def _rep_manifest_garbage(env):
    s = _store_copy(env, "synthetic")
    _manifest(s).write_text("{")
    return _report(env, s, named=_manifest(s))


@case("report", "a run store of a future schema version", words=("schema version 99", "traceql"))
def _rep_future_store(env):
    s = _store_copy(env, "synthetic")
    m = json.loads(_manifest(s).read_text())
    m["schema_version"] = 99
    _manifest(s).write_text(json.dumps(m))
    return _report(env, s, named=_manifest(s))


@case("report", "a run store whose kernels file is garbage", words="re-run `traceql ingest`")
def _rep_table_garbage(env):
    s = _store_copy(env, "synthetic")
    f = _run_file(s, "kernels")
    f.write_bytes(RANDOM)
    return _report(env, s, named=f)


def _recipe(env, text: str) -> Path:
    p = env.path("my.toml")
    p.write_text(text)
    return p


SECTION = '[[section]]\ntitle = "T"\nchart = "kernel_time"\n[section.queries]\ntotals = { view = "kernel_totals" }\n'


@case("report", "a recipe file that does not exist", words="built-in recipes")
def _rep_recipe_missing(env):
    p = env.path("nope.toml")
    return _report(env, env.inputs["synthetic"], "--recipe", p, named=p)


@case("report", "a built-in recipe name misspelt", words="not a built-in recipe")
def _rep_recipe_misspelt(env):
    return _report(env, env.inputs["synthetic"], "--recipe", "overlapp", named="overlapp")


@case("report", "a recipe that is not TOML", words="not valid TOML")
def _rep_recipe_not_toml(env):
    p = _recipe(env, "title = [unclosed\n")
    return _report(env, env.inputs["synthetic"], "--recipe", p, named=p)


@case("report", "a recipe without sections", words="[[section]]")
def _rep_recipe_no_sections(env):
    p = _recipe(env, 'title = "empty"\n')
    return _report(env, env.inputs["synthetic"], "--recipe", p, named=p)


@case("report", "a recipe naming a view that does not exist", words="no view")
def _rep_recipe_unknown_view(env):
    p = _recipe(env, SECTION.replace("kernel_totals", "kernel_totalz"))
    return _report(env, env.inputs["synthetic"], "--recipe", p, named=[p, "kernel_totalz"])


@case("report", "a recipe naming a chart that does not exist", words="no chart")
def _rep_recipe_unknown_chart(env):
    p = _recipe(env, SECTION.replace('chart = "kernel_time"', 'chart = "pie"'))
    return _report(env, env.inputs["synthetic"], "--recipe", p, named=[p, "pie"])


@case("report", "a recipe with an unknown scope", words="choose run or all")
def _rep_recipe_bad_scope(env):
    p = _recipe(env, SECTION.replace('title = "T"\n', 'title = "T"\nscope = "everything"\n'))
    return _report(env, env.inputs["synthetic"], "--recipe", p, named=[p, "everything"])


@case("report", "a recipe query with both a view and SQL", words="exactly one of")
def _rep_recipe_view_and_sql(env):
    p = _recipe(env, SECTION.replace('{ view = "kernel_totals" }', '{ view = "kernel_totals", sql = "SELECT 1" }'))
    return _report(env, env.inputs["synthetic"], "--recipe", p, named=p)


@case("report", "a recipe section with an unknown key", words="unknown key")
def _rep_recipe_unknown_key(env):
    p = _recipe(env, SECTION.replace('title = "T"\n', 'title = "T"\ncolour = "red"\n'))
    return _report(env, env.inputs["synthetic"], "--recipe", p, named=[p, "colour"])


@case("report", "a recipe chart missing the query it needs", words="needs the queries")
def _rep_recipe_chart_needs(env):
    p = _recipe(env, SECTION.replace("totals = ", "other = "))
    return _report(env, env.inputs["synthetic"], "--recipe", p, named=[p, "totals"])


@case("report", "a recipe whose SQL fails on the run", words=("--on-error skip",))
def _rep_recipe_sql_error(env):
    p = _recipe(env, '[[section]]\ntitle = "T"\ntable = "q"\n[section.queries]\n'
                     'q = { sql = "SELECT run_id, no_such_column FROM kernels" }\n')
    return _report(env, env.inputs["synthetic"], "--recipe", p, named="no_such_column")


@case("report", "a recipe whose SQL reads a file outside the store", words=("--on-error skip", "Cannot access"))
def _rep_recipe_sql_copy(env):
    target = env.path("stolen.csv")
    p = _recipe(env, '[[section]]\ntitle = "T"\ntable = "q"\n[section.queries]\n'
                     "q = { sql = \"SELECT r.run_id, t.content FROM runs r, read_text('/etc/passwd') t\" }\n")
    return _report(env, env.inputs["synthetic"], "--recipe", p, named="/etc/passwd", watch=[env.tmp, target])


@case("report", "an unknown --on-error", words="'raise', 'skip'")
def _rep_bad_on_error(env):
    return _report(env, env.inputs["synthetic"], "--on-error", "maybe", named="maybe")


@case("report", "-o names a folder", words=("is a folder", "give a file name"))
def _rep_out_folder(env):
    d = env.path("pages")
    d.mkdir()
    return _report(env, env.inputs["synthetic"], out=d, named=d)


@case("report", "-o below a regular file", words=("not a folder", "give a folder"))
def _rep_out_under_file(env):
    f = written(env, "notes", b"x")
    return _report(env, env.inputs["synthetic"], out=f / "r.html", named=f)


@case("report", "-o a full device (a private /dev/full): refused, the device left alone",
      words=("cannot write here", "free space"))
def _rep_out_dev_full(env):
    device = full_device(env)
    run = _report(env, env.inputs["synthetic"], out=device, named=device)
    if not device.is_char_device():
        run.err += f"\ntraceql: {device} is no longer a device"
        run.rc = 99
    return run


@case("report", "-o on a read-only file system (/sys)", words="cannot write here")
def _rep_out_read_only(env):
    return _report(env, env.inputs["synthetic"], out=Path("/sys/traceql.html"), named="/sys")


@case("report", "the disk fills while the page is written", words=("cannot write here", "ulimit"))
def _rep_out_full(env):
    out = env.path("report.html")
    return env.child(["report", env.inputs["synthetic"], "-o", out], named=out, watch=[env.tmp],
                     preexec=_file_size_limit(200_000))


# -- collect ---------------------------------------------------------------------------------------------------------

BROKEN_SMI = ("#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"\n"
              "exit 9\n")


def _no_gpu(env) -> dict[str, str]:
    """An environment whose nvidia-smi reaches no driver: no GPU, whatever machine the suite runs on."""
    bin_dir = env.path("bin")
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(BROKEN_SMI)
    smi.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


def _collect(env, *args, named=(), out: Path | None = None, env_vars=None) -> Run:
    out = out or env.path("store")
    extra = {**_no_gpu(env), **(env_vars or {})}
    return env.cli("collect", "-o", out, *args, named=named, watch=[env.tmp], env=extra)


def _with_nsys() -> None:
    from conftest import _nsys_or_skip

    _nsys_or_skip()


@case("collect", "no program after --", words="Missing argument")
def _col_no_program(env):
    return _collect(env, named="--")


@case("collect", "a program path that does not exist", words="no such file")
def _col_program_missing(env):
    p = env.path("nope.sh")
    return _collect(env, "--", p, named=p)


@case("collect", "a program name not on PATH", words="command not found")
def _col_program_not_on_path(env):
    return _collect(env, "--", "traceql-no-such-program", named="traceql-no-such-program")


@case("collect", "a program file that is not executable", words="not an executable file")
def _col_program_not_executable(env):
    p = written(env, "train.py", b"print('hi')\n")
    return _collect(env, "--", p, named=p)


@case("collect", "a folder given as the program", words="not an executable file")
def _col_program_folder(env):
    d = env.path("prog")
    d.mkdir()
    return _collect(env, "--", d, named=d)


@case("collect", "--name with a folder in it", words="give a file name")
def _col_name_slash(env):
    return _collect(env, "--name", "a/b", "--", "true", named="a/b")


@case("collect", "--name with %p (the pid, unknown before the program starts)", words="%q{VAR}")
def _col_name_pid(env):
    return _collect(env, "--name", "run-%p", "--", "true", named="run-%p")


@case("collect", "--name with %q{VAR} of a variable that is not set", words="not set")
def _col_name_unset_var(env):
    return _collect(env, "--name", "rank%q{TRACEQL_NO_SUCH_VAR}", "--", "true", named="TRACEQL_NO_SUCH_VAR")


@case("collect", "--name with a literal percent sign (%%): the report gets that name", expect=0,
      words="run ")
def _col_name_percent(env):
    run = _collect_child(env, [sys.executable, str(Path(__file__).resolve().parent.parent / "collectors" /
                                                  "cpu_nvtx.py")], "--name", "100%%-cpu")
    if not (env.path("store") / "reports" / "100%-cpu.nsys-rep").is_file():
        run.err += "\ntraceql: expected the report reports/100%-cpu.nsys-rep"
        run.rc = 99
    return run


@case("collect", "--name with a dot (lr0.1): the report nsys writes (lr0.1.nsys-rep) is found and ingested", expect=0,
      words="run ")
def _col_name_dot(env):
    run = _collect_child(env, [sys.executable, str(Path(__file__).resolve().parent.parent / "collectors" /
                                                  "cpu_nvtx.py")], "--name", "lr0.1")
    if not (env.path("store") / "reports" / "lr0.1.nsys-rep").is_file():
        run.err += "\ntraceql: expected the report reports/lr0.1.nsys-rep"
        run.rc = 99
    return run


@case("collect", "--nsys-args that set the output", words="--name and --out")
def _col_nsys_args_output(env):
    return _collect(env, "--nsys-args", "-o elsewhere", "--", "true", named="--nsys-args")


@case("collect", "--nsys-args with an unbalanced quote", words="quote it as a shell would")
def _col_nsys_args_quote(env):
    return _collect(env, "--nsys-args", "--env-var='A=1", "--", "true", named="--nsys-args")


@case("collect", "--ncu-args with an unbalanced quote", words="quote it as a shell would")
def _col_ncu_args_quote(env):
    return _collect(env, "--ncu", "--ncu-args", '--nvtx-include "x', "--", "true", named="--ncu-args")


@case("collect", "a label that is not KEY=VALUE", words="KEY=VALUE")
def _col_label(env):
    return _collect(env, "--label", "oops", "--", "true", named="oops")


@case("collect", "--gpu-metrics without a GPU (nvidia-smi reaches no driver)", words="run without --gpu-metrics")
def _col_gpu_metrics_no_gpu(env):
    return _collect(env, "--gpu-metrics", "--", "true", named="--gpu-metrics")


@case("collect", "--power without a GPU", words="run without --power")
def _col_power_no_gpu(env):
    return _collect(env, "--power", "--", "true", named="--power")


@case("collect", "--ncu without a GPU", words="run without --ncu")
def _col_ncu_no_gpu(env):
    return _collect(env, "--ncu", "--", "true", named="--ncu")


@case("collect", "TRACEQL_NSYS naming no executable", words="set TRACEQL_NSYS")
def _col_nsys_env(env):
    return _collect(env, "--", "true", env_vars={"TRACEQL_NSYS": "/nonexistent/nsys"}, named="/nonexistent/nsys")


@case("collect", "an unknown --clock-control", words="'none', 'base', 'reset'")
def _col_clock_control(env):
    return _collect(env, "--ncu", "--clock-control", "turbo", "--", "true", named="turbo")


@case("collect", "a negative --timeout", words="positive number of seconds")
def _col_timeout_negative(env):
    return _collect(env, "--timeout", "-5", "--", "true", named="-5")


@case("collect", "-o names a regular file", words=("not a folder", "give a folder"))
def _col_out_file(env):
    f = written(env, "store", b"x")
    return _collect(env, "--", "true", out=f, named=f)


@case("collect", "-o on a read-only file system (/sys)", words="cannot write here")
def _col_out_read_only(env):
    return _collect(env, "--", "true", out=Path("/sys/traceql-runs"), named="/sys/traceql-runs")


def _collect_child(env, program: list[str], *args, run=None, timeout: float = 180) -> Run:
    _with_nsys()
    out = env.path("store")
    return env.child(["collect", "-o", out, *args, "--", *program], env=_no_gpu(env), run=run, timeout=timeout,
                     watch=[out], grow=[out])


@case("collect", "a program that crashes with exit code 3: the code passed on, the report kept", expect=3,
      words=("exited with code 3", "report was kept"))
def _col_program_crashes(env):
    return _collect_child(env, [sys.executable, "-c", "import sys; print('working'); sys.exit(3)"])


@case("collect", "a program killed by a signal (SIGSEGV): 128 + 11 passed on, the report kept", expect=139,
      words=("exited with code 139", "report was kept"))
def _col_program_segfaults(env):
    return _collect_child(env, [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"])


@case("collect", "a program that forks a child and leaves it running: the child is ended", expect=0,
      words="still running after nsys exited")
def _col_program_forks(env):
    collector = Path(__file__).resolve().parent.parent / "collectors" / "cpu_nvtx.py"
    return _collect_child(env, ["bash", "-c", f"sleep 300 & exec {sys.executable} {collector}"])


@case("collect", "Ctrl-C while the program runs: exit 130, the partial report kept", expect=130,
      words=("interrupted", "report was kept"))
def _col_ctrl_c(env):
    def interrupt(proc):
        _wait_for(lambda: any(env.path("store").glob("reports/*")), timeout=60)
        time.sleep(3)  # nsys and the program are up
        proc.send_signal(signal.SIGINT)

    return _collect_child(env, ["sleep", "120"], run=interrupt)


@case("collect", "a program that runs past --timeout: exit 124, the partial report kept", expect=124,
      words=("--timeout of 2 s", "report was kept"))
def _col_timeout(env):
    return _collect_child(env, ["sleep", "120"], "--timeout", "2")


def _debian_nsys(env, importer: bool, importer_fails: bool = False) -> Path:
    """Debian's nsight-systems as shipped, in a folder of this case: bin/nsys links to target-linux-x64/nsys, a link
    to the real binary in another tree (x86_64-linux-gnu), where nsys looks for its host tools beside it and finds
    none; the host folder (with QdstrmImporter when ``importer``) sits beside bin/. The fake nsys, like the real one
    without its importer, leaves only ``OUT.qdstrm``; its export writes the bundled SQLite export of cpu_nvtx, and the
    importer writes the .nsys-rep it is asked for (the import logic, on any machine, without root)."""
    root = env.path("debian")
    shared, arch = root / "usr/lib/nsight-systems", root / "usr/lib/x86_64-linux-gnu/nsight-systems"
    for folder in (shared / "bin", shared / "host-linux-x64", arch / "target-linux-x64"):
        folder.mkdir(parents=True)
    real = arch / "target-linux-x64" / "nsys"
    real.write_text(f"""#!/bin/sh
if [ "$1" = --version ]; then echo "NVIDIA Nsight Systems version 2022.4.2.1-df9881f"; exit 0; fi
cmd="$1"
while [ "$#" -gt 1 ]; do [ "$1" = -o ] && out="$2"; shift; done
if [ "$cmd" = profile ]; then
  printf 'raw collection' > "$out.qdstrm"
  echo "Importer error status: The importer binary and its dependencies were not found." >&2
  exit 0
fi
cp "{env.inputs['cpu_nvtx']}" "$out"
""")
    (shared / "target-linux-x64").symlink_to("../x86_64-linux-gnu/nsight-systems/target-linux-x64")
    (shared / "bin" / "nsys").symlink_to("../target-linux-x64/nsys")
    if importer:
        imp = shared / "host-linux-x64" / "QdstrmImporter"
        imp.write_text(f"""#!/bin/sh
while [ "$#" -gt 0 ]; do [ "$1" = -i ] && src="$2"; [ "$1" = -o ] && out="$2"; shift; done
grep -q 'raw collection' "$src" || exit 1
{'echo "Importer error: unsupported QDSTRM version" >&2; printf partial > "$out"; exit 1' if importer_fails else ''}
cp "{env.inputs['cpu_rep']}" "$out"
""")
        imp.chmod(0o755)
    real.chmod(0o755)
    return shared / "bin" / "nsys"


@case("collect", "Debian's nsight-systems as shipped: nsys leaves a .qdstrm (no importer where it looks); collect "
      "imports it with the installation's QdstrmImporter and ingests the report", expect=0,
      words=("importing r.qdstrm with", "host-linux-x64/QdstrmImporter", "NVTX events"))
def _col_debian_importer(env):
    nsys = _debian_nsys(env, importer=True)
    out = env.path("store")
    run = env.cli("collect", "-o", out, "--name", "r", "--", "true", watch=[out], grow=[out],
                  env={**_no_gpu(env), "TRACEQL_NSYS": str(nsys)})
    if run.rc == 0:  # the report in place of the raw collection, and its run in the store
        assert (out / "reports" / "r.nsys-rep").is_file() and not (out / "reports" / "r.qdstrm").exists()
        assert len(json.loads((out / "manifest.json").read_text())["runs"]) == 1
    return run


@case("collect", "Debian's nsight-systems as shipped, and no QdstrmImporter in its installation: the link to add",
      words=("ln -s", "x86_64-linux-gnu/nsight-systems/host-linux-x64", "QdstrmImporter -i"))
def _col_debian_no_importer(env):
    nsys = _debian_nsys(env, importer=False)
    return env.cli("collect", "-o", env.path("store"), "--name", "r", "--", "true", named=nsys,
                   env={**_no_gpu(env), "TRACEQL_NSYS": str(nsys)})


@case("collect", "Debian's nsight-systems as shipped, and its QdstrmImporter fails: the raw collection kept, no "
      "partial report", words=("failed to import", "unsupported QDSTRM version", "raw collection was kept"))
def _col_debian_importer_fails(env):
    nsys = _debian_nsys(env, importer=True, importer_fails=True)
    out = env.path("store")
    run = env.cli("collect", "-o", out, "--name", "r", "--", "true", named=out / "reports" / "r.qdstrm",
                  env={**_no_gpu(env), "TRACEQL_NSYS": str(nsys)})
    assert (out / "reports" / "r.qdstrm").is_file() and not (out / "reports" / "r.nsys-rep").exists()
    return run


# -- overlap: traces it cannot answer from; lazily ingested stores whose export changed --------------------------

def overlap(env: Env, *inputs, watch=()) -> Run:
    return env.cli("overlap", *inputs, named=[inputs[0]], watch=[*watch, env.tmp])


@case("overlap", "a text file named .sqlite", words="not an SQLite file")
def _ovl_text_file(env):
    return overlap(env, written(env, "notes.sqlite", b"this is not a database\n" * 50))


@case("overlap", "an SQLite database of another program", words="not an Nsight Systems export")
def _ovl_foreign_sqlite(env):
    return overlap(env, foreign_sqlite(env))


@case("overlap", "an export cut in half (a copy that did not finish)", words=("truncated", "again"))
def _ovl_truncated(env):
    data = env.inputs["contention"].read_bytes()
    return overlap(env, written(env, "cut.sqlite", data[: len(data) // 2]))


@case("overlap", "a path that does not exist", words="no such file")
def _ovl_missing(env):
    return overlap(env, env.path("does_not_exist.sqlite"))


@case("overlap", "an Nsight Compute report (no timeline)", words=("Nsight Compute", "Nsight Systems trace"))
def _ovl_ncu_report(env):
    return overlap(env, env.inputs["ncu_xz"])


@case("overlap", "an export without CUDA kernels", words="nsys profile -t cuda")
def _ovl_no_kernels(env):
    return overlap(env, copy(env, "cpu_nvtx"))


@case("overlap", "an export whose kernels have fractional times", words=("kernels", "export it again"))
def _ovl_fractional(env):
    p = edited(env, "frac.sqlite", f'UPDATE {KERNEL} SET "end" = "end" + 0.5', src="contention", rebuild=(KERNEL,))
    return overlap(env, p)


def _lazy_store(env: Env) -> tuple[Path, Path]:
    """A copy of a real export, ingested lazily (API calls, NVTX, GPU metrics left in it)."""
    export = copy(env, "contention", "lazy.sqlite")
    out = env.path("lazy")
    from traceql.ingest import DEFERRABLE
    from traceql.ingest import ingest as do_ingest

    do_ingest(export, out, defer=DEFERRABLE)
    return export, out


@case("sql", "a lazily ingested run whose export changed since", words=("changed", "traceql ingest"))
def _lazy_export_changed(env):
    export, out = _lazy_store(env)
    with open(export, "ab") as f:
        f.write(b"\0")
    return env.cli("sql", out, "SELECT count(*) FROM runtime_api", named=[export], watch=[out])


@case("sql", "a lazily ingested run whose export was deleted", words=("missing", "traceql ingest"))
def _lazy_export_deleted(env):
    export, out = _lazy_store(env)
    export.unlink()
    return env.cli("sql", out, "SELECT count(*) FROM runtime_api", named=[export], watch=[out])


@case("attribute", "a lazily ingested run whose export changed since", words=("changed", "traceql ingest"))
def _att_lazy_export_changed(env):
    export, out = _lazy_store(env)
    with open(export, "ab") as f:
        f.write(b"\0")
    return env.cli("attribute", out, named=[export], watch=[out])


# -- migrate: what is not a store of an earlier layout; a migration the disk stops ------------------------------------

STORE_V1 = Path(__file__).parent / "data" / "store_v1"  # a real store of layout 1, written by traceql on a GPU machine


@case("migrate", "a path that does not exist", words="no such run directory")
def _mig_missing(env):
    return env.cli("migrate", env.path("nowhere"), named=[env.path("nowhere")], watch=[env.tmp])


@case("migrate", "a trace given in place of a run directory", words=("not a run directory", "traceql ingest"))
def _mig_trace(env):
    trace = copy(env, "contention")
    return env.cli("migrate", trace, named=[trace], watch=[trace])


@case("migrate", "a run store whose manifest is not JSON", words=("manifest", "re-ingest"))
def _mig_manifest_not_json(env):
    s = _store_copy(env)
    _manifest(s).write_text("{not json")
    return env.cli("migrate", s, named=[s], watch=[s])


@case("migrate", "a run store of a layout newer than this traceql's", words=("layout 99", "newer"))
def _mig_newer_layout(env):
    s = _store_copy(env)
    manifest = json.loads(_manifest(s).read_text())
    _manifest(s).write_text(json.dumps({**manifest, "layout": 99}))
    return env.cli("migrate", s, named=[s], watch=[s])


@case("migrate", "the disk fills while a store of layout 1 is migrated: no half-written file, the command goes on "
      "where it stopped", words=("cannot write here", "ulimit", "traceql migrate"))
def _mig_full(env):
    s = env.path("v1")
    shutil.copytree(STORE_V1, s)
    return env.child(["migrate", s], named=[s], grow=[s], watch=[s], preexec=_file_size_limit(8 << 10))


# -- every command that writes: an output that is one of its inputs, or lies inside one; devices and pipes -----------

SUITE = H200 / "suite"  # a run store whose NVTX ranges mark the modes (paper reads it)


def _one_run(store: Path) -> Path:
    (run_id,) = json.loads(_manifest(store).read_text())["runs"]
    return run_dir(store, run_id)


OVERWRITE = ("never writes over what it reads", "outside its inputs")


@case("report", "-o the trace it reports on (T.sqlite -o T.sqlite)", words=OVERWRITE)
def _rep_out_is_input(env):
    t = copy(env, "cpu_nvtx")
    return env.cli("report", t, "-o", t, named=[t], watch=[env.tmp])


@case("report", "-o the index of the run store it reports on (S -o S/manifest.json)", words=OVERWRITE)
def _rep_out_is_manifest(env):
    s = _store_copy(env, "synthetic")
    return env.cli("report", s, "-o", _manifest(s), named=[_manifest(s), f"input {s}"], watch=[env.tmp])


@case("report", "-o a hard link to the trace it reports on", words=OVERWRITE)
def _rep_out_hard_link(env):
    t = copy(env, "cpu_nvtx")
    link = env.path("report.html")
    os.link(t, link)
    return env.cli("report", t, "-o", link, named=[link, f"input {t}"], watch=[env.tmp])


@case("paper", "-o the index of the run store it reads (S -o S/manifest.json)", words=OVERWRITE)
def _paper_out_is_manifest(env):
    s = _store_copy(env, "synthetic")
    return env.cli("paper", s, "-o", _manifest(s), named=[_manifest(s), f"input {s}"], watch=[env.tmp])


@case("sql", "--format parquet -o a table file of the store it reads", words=OVERWRITE)
def _sql_out_is_run_file(env):
    s = _store_copy(env)
    f = _run_file(s, "kernels")
    return env.cli("sql", s, "SELECT * FROM kernels WHERE false", "--format", "parquet", "-o", f,
                   named=[f, f"input {s}"], watch=[env.tmp])


@case("sql", "-o a symbolic link to the index of the store it reads", words=OVERWRITE)
def _sql_out_link_to_manifest(env):
    s = _store_copy(env)
    link = env.path("result.csv")
    link.symlink_to(_manifest(s))
    return env.cli("sql", s, "SELECT 1", "--format", "csv", "-o", link, named=[link, f"input {s}"], watch=[env.tmp])


@case("sql", "-o a hard link to a table file of the store it reads", words=OVERWRITE)
def _sql_out_hard_link(env):
    s = _store_copy(env)
    link = env.path("kernels.parquet")
    os.link(_run_file(s, "kernels"), link)
    return env.cli("sql", s, "SELECT 1", "--format", "parquet", "-o", link, named=[link, f"input {s}"],
                   watch=[env.tmp])


@case("attribute", "-o a run folder of the store it reads", words=OVERWRITE)
def _attr_out_run_folder(env):
    s = _store_copy(env, "synthetic")
    d = _one_run(s)
    return env.cli("attribute", s, "-o", d, named=[d, f"input {s}"], watch=[env.tmp])


@case("attribute", "--baseline that is the input through a symbolic link", words="give the baseline run only once")
def _attr_baseline_link(env):
    s = env.inputs["synthetic"]
    link = env.path("baseline")
    link.symlink_to(s, target_is_directory=True)
    return _attribute(env, s, "--baseline", link, named=link)


@case("diff", "-o a run folder of a store it compares", words=OVERWRITE)
def _diff_out_run_folder(env):
    s = _store_copy(env, "synthetic")
    d = _one_run(s)
    return env.cli("diff", env.inputs["synthetic"], s, "-o", d, named=[d, f"input {s}"], watch=[env.tmp])


@case("diff", "--html the index of a store it compares, given as PATH@RUN", words=OVERWRITE)
def _diff_html_manifest(env):
    s = _store_copy(env, "synthetic")
    run_id = _one_run(s).name.removeprefix("run_id=")
    return env.cli("diff", env.inputs["synthetic"], f"{s}@{run_id}", "--html", _manifest(s),
                   named=[_manifest(s), f"input {s}"], watch=[env.tmp])


@case("ingest", "-o inside the export folder it reads", words=OVERWRITE)
def _out_inside_export(env):
    e = copy(env, "parquetdir", "export")
    out = e / "runs"
    return env.cli("ingest", e, "-o", out, named=[out, f"input {e}"], watch=[env.tmp])


@case("overlap", "--keep inside the export folder it reads", words=OVERWRITE)
def _ovl_keep_inside_export(env):
    e = copy(env, "parquetdir", "export")
    keep = e / "kept"
    return env.cli("overlap", e, "--keep", keep, named=[keep, f"input {e}"], watch=[env.tmp])


@case("paper", "-o names a folder: refused before the work", words=("is a folder", "give a file name"))
def _paper_out_folder(env):
    d = env.path("results")
    d.mkdir()
    return env.cli("paper", SUITE, "-o", d, named=[d], watch=[env.tmp])


@case("diff", "-o below a regular file: refused before the work", words=("not a folder", "give a folder"))
def _diff_out_under_file(env):
    f = written(env, "notes", b"x")
    s = env.inputs["synthetic"]
    return env.cli("diff", s, s, "-o", f / "diff", named=[f], watch=[env.tmp])


@case("paper", "-o on a read-only file system (/sys): refused before the work", words="cannot write here")
def _paper_out_read_only(env):
    return env.cli("paper", SUITE, "-o", "/sys/traceql-paper.txt", named="/sys", watch=[env.tmp])


@case("diff", "-o on a read-only file system (/sys): refused before the work", words="cannot write here")
def _diff_out_read_only(env):
    s = env.inputs["synthetic"]
    return env.cli("diff", s, s, "-o", "/sys/traceql-diff", named="/sys", watch=[env.tmp])


def _fake_nsys(env) -> Path:
    """An nsys that 'exports' any report as the bundled SQLite export of cpu_nvtx (what nsys 2022.4 makes of
    cpu_nvtx.nsys-rep): the export cache's logic, on any machine, with or without Nsight Systems."""
    nsys = env.path("bin") / "nsys"
    nsys.parent.mkdir()
    nsys.write_text(f"""#!/bin/sh
if [ "$1" = --version ]; then echo "NVIDIA Nsight Systems version 2022.4.2.1-df9881f"; exit 0; fi
while [ "$#" -gt 1 ]; do [ "$1" = -o ] && out="$2"; shift; done
cp "{env.inputs['cpu_nvtx']}" "$out"
""")
    nsys.chmod(0o755)
    return nsys


def _ingest_with_stamp(env, spoil) -> Run:
    """cpu_nvtx.nsys-rep ingested once (its export cached), its cache stamp spoiled by ``spoil``, then ingested again
    into a fresh store: the export is made again and the run ingested."""
    rep = copy(env, "cpu_rep")
    nsys = {"TRACEQL_NSYS": str(_fake_nsys(env))}
    first = env.cli("ingest", rep, "-o", env.path("first"), "--allow-no-kernels", env=nsys)
    if first.rc != 0:
        return first
    spoil(rep.with_name(rep.name + ".traceql") / "export.json")
    out = env.path("out")
    return env.cli("ingest", rep, "-o", out, "--allow-no-kernels", env=nsys, watch=out, grow=out)


@case("ingest", "an .nsys-rep whose cached export's stamp is not JSON: exported again", expect=0)
def _rep_stamp_not_json(env):
    return _ingest_with_stamp(env, lambda stamp: stamp.write_text("{not json"))


@case("ingest", "an .nsys-rep whose cached export's stamp is a folder: exported again", expect=0)
def _rep_stamp_folder(env):
    def spoil(stamp: Path) -> None:
        stamp.unlink()
        stamp.mkdir()
    return _ingest_with_stamp(env, spoil)


class _PipeReader:
    """A named pipe at ``path`` and a thread that reads whatever is written to it, until :meth:`close`."""

    def __init__(self, path: Path):
        import threading

        os.mkfifo(path)
        self.path, self.data, self.done = path, bytearray(), threading.Event()
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # open already: a writer's open does not block
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                chunk = None
            if chunk:
                self.data += chunk
            elif self.done.is_set():
                return
            else:
                time.sleep(0.01)

    def close(self) -> bytes:
        self.done.set()
        self.thread.join(10)
        os.close(self.fd)
        return bytes(self.data)


@case("paper", "-o a named pipe: written in place (the pipe stays a pipe and gets the table)", expect=0)
def _paper_out_pipe(env):
    import stat

    fifo = env.path("paper.csv")
    reader = _PipeReader(fifo)
    try:
        run = env.cli("paper", SUITE, "--table", "headline", "--format", "csv", "-o", fifo)
    finally:
        got = reader.close()
    if not stat.S_ISFIFO(os.lstat(fifo).st_mode) or b"overlap" not in got:
        run.err += (f"\ntraceql: {fifo} is {'still' if stat.S_ISFIFO(os.lstat(fifo).st_mode) else 'no longer'} a "
                    f"pipe; the reader got {len(got)} bytes")
        run.rc = 99
    return run


# -- ingest: a full disk between publishing a run and indexing it; a store whose index is lost ---------------------

def _no_room_for(name: str):
    """A context in which writing a file called ``name`` fails as on a full disk (ENOSPC): its rename into place
    (the last step of every atomic write of traceql's) raises, in this process."""
    import contextlib
    import errno

    @contextlib.contextmanager
    def patched():
        real = os.replace

        def replace(src, dst, *args, **kwargs):
            if Path(dst).name == name:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
            return real(src, dst, *args, **kwargs)

        os.replace = replace
        try:
            yield
        finally:
            os.replace = real
    return patched()


@case("ingest", "the disk fills at a new store's first index write: nothing is left, and the same ingest again "
      "lands the run", words=("cannot write here", "free space"))
def _full_at_first_index(env):
    out = env.path("out")
    trace = copy(env, "cpu_nvtx")
    with _no_room_for("manifest.json"):
        run = env.cli("ingest", trace, "-o", out, "--allow-no-kernels", named=[out], watch=[env.tmp])
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*")) if out.exists() else []
    run.watched = {}  # checked here: the ingest that follows changes the folder
    again = env.cli("ingest", trace, "-o", out, "--allow-no-kernels")
    runs = _runs_in(out)
    if left or again.rc or len(runs) != 1 or env.cli("sql", out, "SELECT count(*) FROM runs").rc:
        run.err += f"\ntraceql: left after the failure {left}; the next ingest: exit {again.rc}, runs {sorted(runs)}"
        run.rc = 99
    run.watched, run.grew = {out: None}, {out}
    return run


@case("sql", "a run store whose index (manifest.json) is lost: its runs are read, with a note", expect=0,
      words=("no manifest.json", "traceql ingest"))
def _sql_index_lost(env):
    s = _store_copy(env)
    _manifest(s).unlink()
    run = env.cli("sql", s, "SELECT count(*) AS n FROM kernels", "--format", "csv", named=[s], watch=[s])
    if run.out.split() != ['"n"', "168"]:
        run.err += f"\ntraceql: expected the run's 168 kernels, got {run.out!r}"
        run.rc = 99
    return run


@case("ingest", "a trace again into a store whose index (manifest.json) is lost: the index is written again",
      expect=0)
def _ingest_index_lost(env):
    s = _store_copy(env, "nvtx_store")
    before = _runs_in(s)
    _manifest(s).unlink()
    run = env.cli("ingest", env.inputs["cpu_nvtx"], "-o", s, "--allow-no-kernels", watch=[s], grow=[s])
    if _runs_in(s) != before or "already ingested" not in run.err:
        run.err += f"\ntraceql: the index lists {sorted(_runs_in(s))}, before {sorted(before)}"
        run.rc = 99
    return run


# -- ingest: values and tables nsys does not write ----------------------------------------------------------------

@case("ingest", "a kernel from -2^63 to 2^63-1 (its duration wraps around 64 bits): dropped, counted", expect=0,
      words="longer than 64-bit nanoseconds")
def _kernel_span_overflow(env):
    run = _repaired(env, "span.sqlite", f"UPDATE {KERNEL} SET start = -9223372036854775808, end = 9223372036854775807 "
                    f"WHERE rowid = (SELECT min(rowid) FROM {KERNEL})")
    negative = env.cli("sql", env.path("out"), "SELECT count(*) AS n FROM kernels WHERE dur_ns < 0", "--format",
                       "csv").out
    if negative.split() != ['"n"', "0"]:
        run.err += "\ntraceql: a kernel with a negative duration was stored"
        run.rc = 99
    return run


@case("ingest", "a kernel table without its grid columns", words=(KERNEL, "gridX"))
def _kernel_no_grid(env):
    return ingest(env, without_column(env, "nogrid.sqlite", KERNEL, "gridX"))


@case("ingest", "a kernel table without its globalPid column", words=(KERNEL, "globalPid"))
def _kernel_no_global_pid(env):
    return ingest(env, without_column(env, "nopid.sqlite", KERNEL, "globalPid"))


@case("ingest", "a string table holding one id twice, with two strings",
      words=("StringIds", "twice", "export it again"))
def _string_ids_twice(env):
    twice = "INSERT INTO StringIds SELECT id, value || '_other' FROM StringIds"
    return ingest(env, edited(env, "strings.sqlite", twice, src="contention", rebuild=("StringIds",)))


# -- sql: table files whose bytes are not those their run recorded ---------------------------------------------------

@case("sql", "one bit flipped in a table file (its size unchanged)", words=("content is not the one", "re-ingest"))
def _sql_bit_flipped(env):
    s = _store_copy(env)
    f = _run_file(s, "kernels")
    data = bytearray(f.read_bytes())
    data[len(data) // 3] ^= 0x10
    f.write_bytes(bytes(data))
    return _sql(env, s, named=[f])


@case("sql", "another run's table file copied into a run", words=("content is not the one", "re-ingest"))
def _sql_other_runs_file(env):
    s = _store_copy(env)
    f = _run_file(s, "memset")
    shutil.copy(SUITE / "runs" / "run_id=1c86e086c617c6a8" / "memset.parquet", f)
    return _sql(env, s, "SELECT count(*) FROM memset", named=[f])


# -- Ctrl-C, SIGTERM and worker processes: commands that query ------------------------------------------------------

def _overlap_store(env, name: str = "ov") -> Path:
    """The bundled overlap trace ingested: a run whose analysis takes a second or two, time for a signal to land."""
    import traceql

    out = env.path(name)
    traceql.ingest([H200 / "overlap.sqlite.xz"], out)
    return out


def _working(proc) -> bool:
    """Whether a traceql child is past its imports, the analysis' threads running (DuckDB's and Arrow's)."""
    try:
        return len(os.listdir(f"/proc/{proc.pid}/task")) >= 5
    except OSError:
        return False


def _ctrl_c_at_work(env, args: list, sig: signal.Signals = signal.SIGINT, rc: int = 130, **kw) -> Run:
    """``traceql ARGS`` sent one Ctrl-C (or ``sig``) at a tenth, three tenths and half of its analysis (timed by a first
    run left alone: DuckDB takes Ctrl-C for its own at some points and not at others); each must exit ``rc`` with one
    line."""
    proc = _spawn(args)
    _wait_for(lambda: _working(proc) or proc.poll() is not None)
    started = time.monotonic()
    proc.communicate(timeout=300)
    span = time.monotonic() - started
    for fraction in (0.1, 0.3, 0.5):
        def interrupt(proc, fraction=fraction):
            _wait_for(lambda: _working(proc) or proc.poll() is not None)
            time.sleep(fraction * span)
            proc.send_signal(sig)

        run = env.child(args, run=interrupt, **kw)
        if run.rc != rc or len(run.err.strip().splitlines()) != 1:
            run.err += f"\ntraceql: {sig.name} at {fraction:.0%} of the work: exit {run.rc}, stderr should be one line"
            run.rc = 99
            return run
    return run


@case("attribute", "SIGTERM while DuckDB computes: exit 143, one line (Python's default ended it at once)", expect=143,
      words="terminated")
def _attribute_sigterm(env):
    return _ctrl_c_at_work(env, ["attribute", _overlap_store(env)], signal.SIGTERM, 143, watch=[env.tmp])


@case("attribute", "Ctrl-C while DuckDB computes: exit 130, one line (no 'Query interrupted' traceback)",
      expect=130, words="interrupted")
def _attribute_ctrl_c(env):
    return _ctrl_c_at_work(env, ["attribute", _overlap_store(env)], watch=[env.tmp])


@case("attribute", "Ctrl-C as the command finishes (while it prints, while Python exits): exit 130 with one line, or 0 "
      "with the whole output; never a silent 130 nor a death by SIGINT", expect=0)
def _attribute_ctrl_c_at_the_end(env):
    s = _overlap_store(env)
    whole = env.child(["attribute", s])
    proc = _spawn(["attribute", s])
    _wait_for(lambda: _working(proc) or proc.poll() is not None)
    started = time.monotonic()
    proc.communicate(timeout=300)
    span = time.monotonic() - started
    for fraction in (0.85, 0.95, 1.0, 1.05, 1.15):
        def interrupt(proc, fraction=fraction):
            _wait_for(lambda: _working(proc) or proc.poll() is not None)
            time.sleep(fraction * span)
            proc.send_signal(signal.SIGINT)

        run = env.child(["attribute", s], run=interrupt, watch=[env.tmp])
        lines = run.err.strip().splitlines()
        if not ((run.rc == 130 and len(lines) == 1 and "interrupted" in lines[0]) or
                (run.rc == 0 and not lines and run.out == whole.out)):
            run.err += f"\ntraceql: Ctrl-C at {fraction:.0%} of the work: exit {run.rc}, {len(lines)} line(s) on stderr"
            run.rc = 99
            return run
    return whole


@case("diff", "Ctrl-C while DuckDB computes: exit 130, one line (no 'Query interrupted' traceback)", expect=130,
      words="interrupted")
def _diff_ctrl_c(env):
    a = _overlap_store(env, "a")
    b = env.path("b")
    shutil.copytree(a, b)
    return _ctrl_c_at_work(env, ["diff", a, b], watch=[env.tmp])


@case("attribute", "two runs on two workers (--executor local:2), the command killed (SIGKILL): the workers die with "
      "it", expect=-9)
def _attribute_sigkill_workers(env):
    return _workers_die_with_parent(env, ["attribute", _overlap_store(env), env.inputs["store"], "--executor",
                                          "local:2"], signal.SIGKILL)


# -- names printed as they are: rich markup, terminal escapes; values JSON has no word for; odd inputs ---------------

# a kernel name with a closing tag that closes nothing, a style, an OSC title and ANSI colours
HOSTILE_NAME = "k[/x][bold red]red\x1b]0;pwned\x07\x1b[31mX\x1b[0m"


def _hostile_store(env, name: str = "hostile") -> Path:
    """A synthetic run whose kernel is named HOSTILE_NAME (overlapped by communication, so that every table lists
    it)."""
    s = env.path(name)
    alone = [dict(start_ns=i * 10_000, end_ns=i * 10_000 + 1000, name=HOSTILE_NAME, ctas=8, correlation_id=i + 1)
             for i in range(4)]
    beside = [dict(start_ns=50_000 + i * 10_000, end_ns=50_000 + i * 10_000 + 1500, name=HOSTILE_NAME, ctas=8,
                   correlation_id=10 + i) for i in range(2)]
    comm = [dict(start_ns=50_000 + i * 10_000, end_ns=50_000 + i * 10_000 + 1500, kind="comm", ctas=4,
                 correlation_id=20 + i, stream_id=9) for i in range(2)]
    make_store(s, kernels=alone + beside + comm, runtime_api=launches(alone + beside + comm))
    return s


def _printed_plainly(run: Run, *shown: str) -> Run:
    """``run`` failed unless its output shows each of ``shown`` as it is and no control character reached it."""
    out = run.out + run.err
    missing = [t for t in shown if t not in out]
    raw = sorted({repr(c) for c in out if ord(c) < 32 and c not in "\n"})
    if run.rc == 0 and (missing or raw):
        run.err += f"\ntraceql: not shown as it is: {missing}; raw control characters printed: {raw}"
        run.rc = 99
    return run


@case("sql", "a kernel name with rich markup ('[/x]', '[bold red]') and terminal escapes: printed as text, the "
      "escapes as \\x1b", expect=0)
def _sql_markup_name(env):
    run = env.cli("sql", _hostile_store(env), "SELECT DISTINCT name FROM kernels WHERE kind <> 'comm'")
    return _printed_plainly(run, "k[/x][bold red]red\\x1b]0;pwned\\x07\\x1b[31mX")


@case("sql", "a column named with rich markup ('[/x]')", expect=0)
def _sql_markup_column(env):
    return _printed_plainly(env.cli("sql", env.inputs["synthetic"], 'SELECT 1 AS "[/x]"'), "[/x]")


@case("diff", "a kernel name with rich markup and terminal escapes: printed as text", expect=0)
def _diff_markup_name(env):
    # a wide table (COLUMNS), so that the name is on one line (100 columns fold it)
    run = env.cli("diff", env.inputs["synthetic"], _hostile_store(env), watch=[env.tmp], env={"COLUMNS": "220"})
    return _printed_plainly(run, "k[/x][bold red]red\\x1b]0;pwned\\x07")


@case("attribute", "a kernel name with rich markup and terminal escapes: printed as text", expect=0)
def _attribute_markup_name(env):
    return _printed_plainly(env.cli("attribute", _hostile_store(env), watch=[env.tmp]), "k[/x][bold")  # cell folds


@case("sql", "--format json over NaN and infinities (also inside lists, maps and structs): null, valid JSON", expect=0)
def _sql_json_not_finite(env):
    query = ("SELECT 'nan'::DOUBLE AS a, '-inf'::DOUBLE AS b, ['inf'::DOUBLE, 1.5] AS c, "
             "MAP {'k': 'nan'::DOUBLE} AS m, {'x': 'inf'::DOUBLE} AS st")
    run = env.cli("sql", env.inputs["synthetic"], query, "--format", "json")
    if run.rc == 0:
        try:
            rows = json.loads(run.out, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
            assert rows == [{"a": None, "b": None, "c": [None, 1.5], "m": [["k", None]], "st": {"x": None}}], rows
        except (ValueError, AssertionError) as exc:
            run.err += f"\ntraceql: not the JSON expected: {exc}"
            run.rc = 99
    return run


@case("paper", "a run whose modes hold communication and no compute kernel: the figures that divide by compute time "
      "are left out (no ZeroDivisionError)", expect=0)
def _paper_no_compute(env):
    s = env.path("comm_only")
    nvtx, comm = [], []
    for m, mode in enumerate(("compute_only", "comm_only", "overlapped", "sequential")):
        t = m * 50_000
        nvtx.append(dict(start_ns=t, end_ns=t + 40_000, text=f"mode:{mode}", depth=0))
        for i in range(3):
            nvtx.append(dict(start_ns=t + i * 10_000, end_ns=t + i * 10_000 + 9000, text=f"iter {i}", depth=1))
            if mode != "compute_only":
                comm.append(dict(start_ns=t + i * 10_000 + 1000, end_ns=t + i * 10_000 + 3000, kind="comm", ctas=4,
                                 correlation_id=len(comm) + 1, stream_id=9))
    make_store(s, nvtx=nvtx, kernels=comm, runtime_api=launches(comm))
    run = env.cli("paper", s, watch=[env.tmp])
    if run.rc == 0 and "comm_slowdown" not in run.out:
        run.err += "\ntraceql: expected the communication figures"
        run.rc = 99
    return run


@case("report", "a recipe of one's own whose chart reads a column its query does not give (no KeyError)",
      words=("reads the column", "total_ns", "give the query that column"))
def _rep_chart_missing_column(env):
    recipe = env.path("mine.toml")
    recipe.write_text('title = "mine"\n[[section]]\ntitle = "wrong columns"\nscope = "run"\nchart = "kernel_time"\n'
                      'table = "totals"\n[section.queries]\ntotals = { sql = "SELECT run_id, device_id, count(*) AS n '
                      'FROM kernels GROUP BY ALL" }\n')
    return _report(env, env.inputs["synthetic"], "--recipe", recipe, named=["kernel_time"])


@case("overlap", "a kernel ending at 2^63 - 1 ns (sums over it overflow 64 bits): dropped, counted, the rest answered",
      expect=0)
def _ovl_time_overflow(env):
    p = edited(env, "far.sqlite", f"UPDATE {KERNEL} SET start = 0, \"end\" = 9223372036854775807 WHERE rowid = "
                                  f"(SELECT min(rowid) FROM {KERNEL})", src="contention")
    return env.cli("overlap", p, watch=[env.tmp])


@case("ingest", "a kernel ending at 2^63 - 1 ns: dropped and counted, the run ingested", expect=0,
      words="at times no clock gives")
def _kernel_far_end(env):
    p = edited(env, "far.sqlite", f"UPDATE {KERNEL} SET start = 0, \"end\" = 9223372036854775807 WHERE rowid = "
                                  f"(SELECT min(rowid) FROM {KERNEL})", src="contention")
    out = env.path("out")
    return env.cli("ingest", p, "-o", out, named=p, watch=out, grow=out)


@case("overlap", "two bundled traces at once, whose exports give device ids as 32- and 64-bit integers", expect=0)
def _ovl_two_traces(env):
    run = env.cli("overlap", H200 / "overlap.sqlite.xz", env.inputs["contention_xz"], watch=[env.tmp],
                  env={"COLUMNS": "220"})  # file names on one line (100 columns fold them)
    if run.rc == 0 and not ("overlap.sqlite.xz" in run.out and "contention.sqlite.xz" in run.out):
        run.err += "\ntraceql: expected a row of each trace"
        run.rc = 99
    return run


@case("ingest", "--help: options labelled by what they take, without Python's types (<bool>, <list[str]>)", expect=0)
def _help_no_python_types(env):
    run = env.cli("ingest", "--help", env={"COLUMNS": "160"})
    if run.rc == 0 and ("<bool>" in run.out or "list[" in run.out or "--label" not in run.out):
        run.err += "\ntraceql: --help still shows Python's types"
        run.rc = 99
    return run


KINETO = Path(__file__).parent / "data" / "kineto" / "h200x1" / "rank0.json.gz"


@case("ingest", "a torch.profiler trace cut short (.json.gz)", words=("not valid JSON", "again"))
def _kineto_cut(env):
    with gzip.open(KINETO) as f:
        head = f.read(200_000)
    return ingest(env, written(env, "cut.json.gz", gzip.compress(head)))


@case("ingest", "a JSON file that is not a torch.profiler trace", words=("traceEvents", "torch.profiler"))
def _kineto_foreign_json(env):
    return ingest(env, written(env, "settings.json", b'{"theme": "dark", "fontSize": 12}\n'))


@case("ingest", "a Chrome trace of another program (no Kineto events)", words=("not one torch.profiler wrote",))
def _kineto_other_chrome_trace(env):
    events = b'{"traceEvents": [{"ph": "X", "name": "frame", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}'
    return ingest(env, written(env, "browser.json", events))


@case("ingest", "a torch.profiler trace (rank 0 of a DDP run on an H200)", expect=0)
def _kineto_real(env):
    out = env.path("out")
    return env.cli("ingest", KINETO, "-o", out, watch=out, grow=out)


def export(env: Env, *inputs, out: Path | None = None) -> Run:
    out = out if out is not None else env.path("trace.pftrace")
    return env.cli("export", *inputs, "--perfetto", out, named=[inputs[0]], watch=[env.tmp])


@case("export", "a text file named .sqlite", words="not an SQLite file")
def _exp_text_file(env):
    return export(env, written(env, "notes.sqlite", b"this is not a database\n" * 50))


@case("export", "a path that does not exist", words="no such file")
def _exp_missing(env):
    return export(env, env.path("does_not_exist"))


@case("export", "an export cut in half (a copy that did not finish)", words=("truncated", "again"))
def _exp_truncated(env):
    data = env.inputs["contention"].read_bytes()
    return export(env, written(env, "cut.sqlite", data[: len(data) // 2]))


@case("export", "the Perfetto trace written over its own input", words="never writes over what it reads")
def _exp_over_input(env):
    trace = copy(env, "contention_xz")
    return export(env, trace, out=trace)


@case("export", "no --perfetto given", words="--perfetto")
def _exp_no_output(env):
    return env.cli("export", env.inputs["store"], named=[], watch=[env.tmp])


@case("export", "a run store to a Perfetto trace", expect=0)
def _exp_store(env):
    out = env.path("trace.pftrace")
    run = env.cli("export", env.inputs["store"], "--perfetto", out, watch=env.inputs["store"])
    if run.rc == 0 and not out.stat().st_size:
        run.err += "\ntraceql: an empty trace"
        run.rc = 99
    return run


def test_docs_list_every_case():
    """docs/reliability.md is generated from this suite (benchmarks/reliability_report.py): every case is in it, and
    its counts are this suite's, all clean."""
    from collections import Counter

    doc = (Path(__file__).resolve().parent.parent / "docs" / "reliability.md").read_text()
    missing = [cid for cid in CASES if f"| `{cid}` |" not in doc]
    assert not missing, f"{missing[:5]}...: regenerate with python benchmarks/reliability_report.py"
    assert f"**{len(CASES)} cases, {len(CASES)} clean**" in doc
    for command, n in Counter(c.command for c in CASES.values()).items():
        assert f"| `{command}` | {n} | {n} | {n} |" in doc, command
    assert len(CASES) >= 175 and "not clean" not in doc and "| not run |" not in doc
