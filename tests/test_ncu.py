"""Nsight Compute reports: ingest, derived demand, matching to trace kernels, bad input, collector preset.

Real data: ``h200/kernels.ncu-rep.xz`` was collected on an H200 by ``traceql collect --ncu`` around
``collectors/contention.py --ncu`` (one launch each of a bf16 GEMM, a 1 GiB fp32 ``torch.add``, a
spin kernel on 16 SMs, and ``half_sm_stream`` in its L2 and DRAM variants).
``h200/kernels_contention_session.ncu-rep.xz`` is the same workload from the session that recorded
``h200/contention.sqlite.xz``, before the L2 variant got its own shared-memory size. Expected values
are read back from the reports with ``ncu_report`` directly, and from the trace with sqlite3.
"""

from __future__ import annotations

import csv
import json
import lzma
import re
import shutil
import struct
import sys
from pathlib import Path
from statistics import median

import pyarrow.parquet as pq
import pytest
from conftest import H200, raw_query, read_ncu_report, run_cli

import traceql
from traceql import store
from traceql.attribution import prepare
from traceql.collect import NCU_EXCLUDE, NCU_METRICS, NCU_SECTIONS, ncu_command
from traceql.errors import UsageError
from traceql.queries_loader import bundled_dir, header_columns
from traceql.sources.ncu import demand
from traceql.sources.ncu.derive import derive
from traceql.sources.ncu.report import Metric, ProfiledKernel
from traceql.store import schema

ncu_report = pytest.importorskip("ncu_report")

REPORT = H200 / "kernels.ncu-rep.xz"
SESSION_REPORT = H200 / "kernels_contention_session.ncu-rep.xz"
GIB = 2**30


# -- the reports, read independently with ncu_report ---------------------------------------------

@pytest.fixture(scope="session")
def raw_reports(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("ncu_raw")
    out = {}
    for src in (REPORT, SESSION_REPORT):
        dest = d / src.name.removesuffix(".xz")
        with lzma.open(src) as f:
            dest.write_bytes(f.read())
        dest.chmod(0o444)
        out[src.name] = dest
    return out


@pytest.fixture(scope="session")
def raw(raw_reports) -> list[dict]:
    return read_ncu_report(raw_reports["kernels.ncu-rep.xz"])


def by_short(kernels: list[dict], short: str) -> list[dict]:
    return [k for k in kernels if k["short_name"] == short]


def launch(k: dict) -> tuple:
    m = k["metrics"]
    grid = "x".join(str(int(m[f"launch__grid_dim_{a}"])) for a in "xyz")
    block = "x".join(str(int(m[f"launch__block_dim_{a}"])) for a in "xyz")
    return k["name"], grid, block, int(m["launch__shared_mem_per_block_dynamic"])


# -- ingested runs --------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def ncu_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ncu") / "run"
    (info,) = traceql.ingest(REPORT, out)
    assert info.format == "ncu-rep" and not info.already
    return out


@pytest.fixture(scope="session")
def ncu_con(ncu_run):
    con = traceql.connect(ncu_run)
    yield con
    con.close()


@pytest.fixture(scope="session")
def matched_store(tmp_path_factory) -> Path:
    """The contention trace and both Nsight Compute reports of its workload in one run store."""
    out = tmp_path_factory.mktemp("ncu_match") / "run"
    traceql.ingest([H200 / "contention.sqlite.xz", REPORT, SESSION_REPORT], out)
    return out


def rows(con, sql: str) -> list[dict]:
    return con.sql(sql).to_arrow_table().to_pylist()


# -- ingest ---------------------------------------------------------------------------------------

def test_run_tables(ncu_run, ncu_con, raw):
    manifest = json.loads((ncu_run / "manifest.json").read_text())
    ((run_id, entry),) = manifest["runs"].items()
    assert entry["format"] == "ncu-rep" and run_id == entry["sha256"][:16]
    assert entry["tables"]["ncu_kernels"] == len(raw) == 5
    assert entry["tables"]["ncu_metrics"] == sum(len(k["metrics"]) for k in raw)
    for table in schema.TABLES:
        (f,) = store.run_files(ncu_run, table)
        meta = pq.read_schema(f).metadata
        assert meta[b"traceql.schema_version"] == b"1" and meta[b"traceql.table"] == table.encode()
        assert pq.read_schema(f).remove_metadata() == schema.TABLES[table], table
        if table not in ("runs", "ncu_metrics", "ncu_kernels"):
            assert pq.read_metadata(f).num_rows == 0, table
    (run,) = rows(ncu_con, "SELECT * FROM runs")
    assert (run["format"], run["tool"], run["gpu_names"]) == ("ncu-rep", "NVIDIA Nsight Compute", "NVIDIA H200")
    got = rows(ncu_con, "SELECT kernel_id, name, short_name, nvtx, workload FROM ncu_kernels ORDER BY kernel_id")
    assert [(g["name"], g["short_name"]) for g in got] == [(k["name"], k["short_name"]) for k in raw]
    assert [g["kernel_id"] for g in got] == list(range(len(raw)))
    # collectors/contention.py --ncu launches them inside the NVTX range "profile"
    assert {(g["nvtx"], g["workload"]) for g in got} == {("profile", "kernel")}


def test_metrics_as_the_report_holds_them(ncu_con, raw):
    got = {(r["kernel_id"], r["metric"]): r for r in rows(ncu_con, "SELECT * FROM ncu_metrics")}
    assert len(got) == sum(len(k["metrics"]) for k in raw)
    for i, k in enumerate(raw):
        for name, value in k["metrics"].items():
            r = got[(i, name)]
            if isinstance(value, str):
                assert (r["value"], r["value_text"]) == (None, value), name
            else:
                assert r["value_text"] is None and r["value"] == pytest.approx(value, rel=1e-12, abs=0), name
            assert r["unit"] == (k["units"][name] or None), name
    ew = by_short(raw, "vectorized_elementwise_kernel")[0]["metrics"]
    (dur,) = ncu_con.sql("SELECT value FROM ncu_metrics WHERE metric = 'gpu__time_duration.sum' "
                         "AND short_name = 'vectorized_elementwise_kernel'").fetchall()[0]
    assert dur == ew["gpu__time_duration.sum"]
    launch_cols = rows(ncu_con, "SELECT DISTINCT kernel_id, grid_x, block_x, dynamic_smem_bytes FROM ncu_metrics")
    assert len(launch_cols) == len(raw)
    for r in launch_cols:
        m = raw[r["kernel_id"]]["metrics"]
        assert (r["grid_x"], r["block_x"], r["dynamic_smem_bytes"]) == (
            m["launch__grid_dim_x"], m["launch__block_dim_x"], m["launch__shared_mem_per_block_dynamic"])


def test_kernel_columns_from_the_report(ncu_con, raw):
    limits = ("registers", "shared_mem", "warps", "blocks", "barriers")
    for r in rows(ncu_con, "SELECT * FROM ncu_kernels ORDER BY kernel_id"):
        m = raw[r["kernel_id"]]["metrics"]
        assert r["duration_ns"] == round(m["gpu__time_duration.sum"])
        assert r["dram_bytes_read"] == round(m["dram__bytes_read.sum"])
        assert r["dram_bytes_write"] == round(m["dram__bytes_write.sum"])
        assert r["l2_hit_rate_pct"] == m["lts__t_sector_hit_rate.pct"]
        assert r["l1_hit_rate_pct"] == m["l1tex__t_sector_hit_rate.pct"]
        assert r["achieved_occupancy_pct"] == m["sm__warps_active.avg.pct_of_peak_sustained_active"]
        assert r["theoretical_occupancy_pct"] == m["sm__maximum_warps_per_active_cycle_pct"]
        assert r["waves_per_sm"] == m["launch__waves_per_multiprocessor"]
        assert r["regs_per_thread"] == m["launch__registers_per_thread"]
        assert r["ctas"] == m["launch__grid_size"] == r["grid_x"] * r["grid_y"] * r["grid_z"]
        assert r["ctas_per_sm"] == min(m[f"launch__occupancy_limit_{w}"] for w in limits)
        assert m[f"launch__occupancy_limit_{r['occupancy_limiter']}"] == r["ctas_per_sm"]
        # this ncu names it gpu__dram_throughput; dram__throughput is the older name
        assert "dram__throughput.avg.pct_of_peak_sustained_elapsed" not in m
        assert r["dram_throughput_pct"] == m["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"]
        peak = 2 * m["device__attribute_memory_clock_rate"] * 1e3 * m["device__attribute_global_memory_bus_width"] / 8
        assert r["peak_dram_Bps"] == pytest.approx(peak)
        assert r["dram_peak_fraction"] == pytest.approx(m["dram__bytes.sum.per_second"] / peak)
        # waves as ncu counts them: CTAs over (CTAs per SM x SMs)
        assert r["waves_per_sm"] == pytest.approx(r["ctas"] / (r["ctas_per_sm"] * r["sm_count"]))


def test_demand_of_known_kernels(ncu_con):
    k = {r["short_name"] + ("" if r["short_name"] != "half_sm_stream" else f"/{r['dynamic_smem_bytes']}"): r
         for r in rows(ncu_con, "SELECT * FROM ncu_kernels")}
    # H200: 4.8 TB/s HBM3e
    (peak,) = {r["peak_dram_Bps"] for r in k.values()}
    assert peak == pytest.approx(4.8e12, rel=0.01)
    ew = k["vectorized_elementwise_kernel"]  # z = x + y over 2^28 fp32: reads 2 GiB, writes 1 GiB
    assert ew["dram_bytes_read"] == pytest.approx(2 * GIB, rel=0.02)
    assert ew["dram_bytes_write"] == pytest.approx(GIB, rel=0.02)
    assert ew["bound"] == "memory" and ew["dram_peak_fraction"] > 0.8 and ew["compute_peak_fraction"] < 0.2
    assert ew["ctas_per_sm"] == 16 and ew["waves_per_sm"] > 100
    spin = k["spin_hold_sms"]  # spins on the global timer: no memory traffic
    assert spin["dram_bytes_read"] + spin["dram_bytes_write"] < 64 * 1024
    assert spin["dram_peak_fraction"] < 1e-4
    assert (spin["ctas"], spin["ctas_per_sm"], spin["occupancy_limiter"]) == (16, 1, "shared_mem")
    assert spin["duration_ns"] == pytest.approx(1_000_000, rel=0.01)  # asked to spin 1 ms
    gemm = k["nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT"]  # bf16 8192^3
    assert gemm["bound"] == "compute" and gemm["compute_peak_fraction"] > 0.8 and gemm["tensor_pipe_pct"] > 50
    assert gemm["dram_peak_fraction"] < 0.5
    assert gemm["dram_bytes_read"] >= 2 * 8192 * 8192 * 2  # A and B at least once
    assert gemm["waves_per_sm"] == 1 and gemm["ctas"] == gemm["sm_count"] == 132
    dram, l2 = k["half_sm_stream/163840"], k["half_sm_stream/164864"]  # the L2 variant has 1 KiB more smem
    assert l2["l2_hit_rate_pct"] > 90 > dram["l2_hit_rate_pct"]
    assert dram["dram_bytes_read"] == pytest.approx(2 * 2 * GIB, rel=0.02)  # 2 passes over 2 GiB
    assert dram["waves_per_sm"] == 0.5


def test_flops_missing_from_this_section_set(ncu_con, raw):
    # The report was collected without the SASS floating-point counters: no FLOP count, and the row says why.
    assert all("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum" not in k["metrics"] for k in raw)
    for r in rows(ncu_con, "SELECT * FROM ncu_kernels"):
        assert r["flop_count"] is None and r["flop_per_s"] is None and r["arithmetic_intensity_flop_per_byte"] is None
        assert "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum" in r["missing"]
        # everything attribution needs was collected
        assert r["bound"] is not None and r["ctas_per_sm"] is not None and r["dram_throughput_pct"] is not None
        assert not [n for n in r["missing"] if "sass" not in n and "ops_path" not in n], r["missing"]
    gemm = rows(ncu_con, "SELECT missing FROM ncu_kernels WHERE short_name LIKE 'nvjet%'")[0]
    assert "sm__ops_path_tensor_src_*.sum" in gemm["missing"]  # tensor pipe busy, tensor-core ops not counted


def test_ingest_is_idempotent_and_cli(tmp_path, ncu_run):
    out = tmp_path / "run"
    rc, stdout, stderr = run_cli("ingest", REPORT, "-o", out)
    assert rc == 0, stderr
    assert stdout.strip() == str(out) and "ncu_kernels 5" in stderr
    rc, _, stderr = run_cli("ingest", REPORT, "-o", out)
    assert rc == 0 and "already ingested" in stderr
    rc, stdout, stderr = run_cli("sql", out, "SELECT short_name, bound FROM ncu_kernels ORDER BY kernel_id",
                                 "--format", "csv")
    assert rc == 0, stderr
    assert list(csv.reader(stdout.splitlines()))[1:3] == [
        ["nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT", "compute"], ["vectorized_elementwise_kernel", "memory"]]


# -- derivation on built metric sets (exact known answers) ------------------------------------------

def kernel(*metric_sets: dict[str, float | str]) -> ProfiledKernel:
    metrics = {n: Metric(None, v, "") if isinstance(v, str) else Metric(float(v), None, "")
               for ms in metric_sets for n, v in ms.items()}
    return ProfiledKernel(0, 0, "kernel", "k", "k", None, metrics)


BASE = {"gpu__time_duration.sum": 1_000_000, "dram__bytes_read.sum": 3e9, "dram__bytes_write.sum": 1e9,
        "sm__throughput.avg.pct_of_peak_sustained_elapsed": 10.0,
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": 80.0,
        "device__attribute_memory_clock_rate": 2_000_000, "device__attribute_global_memory_bus_width": 4096}
SASS = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum"


def test_derive_flops_and_roofline():
    counts = {"ffma": 100, "fadd": 10, "fmul": 20, "dfma": 3, "dadd": 1, "dmul": 2}
    row = derive(kernel(BASE, {SASS.format(op): n for op, n in counts.items()}))
    flops = 2 * 100 + 10 + 20 + 2 * 3 + 1 + 2
    assert row["flop_count"] == flops and row["flop_per_s"] == pytest.approx(flops / 1e-3)
    assert row["arithmetic_intensity_flop_per_byte"] == pytest.approx(flops / 4e9)
    assert row["peak_dram_Bps"] == 2 * 2e9 * 4096 / 8 == 2.048e12
    assert row["dram_Bps"] == pytest.approx(4e9 / 1e-3)  # no dram__bytes.sum.per_second: bytes over duration
    assert row["dram_peak_fraction"] == pytest.approx(4e12 / 2.048e12)
    assert row["bound"] == "memory" and row["compute_peak_fraction"] == pytest.approx(0.1)
    assert row["dram_throughput_pct"] == 80.0  # the newer metric name
    assert derive(kernel(BASE, {"dram__throughput.avg.pct_of_peak_sustained_elapsed": 70.0}))[
        "dram_throughput_pct"] == 70.0  # the older one first
    # half precision counts when present; per-cycle rates stand in for counts
    rates = {SASS.format(op) + ".per_cycle_elapsed": n / 1000 for op, n in counts.items()}
    row = derive(kernel(BASE, rates, {"smsp__cycles_elapsed.avg.per_second": 1e6, SASS.format("hfma"): 5}))
    assert row["flop_count"] == pytest.approx(flops + 10)
    # the roofline sections' own peak wins over the device attributes
    row = derive(kernel(BASE, {"dram__bytes.sum.peak_sustained": 1000, "dram__cycles_elapsed.avg.per_second": 3e9}))
    assert row["peak_dram_Bps"] == 3e12


def test_derive_tensor_guard_and_missing():
    fp = {SASS.format(op): 1 for op in ("ffma", "fadd", "fmul", "dfma", "dadd", "dmul")}
    busy = {"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed": 90.0}
    row = derive(kernel(BASE, fp, busy))
    assert row["flop_count"] is None and "sm__ops_path_tensor_src_*.sum" in row["missing"]
    tensor = {"sm__ops_path_tensor_src_bf16_dst_fp32.sum": 1e12,
              "sm__ops_path_tensor_src_bf16_dst_fp32_sparsity_off.sum": 1e12,  # a subset: not added again
              "sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32.sum": 1e12,  # split by instruction: not added again
              "sm__ops_path_tensor_src_int8.sum": 7e12}  # integer ops are not FLOPs
    assert derive(kernel(BASE, fp, busy, tensor))["flop_count"] == 1e12 + 8  # FMA counts twice
    row = derive(kernel({"gpu__time_duration.sum": 5}))
    assert row["bound"] is None and row["ctas_per_sm"] is None and row["dram_peak_fraction"] is None
    for name in ("dram__bytes_read.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
                 "lts__t_sector_hit_rate.pct", "sm__warps_active.avg.pct_of_peak_sustained_active",
                 "launch__occupancy_limit_registers", "launch__waves_per_multiprocessor",
                 "sm__throughput.avg.pct_of_peak_sustained_elapsed", SASS.format("ffma")):
        assert name in row["missing"]
    assert "launch__occupancy_limit_barriers" not in row["missing"]  # optional: older ncu lacks it
    limits = {f"launch__occupancy_limit_{w}": n for w, n in (("registers", 4), ("shared_mem", 2), ("warps", 2),
                                                              ("blocks", 32))}
    row = derive(kernel(limits))
    assert (row["ctas_per_sm"], row["occupancy_limiter"]) == (2, "shared_mem")


# -- matching to the trace --------------------------------------------------------------------------

def expected_matches(contention_sqlite: Path, reports: list[list[dict]]) -> dict[tuple, tuple[str, list[dict]]]:
    """The match rules, applied in Python: exact signature, else the same name with the most equal config."""
    sigs = raw_query(contention_sqlite, """
        SELECT s.value, k.gridX || 'x' || k.gridY || 'x' || k.gridZ, k.blockX || 'x' || k.blockY || 'x' || k.blockZ,
               k.dynamicSharedMemory
        FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName GROUP BY 1, 2, 3, 4""")
    profiled = [k for r in reports for k in r]
    out = {}
    for sig in sigs:
        same = [k for k in profiled if launch(k)[0] == sig[0]]
        if not same:
            out[sig] = ("unmatched", [])
            continue
        score = {id(k): sum(a == b for a, b in zip(launch(k)[1:], sig[1:], strict=True)) for k in same}
        best = max(score.values())
        out[sig] = ("exact" if best == 3 else "name", [k for k in same if score[id(k)] == best])
    return out


def test_match_against_the_contention_trace(tmp_path, contention_sqlite, raw):
    out = tmp_path / "run"
    traceql.ingest([H200 / "contention.sqlite.xz", REPORT], out)
    con = traceql.connect(out)
    got = {(r["name"], r["grid"], r["block"], r["dynamic_smem_bytes"]): r for r in rows(con, "SELECT * FROM ncu_match")}
    want = expected_matches(contention_sqlite, [raw])
    assert set(got) == set(want)
    for sig, (match, ks) in want.items():
        r = got[sig]
        assert r["match"] == match, sig
        assert r["n_profiled"] == len(ks), sig
        if ks:
            assert r["duration_ns"] == pytest.approx(median(k["metrics"]["gpu__time_duration.sum"] for k in ks))
            assert r["dram_bytes_read"] == pytest.approx(median(k["metrics"]["dram__bytes_read.sum"] for k in ks))
            assert r["l2_hit_rate_pct"] == pytest.approx(median(k["metrics"]["lts__t_sector_hit_rate.pct"]
                                                                for k in ks))
            assert (r["ncu_grid"], r["ncu_block"], r["ncu_dynamic_smem_bytes"]) == launch(ks[0])[1:]
        else:
            assert r["duration_ns"] is None and r["ncu_run_ids"] == []
    # The same workload: every compute kernel of the trace was profiled under the same name.
    assert {r["match"] for r in got.values()} == {"exact", "name"}
    by = {(r["short_name"], r["grid"]): r["match"] for r in got.values()}
    assert by[("spin_hold_sms", "16x1x1")] == "exact" and by[("spin_hold_sms", "33x1x1")] == "name"
    assert by[("vectorized_elementwise_kernel", "262144x1x1")] == "exact"
    assert by[("nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT", "2x66x1")] == "exact"
    # kernel_signatures joins on the same keys
    keys = "run_id, device_id, name, grid, block, dynamic_smem_bytes"
    prepare(con)
    assert con.sql(f"SELECT count(*) FROM (SELECT DISTINCT {keys} FROM kernel_signatures) s "
                   f"JOIN ncu_match USING ({keys})").fetchall()[0][0] == len(got)
    assert demand(con, matched_only=True).num_rows == len(got)


def test_match_across_two_profiling_runs(matched_store, contention_sqlite, raw, raw_reports):
    session = read_ncu_report(raw_reports["kernels_contention_session.ncu-rep.xz"])
    con = traceql.connect(matched_store)
    ncu_runs = sorted(r for (r,) in con.sql("SELECT run_id FROM runs WHERE format = 'ncu-rep'").fetchall())
    got = {(r["name"], r["grid"], r["block"], r["dynamic_smem_bytes"]): r for r in rows(con, "SELECT * FROM ncu_match")}
    for sig, (match, ks) in expected_matches(contention_sqlite, [raw, session]).items():
        r = got[sig]
        assert (r["match"], r["n_profiled"]) == (match, len(ks)), sig
        assert r["ncu_run_ids"] == ncu_runs, sig  # both reports profiled every kernel
        assert r["duration_ns"] == pytest.approx(median(k["metrics"]["gpu__time_duration.sum"] for k in ks))
    # The session's report has both half_sm_stream variants at 160 KiB of shared memory: three profiles in all.
    half = [r for r in got.values() if r["short_name"] == "half_sm_stream"]
    assert [r["n_profiled"] for r in half] == [3]
    # Two collections a few hours apart agree on the demand of the same kernels.
    for short in ("nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT", "vectorized_elementwise_kernel"):
        a, b = by_short(raw, short)[0]["metrics"], by_short(session, short)[0]["metrics"]
        assert a["gpu__time_duration.sum"] == pytest.approx(b["gpu__time_duration.sum"], rel=0.03)


def test_other_gpu_models_never_match(tmp_path):
    out = tmp_path / "run"
    traceql.ingest([H200 / "contention.sqlite.xz", REPORT], out)
    con = traceql.connect(out)
    con.execute("CREATE OR REPLACE VIEW devices AS SELECT * REPLACE ('NVIDIA A100-SXM4-80GB' AS name) "
                f"FROM read_parquet({[str(p) for p in store.run_files(out, 'devices')]})")
    assert {m for (m,) in con.sql("SELECT DISTINCT match FROM ncu_match").fetchall()} == {"unmatched"}


def test_view_header_matches_describe(ncu_con):
    sql = (bundled_dir("queries", "queries") / "ncu_match.sql").read_text()
    described = [(name, type_) for name, type_, *_ in ncu_con.sql("DESCRIBE ncu_match").fetchall()]
    assert header_columns(sql) == described


def test_store_without_ncu_tables(tmp_path, contention_sqlite_run):
    # A store ingested before the Nsight Compute tables existed: no files, no manifest entries for them.
    out = tmp_path / "run"
    shutil.copytree(contention_sqlite_run, out)
    manifest = json.loads((out / "manifest.json").read_text())
    for run_id, entry in manifest["runs"].items():
        for table in ("ncu_metrics", "ncu_kernels"):
            entry["tables"].pop(table, None)
            (store.run_dir(out, run_id) / f"{table}.parquet").unlink(missing_ok=True)
    (out / "manifest.json").write_text(json.dumps(manifest))
    con = traceql.connect(out)
    assert con.sql("SELECT count(*) FROM ncu_kernels").fetchall()[0][0] == 0
    assert {m for (m,) in con.sql("SELECT DISTINCT match FROM ncu_match").fetchall()} == {"unmatched"}
    assert con.sql("SELECT count(*) FROM ncu_match").fetchall()[0][0] == con.sql(
        "SELECT count(*) FROM (SELECT DISTINCT name, grid_x, grid_y, grid_z, block_x, block_y, block_z, "
        "dynamic_smem_bytes, device_id FROM kernels)").fetchall()[0][0]
    # and the same store takes an Nsight Compute run afterwards
    traceql.ingest(REPORT, out)
    con = traceql.connect(out)
    assert "exact" in {m for (m,) in con.sql("SELECT DISTINCT match FROM ncu_match").fetchall()}


def test_store_of_ncu_runs_only(ncu_con):
    assert ncu_con.sql("SELECT count(*) FROM kernels").fetchall()[0][0] == 0
    assert ncu_con.sql("SELECT count(*) FROM ncu_match").fetchall()[0][0] == 0
    prepare(ncu_con)  # the signatures' baselines: computed, here from no kernels at all
    assert ncu_con.sql("SELECT count(*) FROM kernel_signatures").fetchall()[0][0] == 0


# -- bad input --------------------------------------------------------------------------------------

def _blocks(data: bytes) -> list[tuple[int, int]]:
    """(offset, declared results) of each block of a report: u32 length, header, payload (field 5 its size)."""
    def varints(buf: bytes) -> dict[int, int]:
        i, out = 0, {}
        while i < len(buf):
            key, i = _varint(buf, i)
            if key & 7 == 0:
                out[key >> 3], i = _varint(buf, i)
            elif key & 7 == 2:
                n, i = _varint(buf, i)
                i += n
            else:
                i += 8 if key & 7 == 1 else 4
        return out

    pos = 8 + struct.unpack("<I", data[4:8])[0]
    blocks = []
    while pos < len(data):
        (n,) = struct.unpack("<I", data[pos:pos + 4])
        fields = varints(data[pos + 4:pos + 4 + n])
        blocks.append((pos, fields.get(2, 0)))
        pos += 4 + n + fields.get(5, 0)
    assert pos == len(data)
    return blocks


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    v = s = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << s
        s += 7
        if not b & 0x80:
            return v, i


def _report_bytes(raw_reports) -> bytes:
    return raw_reports["kernels.ncu-rep.xz"].read_bytes()


def _no_results(d: Path, data: bytes) -> Path:
    first_result = next(off for off, results in _blocks(data) if results)
    p = d / "empty_profile.ncu-rep"
    p.write_bytes(data[:first_result])  # a whole report up to its first profiled kernel
    return p


def _older_format(d: Path, data: bytes) -> Path:
    p = d / "format6.ncu-rep"
    assert data[8:10] == b"\x08\x07"  # file header: format version 7
    p.write_bytes(data[:9] + b"\x06" + data[10:])
    return p


BAD = {
    "text": (lambda d, data: _write(d / "notes.ncu-rep", b"profiling notes\n" * 40), "not an Nsight Compute report"),
    "other format": (lambda d, data: _write(d / "trace.ncu-rep", (H200 / "contention.sqlite.xz").read_bytes()),
                     "not an Nsight Compute report"),
    "empty": (lambda d, data: _write(d / "empty.ncu-rep", b""), "empty file"),
    "truncated": (lambda d, data: _write(d / "cut.ncu-rep", data[:len(data) // 2]), "truncated"),
    "truncated header": (lambda d, data: _write(d / "cut_header.ncu-rep", data[:9]), "truncated"),
    "truncated xz": (lambda d, data: _write(d / "cut.ncu-rep.xz", REPORT.read_bytes()[:50_000]), "cannot decompress"),
    "no profiled kernel": (_no_results, "holds no profiled kernel"),
    "unreadable by the package": (_older_format, "cannot read this report"),
}


def _write(p: Path, data: bytes) -> Path:
    p.write_bytes(data)
    return p


@pytest.mark.parametrize("case", list(BAD))
def test_bad_report(case, tmp_path, raw_reports):
    build, words = BAD[case]
    src = tmp_path / "src"
    src.mkdir()
    bad = build(src, _report_bytes(raw_reports))
    before = bad.read_bytes()
    out = tmp_path / "out"
    rc, _, stderr = run_cli("ingest", bad, "-o", out)
    assert rc == 2, stderr
    assert str(bad) in stderr and words in stderr and "Traceback" not in stderr, stderr
    assert not store.is_store(out) and not [p for p in out.rglob("*") if p.is_file()]
    assert bad.read_bytes() == before


def test_bad_report_into_existing_store(tmp_path, ncu_run, raw_reports):
    out = tmp_path / "run"
    shutil.copytree(ncu_run, out)
    manifest = (out / "manifest.json").read_text()
    bad = _write(tmp_path / "cut.ncu-rep", _report_bytes(raw_reports)[:3_000_000])
    rc, _, stderr = run_cli("ingest", bad, "-o", out)
    assert rc == 2 and "truncated" in stderr and "Traceback" not in stderr, stderr
    assert (out / "manifest.json").read_text() == manifest and not list(out.glob(".tmp-*"))


def test_missing_report(tmp_path):
    rc, _, stderr = run_cli("ingest", tmp_path / "nowhere.ncu-rep", "-o", tmp_path / "out")
    assert rc == 2 and "nowhere.ncu-rep" in stderr and "no such file" in stderr and "Traceback" not in stderr


def test_without_the_ncu_report_package(tmp_path):
    blocker = tmp_path / "blocked"
    (blocker / "ncu_report").mkdir(parents=True)
    (blocker / "ncu_report" / "__init__.py").write_text("raise ImportError('ncu_report is not installed')\n")
    import os
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(blocker), *sys.path]))
    rc, _, stderr = run_cli("ingest", REPORT, "-o", tmp_path / "out", env=env)
    assert rc == 2 and "pip install ncu-report" in stderr and "Traceback" not in stderr, stderr


# -- the collector preset (no GPU here: the command line, not a run) ---------------------------------

def _names_regex(full: list[str]) -> re.Pattern[str]:
    value = full[full.index("--kernel-name") + 1]
    assert value.startswith("regex:")
    return re.compile(value.removeprefix("regex:"))


def test_ncu_command_preset(tmp_path):
    full = ncu_command("/opt/ncu", tmp_path / "k", ["python", "train.py", "--steps", "3"])
    assert full[0] == "/opt/ncu" and full[-4:] == ["python", "train.py", "--steps", "3"]
    assert full[full.index("-o") + 1] == str(tmp_path / "k")
    assert full[full.index("--clock-control") + 1] == "none"
    assert full[full.index("--target-processes") + 1] == "all"
    assert [full[i + 1] for i, f in enumerate(full) if f == "--section"] == list(NCU_SECTIONS)
    assert {"SpeedOfLight", "MemoryWorkloadAnalysis", "LaunchStats", "Occupancy"} <= set(NCU_SECTIONS)
    metrics = full[full.index("--metrics") + 1].split(",")
    assert metrics == list(NCU_METRICS)
    assert "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum" in metrics
    assert "--nvtx" not in full
    names = _names_regex(full)
    for kept in ("nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT", "vectorized_elementwise_kernel", "spin_hold_sms",
                 "flash_fwd_kernel"):
        assert names.search(kept), kept
    for collective in ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "ncclKernel_AllGather_RING_LL_Sum_int8_t",
                       "ncclSymkDevKernel_AllGather_LL", "cross_device_reduce_1stage", "nvshmemi_barrier_kernel",
                       "two_shot_all_reduce_kernel"):
        assert not names.search(collective), collective


def test_metric_preset_names_exist_in_a_real_report(raw):
    # Every name of the preset that this report's collection also asked for is one ncu really writes.
    present = set(raw[0]["metrics"])
    assert [m for m in NCU_METRICS if "sass" not in m and m not in present] == []


def test_ncu_command_options(tmp_path):
    full = ncu_command("ncu", tmp_path / "k", ["./a.out"], kernels_regex="gemm|nvjet", nvtx_include="profile/",
                       clock_control="base", ncu_args=["--launch-count", "20"])
    assert full[full.index("--clock-control") + 1] == "base"
    assert full[full.index("--nvtx-include") + 1] == "profile/" and "--nvtx" in full
    assert full[full.index("--launch-count") + 1] == "20" and full.index("--launch-count") < full.index("-o")
    names = _names_regex(full)
    assert names.search("nvjet_sm90_tst") and names.search("ampere_bf16_s16816gemm_bf16_128x128")
    assert not names.search("vectorized_elementwise_kernel")
    assert not names.search("ncclDevKernel_Generic_gemm")  # collectives stay out whatever the pattern
    assert _names_regex(ncu_command("ncu", tmp_path / "k", ["x"], kernels_regex="^nvjet")).search("nvjet_x")
    assert NCU_EXCLUDE in full[full.index("--kernel-name") + 1]
    with pytest.raises(UsageError, match="clock-control"):
        ncu_command("ncu", tmp_path / "k", ["x"], clock_control="fast")
    with pytest.raises(UsageError, match="not a regular expression"):
        ncu_command("ncu", tmp_path / "k", ["x"], kernels_regex="gemm(")


def test_collect_ncu_cli_without_gpu(tmp_path):
    from traceql.collect import gpus_present

    if gpus_present():  # not "nvidia-smi exists": it may exist without a driver
        pytest.skip("a GPU machine: this checks the refusal on a machine without one")
    rc, _, stderr = run_cli("collect", "--ncu", "-o", tmp_path / "runs", "--", sys.executable, "-c", "pass")
    assert rc == 2 and "--ncu needs an NVIDIA GPU" in stderr and "Traceback" not in stderr, stderr
