"""Ingest of the real traces in tests/data, checked against the raw exports read with sqlite3."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import H200, NSYS2022, long_metrics, raw_query, run_cli

import traceql
from traceql import store
from traceql.sources.nsys import locate
from traceql.sources.nsys.locate import nsys_version
from traceql.store import schema

TID_MASK = 0xFFFFFF
NCCL_OPS = {"AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter"}


def run_table(run: Path, table: str) -> pa.Table:
    """The one run's Parquet file of ``table``, read with pyarrow (not through traceql)."""
    (run_id,) = json.loads((run / "manifest.json").read_text())["runs"]
    return pq.read_table(store.run_dir(run, run_id) / f"{table}.parquet")


# -- overlap: 2x H200, GEMMs + NCCL, GPU metrics ------------------------------------------------

def test_overlap_kernel_count_matches_raw(overlap_con, overlap_sqlite):
    (raw,) = raw_query(overlap_sqlite, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
    assert raw == 565  # the bundled capture
    assert overlap_con.execute("SELECT count(*) FROM kernels").fetchone()[0] == raw


def test_overlap_kernel_names_resolved(overlap_con, overlap_sqlite):
    names = Counter(dict(overlap_con.execute("SELECT name, count(*) FROM kernels GROUP BY name").fetchall()))
    assert None not in names
    assert not [n for n in names if re.fullmatch(r"\s*-?\d+\s*", n)]
    raw = Counter(dict(raw_query(overlap_sqlite, """
        SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
        GROUP BY s.value""")))
    assert names == raw
    # Every name is one of the kernels of the H200 capture list.
    known = set((H200.parent / "kernel_names_h200.txt").read_text().splitlines())
    assert set(names) <= known


def test_overlap_devices(overlap_con):
    rows = overlap_con.execute(
        "SELECT device_id, name, sm_count, uuid, bus_id, cc_major FROM devices ORDER BY 1").fetchall()
    # uuid and bus id as nvidia-smi printed them in the collection log
    assert rows == [
        (0, "NVIDIA H200", 132, "833a5eea-6504-8683-5c2b-1bf44550ac3a", "0000:00:06.0", 9),
        (1, "NVIDIA H200", 132, "3884bd55-1ec1-c224-f916-ed2f8178e147", "0000:00:07.0", 9),
    ]


def test_overlap_kernels_per_device_match_raw(overlap_con, overlap_sqlite):
    cuda_map = {(pid, cuda): gpu for gpu, cuda, pid in
                raw_query(overlap_sqlite, "SELECT gpuId, cudaId, pid FROM TARGET_INFO_CUDA_DEVICE")}
    expected: Counter = Counter()
    raw = raw_query(overlap_sqlite, "SELECT globalPid, deviceId, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1,2")
    for gpid, dev, n in raw:
        expected[(gpid, dev, cuda_map[((gpid >> 24) & TID_MASK, dev)])] += n
    got = Counter({(g, c, d): n for g, c, d, n in overlap_con.execute(
        "SELECT global_pid, cuda_device, device_id, count(*) FROM kernels GROUP BY ALL").fetchall()})
    assert got == expected
    assert {d for _, _, d in got} == {0, 1}


def test_overlap_nccl_kernels_are_comm(overlap_con, overlap_sqlite):
    rows = overlap_con.execute("SELECT name, kind, family, comm_op FROM kernels").fetchall()
    nccl = [r for r in rows if r[0].startswith("nccl")]
    (raw_nccl,) = raw_query(overlap_sqlite, """
        SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
        WHERE s.value LIKE 'nccl%'""")[0]
    assert len(nccl) == raw_nccl == 264
    for name, kind, family, op in nccl:
        assert (kind, family) == ("comm", "nccl"), name
        expected = next(v for k, v in NCCL_OPS.items() if f"_{k}_" in name)
        assert op == expected, name
    assert {r[3] for r in nccl} == {"all_reduce", "all_gather", "reduce_scatter"}
    assert all(r[1] != "comm" for r in rows if not r[0].startswith("nccl"))


def test_overlap_gpu_metrics(overlap_con, overlap_sqlite):
    (raw,) = raw_query(overlap_sqlite, "SELECT count(*) FROM GPU_METRICS")[0]
    assert raw == 409350
    assert overlap_con.execute("SELECT count(*) FROM gpu_metrics").fetchone()[0] == raw
    lo, hi, n, devs = overlap_con.execute("""SELECT min(value), max(value), count(*), count(DISTINCT device_id)
                                          FROM gpu_metrics WHERE metric = 'GPC Clock Frequency [MHz]'""").fetchone()
    assert n > 0 and devs == 2
    assert 100 <= lo <= hi <= 3000
    # nsys stores this clock in Hz: the MHz value is the raw value / 1e6.
    (raw_max,) = raw_query(overlap_sqlite, """
        SELECT max(g.value) FROM GPU_METRICS g JOIN TARGET_INFO_GPU_METRICS m
          ON m.typeId = g.typeId AND m.metricId = g.metricId WHERE m.metricName = 'GPC Clock Frequency [MHz]'""")[0]
    assert hi == pytest.approx(raw_max / 1e6)
    per_dev = dict(overlap_con.execute("SELECT device_id, count(*) FROM gpu_metrics GROUP BY 1").fetchall())
    raw_per_dev = dict(raw_query(overlap_sqlite, "SELECT typeId & 255, count(*) FROM GPU_METRICS GROUP BY 1"))
    assert per_dev == raw_per_dev


def test_overlap_kernel_times(overlap_con, overlap_sqlite):
    bad = overlap_con.execute("""SELECT count(*) FROM kernels
                             WHERE start_ns IS NULL OR end_ns < start_ns OR dur_ns IS DISTINCT FROM end_ns - start_ns
                          """).fetchone()[0]
    assert bad == 0
    got = overlap_con.execute("SELECT min(start_ns), max(end_ns), sum(dur_ns) FROM kernels").fetchone()
    raw = raw_query(overlap_sqlite, 'SELECT min(start), max("end"), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL')
    assert got == raw[0]


def _parse_labels(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in text.split(";")[1:])


def test_overlap_case_ranges_carry_labels(overlap_con, overlap_sqlite):
    rows = overlap_con.execute(
        "SELECT text, labels, depth, event_type FROM nvtx WHERE case_name = 'overlap'").fetchall()
    raw_texts = sorted(t for (t,) in raw_query(overlap_sqlite, """
        SELECT COALESCE(n.text, s.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
        WHERE COALESCE(n.text, s.value) LIKE 'case:overlap;%'"""))
    assert len(rows) == len(raw_texts) == 48  # 6 configurations x 4 modes x 2 GPUs
    assert sorted(r[0] for r in rows) == raw_texts
    for text, labels, depth, event_type in rows:
        assert event_type == "push_pop" and depth == 0
        labels = dict(labels)
        assert {"mode", "op", "dtype"} <= set(labels)
        assert labels == _parse_labels(text)
    assert Counter(dict(r[1])["mode"] for r in rows) == {"compute": 12, "comm": 12, "overlapped": 12,
                                                           "sequential": 12}


def test_overlap_iter_ranges_nest_in_cases(overlap_con):
    iters = overlap_con.execute("""SELECT global_tid, start_ns, end_ns, depth FROM nvtx
                               WHERE text LIKE 'iter:%'""").fetchall()
    cases = overlap_con.execute("""SELECT global_tid, start_ns, end_ns, depth FROM nvtx
                               WHERE case_name = 'overlap'""").fetchall()
    assert len(iters) == 48 * 6  # 6 iterations per case
    assert {r[3] for r in cases} == {0}
    for tid, start, end, depth in iters:
        assert depth == 1
        parents = [c for c in cases if c[0] == tid and c[1] <= start and end <= c[2]]
        assert len(parents) == 1


def test_overlap_nvtx_count_matches_raw(overlap_con, overlap_sqlite):
    raw = dict(raw_query(overlap_sqlite, "SELECT eventType, count(*) FROM NVTX_EVENTS GROUP BY 1"))
    got = dict(overlap_con.execute("SELECT event_type, count(*) FROM nvtx GROUP BY 1").fetchall())
    assert got == {"push_pop": raw[59]}  # 75 (domain create) rows name domains, they are not ranges
    assert overlap_con.execute("SELECT count(*) FROM nvtx WHERE domain = 'NCCL'").fetchone()[0] > 0


def test_overlap_kernel_processes_exist(overlap_con):
    orphans = overlap_con.execute("""SELECT count(*) FROM kernels k
                                 WHERE NOT EXISTS (SELECT 1 FROM processes p WHERE p.global_pid = k.global_pid)
                              """).fetchone()[0]
    assert orphans == 0
    pids = overlap_con.execute("SELECT DISTINCT pid FROM processes JOIN kernels USING (global_pid) ORDER BY 1")
    assert pids.fetchall() == [(697,), (698,)]


@pytest.mark.parametrize(("run", "kernels"), [("overlap_run", 565), ("train_ddp_run", 8544)])
def test_kernels_join_their_launch_calls(run, kernels, request):
    con = traceql.connect(request.getfixturevalue(run), views=False)
    n, matched, launch_before, launch_named, pids = con.execute("""
        SELECT count(*), count(a.name), count_if(a.start_ns < k.start_ns), count_if(a.name ILIKE '%launch%'),
               count(DISTINCT k.global_pid)
        FROM kernels k LEFT JOIN runtime_api a USING (global_pid, correlation_id)""").fetchone()
    assert (n, pids) == (kernels, 2)
    assert matched >= 0.99 * n
    assert launch_before == matched
    assert launch_named == matched
    # correlation ids repeat across processes: the key is (global_pid, correlation_id), never correlation_id alone
    dup = con.execute("SELECT count(*) FROM (SELECT 1 FROM runtime_api GROUP BY global_pid, correlation_id "
                      "HAVING count(*) > 1)").fetchone()[0]
    assert dup == 0
    loose = con.execute("SELECT count(*) FROM kernels k JOIN runtime_api a USING (correlation_id)").fetchone()[0]
    assert loose > n  # ...which is why correlation_id alone is not a key


def test_runs_row(overlap_con, overlap_run):
    row = overlap_con.execute("""SELECT format, tool_version, export_schema_version, gpu_names, source_sha256, run_id
                             FROM runs""").fetchall()
    assert len(row) == 1
    fmt, tool, export_version, gpus, sha, run_id = row[0]
    assert (fmt, tool, export_version, gpus) == ("nsys-sqlite", "2025.3.2.0", "3.20.3", "NVIDIA H200")
    assert run_id == sha[:16] and run_id in json.loads((overlap_run / "manifest.json").read_text())["runs"]


# -- contention: the same report exported as SQLite and as a parquetdir ------------------------

@pytest.mark.parametrize("table", ["kernels", "memcpy", "memset", "nvtx", "runtime_api", "gpu_metrics", "devices",
                                   "processes"])
def test_contention_sqlite_and_parquetdir_agree(contention_sqlite_run, contention_parquet_run, table):
    a = run_table(contention_sqlite_run, table).drop(["run_id"])
    b = run_table(contention_parquet_run, table).drop(["run_id"])
    assert a.schema == b.schema
    minimum = {"kernels": 168, "memcpy": 80, "memset": 80, "nvtx": 20, "runtime_api": 1116, "gpu_metrics": 7171,
               "devices": 2, "processes": 307}[table]  # GPU metrics: samples, of 215,130 values (30 metrics)
    assert a.num_rows == b.num_rows == minimum
    if table == "gpu_metrics":
        assert long_metrics(a).num_rows == long_metrics(b).num_rows == 215130
    keys = [(n, "ascending") for n in a.column_names if not pa.types.is_map(a.schema.field(n).type)]
    a, b = a.sort_by(keys), b.sort_by(keys)
    for name in a.column_names:
        assert a.column(name).equals(b.column(name)), f"{table}.{name} differs"


def test_contention_runs_rows(contention_sqlite_run, contention_parquet_run):
    a = run_table(contention_sqlite_run, "runs").to_pylist()[0]
    b = run_table(contention_parquet_run, "runs").to_pylist()[0]
    assert (a["format"], b["format"]) == ("nsys-sqlite", "nsys-parquetdir")
    assert a["export_schema_version"] == b["export_schema_version"] == "3.20.3"
    assert a["session_start_utc_ns"] == b["session_start_utc_ns"] is not None


def test_contention_peer_copies(contention_sqlite_run, contention_sqlite):
    t = run_table(contention_sqlite_run, "memcpy")
    got = Counter(zip(t.column("copy_kind").to_pylist(), t.column("is_peer").to_pylist(), strict=True))
    raw = dict(raw_query(contention_sqlite, "SELECT copyKind, count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY 1"))
    assert got == {("DtoD", False): raw[8], ("PtoP", True): raw[10]}
    peer = [(r["src_device_id"], r["dst_device_id"]) for r in t.to_pylist() if r["is_peer"]]
    assert set(peer) == {(0, 1)}


# -- nsys 2022.4, CPU only, NVTX only --------------------------------------------------------------

def test_nsys2022_nvtx(cpu_nvtx_run):
    rows = run_table(cpu_nvtx_run, "nvtx").to_pylist()
    assert len(rows) == 19  # 2 threads x 3 steps x (case range, forward range, mark) + 1 escape-text range
    by_text = {r["text"]: r for r in rows}
    threads = {}
    for t in (0, 1):
        for step in range(3):
            case = by_text[f"case:cpu_demo;step={step};thread={t}"]
            assert (case["event_type"], case["depth"], case["case_name"]) == ("push_pop", 0, "cpu_demo")
            assert dict(case["labels"]) == {"step": str(step), "thread": str(t)}
            assert case["dur_ns"] == case["end_ns"] - case["start_ns"] > 0
            assert threads.setdefault(t, case["global_tid"]) == case["global_tid"]
            assert case["global_tid"] & TID_MASK == case["tid"]
            assert case["global_pid"] == (case["global_tid"] >> 24) << 24
            fwd = [r for r in rows if r["text"] == "forward" and r["global_tid"] == case["global_tid"]
                   and case["start_ns"] <= r["start_ns"] and r["end_ns"] <= case["end_ns"]]
            assert len(fwd) == 1 and fwd[0]["depth"] == 1 and fwd[0]["case_name"] is None
            mark = by_text[f"mark:step={step};thread={t}"]
            assert mark["event_type"] == "mark" and mark["end_ns"] is None and mark["depth"] is None
            assert mark["global_tid"] == case["global_tid"] and case["start_ns"] <= mark["start_ns"] <= case["end_ns"]
    assert threads[0] != threads[1]
    assert sum(r["text"] == "forward" for r in rows) == 6
    escape = by_text["<script>alert(1)</script> & co"]
    assert (escape["event_type"], escape["depth"], escape["global_tid"]) == ("push_pop", 0, threads[0])
    assert all(r["domain"] is None for r in rows)  # default domain


def test_nsys2022_empty_kernels_typed(cpu_nvtx_run):
    (run_id,) = json.loads((cpu_nvtx_run / "manifest.json").read_text())["runs"]
    for table in ("kernels", "memcpy", "memset", "runtime_api", "gpu_metrics", "devices"):
        path = store.run_dir(cpu_nvtx_run, run_id) / f"{table}.parquet"
        assert pq.read_metadata(path).num_rows == 0, table
        assert pq.read_schema(path).remove_metadata() == schema.TABLES[table], table
    con = traceql.connect(cpu_nvtx_run, views=False)
    assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == 0
    assert con.execute("SELECT tool_version, export_schema_version FROM runs").fetchall() == [("2022.4.2.1", "3.0.0")]
    pids = {p for (p,) in con.execute("SELECT DISTINCT global_pid FROM nvtx").fetchall()}
    assert len(pids) == 1 and pids <= {p for (p,) in con.execute("SELECT global_pid FROM processes").fetchall()}


# -- .nsys-rep through a real nsys ----------------------------------------------------------------

def _nvtx_rows(run: Path) -> list[dict]:
    rows = run_table(run, "nvtx").drop(["run_id"]).to_pylist()
    for r in rows:
        r["labels"] = sorted(r["labels"]) if r["labels"] is not None else None
    return sorted(rows, key=lambda r: (r["global_tid"], r["start_ns"], r["text"]))


@pytest.mark.nsys
def test_nsys_rep_exported_once_and_cached(require_nsys, tmp_path, cpu_nvtx_run, monkeypatch):
    report = tmp_path / "cpu_nvtx.nsys-rep"
    shutil.copy(NSYS2022 / "cpu_nvtx.nsys-rep", report)
    (info,) = traceql.ingest(report, tmp_path / "run1", require_kernels=False)
    assert info.format == "nsys-rep"
    assert _nvtx_rows(tmp_path / "run1") == _nvtx_rows(cpu_nvtx_run)
    cache = tmp_path / "cpu_nvtx.nsys-rep.traceql"
    stamp = json.loads((cache / "export.json").read_text())
    assert stamp["sha256"] == info.sha256
    export = cache / stamp["export"]
    assert export.exists()
    mtime = export.stat().st_mtime_ns

    def no_nsys(*args, **kwargs):
        raise AssertionError("nsys was run again although the export is cached")

    monkeypatch.setattr(locate, "find_nsys", no_nsys)
    monkeypatch.setattr(locate.subprocess, "run", no_nsys)
    (again,) = traceql.ingest(report, tmp_path / "run2", require_kernels=False)
    assert again.run_id == info.run_id and not again.already
    assert export.stat().st_mtime_ns == mtime
    assert _nvtx_rows(tmp_path / "run2") == _nvtx_rows(cpu_nvtx_run)


@pytest.mark.nsys
def test_new_report_with_old_nsys_fails_cleanly(require_nsys, tmp_path):
    if nsys_version(require_nsys) >= (2025, 3):
        pytest.skip("this nsys is recent enough to open a 2025.3 report")
    report = tmp_path / "contention.nsys-rep"
    shutil.copy(H200 / "contention.nsys-rep", report)
    out = tmp_path / "run"
    rc, stdout, stderr = run_cli("ingest", report, "-o", out)
    assert rc == 2, stderr
    assert str(report) in stderr
    assert "Traceback" not in stderr
    assert "older" in stderr  # says why: the nsys is older than the one that recorded it
    assert not (out / "manifest.json").exists()
    assert not (out / "runs").exists() or not any((out / "runs").iterdir())
