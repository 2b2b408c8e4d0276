"""`traceql attribute ... --ncu REPORT`: Nsight Compute counters in the attribution models.

Real data: ``h200/contention_parquetdir`` (and ``contention.sqlite.xz``, the same trace) with
``h200/kernels.ncu-rep.xz``, a profile of the same collector's kernels (see tests/test_ncu.py). Expected
values are read back from the report with ``ncu_report`` directly. Synthetic stores (tests/synthetic.py)
give the known answers: a device of S = 100 SMs, times in ns.
"""

from __future__ import annotations

import json
import lzma
import re
import shutil
from pathlib import Path

import pytest
from conftest import H200, read_ncu_report, run_cli, without_digests
from synthetic import make_store

import traceql
from traceql import store
from traceql.attribute import attribute
from traceql.errors import BadInputError, MissingInputError
from traceql.queries_loader import header_columns, query_files
from traceql.store import schema

ncu_report = pytest.importorskip("ncu_report")

REPORT = H200 / "kernels.ncu-rep.xz"
SESSION_REPORT = H200 / "kernels_contention_session.ncu-rep.xz"
# the DRAM rate a copy engine keeps beside kernels with memory traffic (queries/_calibration.sql)
COPY_RATE = float(re.search(r"([-+0-9.eE]+)::DOUBLE AS copy_rate_pct",
                            (Path(__file__).resolve().parents[1] / "queries/_calibration.sql").read_text()).group(1))
GEMM, ADD, SPIN = "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT", "vectorized_elementwise_kernel", "spin_hold_sms"
approx = pytest.approx


def _labels(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    head, *rest = text.split(";")
    return {"case": head.removeprefix("case:"), **dict(p.split("=", 1) for p in rest if "=" in p)}


def _rows(result) -> list[dict]:
    rows = result.to_json()["kernels"]
    for r in rows:
        r["labels"] = _labels(r["nvtx"])
    return rows


def _case(rows: list[dict], case: str, short: str) -> list[dict]:
    return [r for r in rows if r["labels"].get("case") == case and r["short_name"] == short]


# -- the report, read independently ----------------------------------------------------------------

@pytest.fixture(scope="module")
def report_kernels(tmp_path_factory) -> dict[str, dict[str, float]]:
    """Per function name, the profiled kernel's launch__* occupancy limits and counters, straight from ncu_report."""
    path = tmp_path_factory.mktemp("ncu_raw") / "kernels.ncu-rep"
    with lzma.open(REPORT) as f:
        path.write_bytes(f.read())
    out: dict[str, dict[str, float]] = {}
    for k in read_ncu_report(path):
        numbers = {n: v for n, v in k["metrics"].items() if not isinstance(v, str)}
        out.setdefault(k["short_name"], numbers)  # half_sm_stream twice: the first is enough here
    return out


def _ctas_per_sm(metrics: dict[str, float]) -> int:
    limits = ("registers", "shared_mem", "warps", "blocks", "barriers")
    names = [f"launch__occupancy_limit_{w}" for w in limits]
    return int(min(metrics[n] for n in names if n in metrics))


# -- real data: the contention trace with and without its Nsight Compute profile ---------------------

@pytest.fixture(scope="module")
def plain(contention_parquet_run) -> list[dict]:
    return _rows(attribute(contention_parquet_run, group_by_nvtx="case:*"))


@pytest.fixture(scope="module")
def with_ncu(contention_parquet_run) -> tuple[list[dict], list[str]]:
    result = attribute(contention_parquet_run, ncu=REPORT, group_by_nvtx="case:*")
    return _rows(result), result.notes


def test_gemm_occupancy_comes_from_the_report(with_ncu, report_kernels):
    rows, notes = with_ncu
    want, gemm = _ctas_per_sm(report_kernels[GEMM]), report_kernels[GEMM]
    gemms = [r for r in rows if r["short_name"] == GEMM]
    assert gemms
    for r in gemms:
        assert r["occupancy_source"] == "ncu" and r["ncu_match"] == "exact"
        assert r["ncu_ctas_per_sm"] == want == r["occupancy"]
        assert r["ncu_dram_pct"] == approx(gemm["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"])
        assert r["ncu_l2_hit_pct"] == approx(gemm["lts__t_sector_hit_rate.pct"])
        assert r["ncu_working_set_bytes"] == approx(gemm["dram__bytes_read.sum"] + gemm["dram__bytes_write.sum"])
        assert r["l2_bytes"] == 60 * 2**20  # H200
    # the add: 16 CTAs per SM, register-limited
    adds = [r for r in rows if r["short_name"] == ADD]
    assert adds and {r["ncu_ctas_per_sm"] for r in adds} == {_ctas_per_sm(report_kernels[ADD])} == {16}
    assert any("Nsight Compute" in n and "6 of 6" in n for n in notes), notes


def test_spin_cases_stay_sm_with_ncu(with_ncu, plain):
    rows, _ = with_ncu
    by_n = {int(r["labels"]["ctas"]): r for r in _case(rows, "gemm_spin", GEMM)}
    before = {int(r["labels"]["ctas"]): r for r in _case(plain, "gemm_spin", GEMM)}
    assert sorted(by_n) == [16, 33, 66]
    for n, r in by_n.items():
        assert r["class"] == "sm" and r["significant"], r
        # a persistent GEMM (132 CTAs, 1 per SM by ncu's count): S/(S-N) - 1
        assert r["sm_predicted"] == approx(132 / (132 - r["corunner_sms"]) - 1)
        assert r["explained"]["sm"] == approx(before[n]["explained"]["sm"])
    assert by_n[16]["explained"]["sm"] < by_n[33]["explained"]["sm"] < by_n[66]["explained"]["sm"]
    # the spin kernel's launches were profiled with 16 CTAs: the 33- and 66-CTA launches match by name, and its
    # occupancy still applies (same block and shared memory); its DRAM demand and working set do not
    spins = {r["grid"]: r for r in rows if r["short_name"] == SPIN}
    assert spins["16x1x1"]["ncu_match"] == "exact" and spins["16x1x1"]["ncu_working_set_bytes"] < 64 * 1024
    for grid in ("33x1x1", "66x1x1"):
        assert spins[grid]["ncu_match"] == "name" and spins[grid]["occupancy_source"] == "ncu"
        assert spins[grid]["ncu_ctas_per_sm"] == 1 and spins[grid]["ncu_dram_pct"] is None
        assert spins[grid]["ncu_working_set_bytes"] is None
    # beside the 16-CTA spin, the co-runner's working set is the profiled spin kernel's few KiB
    assert by_n[16]["co_working_set_bytes"] == approx(spins["16x1x1"]["ncu_working_set_bytes"], rel=0.01)


def test_with_gpu_metrics_ncu_changes_no_factor(with_ncu, plain):
    """Occupancy from ncu equals the launch estimate for these kernels, and GPU metrics measured every DRAM rate:
    every factor is as without the report (up to rounding)."""
    rows, _ = with_ncu
    before = {(r["name"], r["grid"], r["nvtx"]): r for r in plain}
    assert len(rows) == len(before)
    for r in rows:
        b = before[(r["name"], r["grid"], r["nvtx"])]
        assert r["launch_occupancy"] == b["occupancy"] == r["occupancy"]
        if b["t0_ns"] is None and r["baseline"] == "ncu":
            # never isolated in the trace: Nsight Compute's isolated duration is the baseline (one value: no interval)
            assert r["t0_ns"] > 0 and r["slowdown_lo"] is None and not r["significant"]
            continue
        assert (r["class"], r["reason"]) == (b["class"], b["reason"])
        for f in ("sm", "dram_bw", "cache", "clock", "link"):
            assert r["explained"][f] == approx(b["explained"][f], abs=1e-9), (r["nvtx"], f)
        assert b["occupancy_source"] == "launch" and b["ncu_match"] == "unmatched" and b["ncu_ctas_per_sm"] is None
    # (the L2 case of this trace: tests/test_attribution_real.py, a known miss of v3)


@pytest.fixture(scope="module")
def no_metrics_run(tmp_path_factory, contention_parquet_run) -> Path:
    """The contention run with its GPU metrics removed: as if collected without --gpu-metrics-devices."""
    out = tmp_path_factory.mktemp("no_metrics") / "run"
    shutil.copytree(contention_parquet_run, out)
    for f in store.run_files(out, "gpu_metrics"):
        schema.write("gpu_metrics", schema.empty("gpu_metrics"), f)
    without_digests(out)  # a file rewritten on purpose: read by sizes and footers, as a store written before
    return out


def test_without_gpu_metrics_ncu_dram_demand_explains_the_add(no_metrics_run):
    """The bandwidth-bound add beside a peer copy: without GPU metrics only the SM model applies (unexplained);
    with the report, its isolated DRAM demand (91% of peak) plus the rate the copy engine keeps beside it makes it
    dram_bw."""
    [plain] = _case(_rows(attribute(no_metrics_run, group_by_nvtx="case:*")), "add_copy_peer", ADD)
    assert plain["class"] == "unexplained"
    assert plain["reason"].endswith("(no GPU metrics: only the SM model could be applied)")
    assert plain["dram_pct_iso"] is None and plain["explained"]["dram_bw"] == 0
    rows = _rows(attribute(no_metrics_run, ncu=REPORT, group_by_nvtx="case:*"))
    [r] = _case(rows, "add_copy_peer", ADD)
    assert r["dram_pct_iso"] is None and r["ncu_dram_pct"] > 85
    f, co = r["overlap_fraction"], r["co_dram_pct"]
    assert co > 0  # the copy, estimated from its bytes
    # no measured DRAM rate: the profiled demand decides. The add's own alone rate is the saturation (above the 88%
    # floor); the copy engine beside it keeps at most copy_rate_pct of DRAM (it yields to the kernel), and shared in
    # proportion to demand the add keeps sat x sat / (sat + kept): x = (sat + kept) / sat - 1, over the overlapped
    # share f: f x / (1 + x - f x) (medians over instances: f and the copy's rate vary a little)
    sat, kept = r["ncu_dram_pct"], min(co, COPY_RATE)
    x = (sat + kept) / sat - 1
    point = r["explained"]["dram_bw"]
    assert point == approx(f * x / (1 + x - f * x), rel=0.02) and point > 0
    lo, hi = r["explained_interval"]["dram_bw"]
    assert hi - point == approx(point - lo) and hi - point == approx(r["predicted_band"], rel=0.01)
    # SM explains nothing (a copy engine), no clock samples: DRAM is the only cause, and it names the class
    assert r["explained"]["sm"] == 0 and r["class"] == "dram_bw"
    # the GEMM beside the spin kernel stays sm on the SM model alone
    for g in _case(rows, "gemm_spin", GEMM):
        assert g["class"] == "sm" and g["occupancy_source"] == "ncu"


# -- where the counters come from: reports, run directories, the input itself -----------------------

def test_report_run_directory_and_input_store_agree(tmp_path, contention_parquet_run):
    ncu_dir = tmp_path / "ncu"
    traceql.ingest(REPORT, ncu_dir)
    both = tmp_path / "both"
    shutil.copytree(contention_parquet_run, both)
    traceql.ingest(REPORT, both)

    def gemm(result) -> tuple:
        [r] = [r for r in result.to_json()["kernels"] if r["short_name"] == GEMM]
        return r["occupancy_source"], r["ncu_ctas_per_sm"], r["ncu_dram_pct"], r["ncu_l2_hit_pct"]

    from_dir = gemm(attribute(contention_parquet_run, ncu=ncu_dir))
    assert from_dir[0] == "ncu"
    # a run directory holding trace and report: the report is used without --ncu (and said so in the notes)
    implicit = attribute(both)
    assert gemm(implicit) == from_dir and any("Nsight Compute" in n for n in implicit.notes)
    # giving it again changes nothing: the run directory's copy is not counted twice
    import duckdb

    con = duckdb.connect()
    assert gemm(attribute(both, ncu=[REPORT, ncu_dir], con=con, workdir=tmp_path / "w1")) == from_dir
    assert con.sql("SELECT count(*) FROM ncu_kernels").fetchall()[0][0] == 5
    # only the Nsight Compute runs of an --ncu run directory are used: its trace is not a second input
    con = duckdb.connect()
    attribute(contention_parquet_run, ncu=both, con=con, workdir=tmp_path / "w2")
    assert con.sql("SELECT count(DISTINCT run_id) FROM kernels").fetchall()[0][0] == 1
    # two reports (repeatable --ncu): both runs are named in the note
    two = attribute(contention_parquet_run, ncu=[REPORT, SESSION_REPORT])
    assert any("2 profile run(s)" in n for n in two.notes), two.notes


def test_cli_with_ncu(tmp_path, contention_parquet_run, report_kernels):
    rc, stdout, stderr = run_cli("attribute", contention_parquet_run, "--ncu", REPORT, "--format", "json")
    assert rc == 0, stderr
    doc = json.loads(stdout)
    [gemm] = [r for r in doc["kernels"] if r["short_name"] == GEMM]
    assert gemm["occupancy_source"] == "ncu" and gemm["occupancy"] == _ctas_per_sm(report_kernels[GEMM])
    assert "cache_evidence" in gemm and set(gemm["explained"]) == {"sm", "dram_bw", "cache", "clock", "link"}


# -- bad --ncu input: exit 2, a message naming the file ----------------------------------------------

def _truncated(tmp_path: Path) -> Path:
    p = tmp_path / "cut.ncu-rep"
    with lzma.open(REPORT) as f:
        p.write_bytes(f.read()[:3_000_000])
    return p


def _older_format(tmp_path: Path) -> Path:
    """The report with its file header claiming format version 6: the installed ncu_report reads none of it."""
    p = tmp_path / "format6.ncu-rep"
    with lzma.open(REPORT) as f:
        data = f.read()
    assert data[8:10] == b"\x08\x07"
    p.write_bytes(data[:9] + b"\x06" + data[10:])
    return p


def _other_kernels(tmp_path: Path) -> Path:
    return make_store(tmp_path / "other", kernels=[dict(name="gemm_A", start_ns=0, end_ns=1000, ctas=8)])


def _other_gpu(tmp_path: Path) -> Path:
    # the profiled GEMM's own name and launch, on another GPU model
    return make_store(tmp_path / "a100", gpu_name="NVIDIA A100-SXM4-80GB",
                      kernels=[dict(name=GEMM, start_ns=0, end_ns=1000, grid_x=2, grid_y=66, block_x=384)])


@pytest.mark.parametrize("case", ["truncated", "unreadable", "a trace, not a report", "missing", "run dir without ncu",
                                  "no kernel in common", "other GPU model"])
def test_bad_ncu_input_cli(case, tmp_path, contention_parquet_run):
    inputs: list = [contention_parquet_run]
    if case == "truncated":
        bad, words = _truncated(tmp_path), "truncated"
    elif case == "unreadable":
        bad, words = _older_format(tmp_path), "cannot read this report"
    elif case == "a trace, not a report":
        bad, words = H200 / "contention.sqlite.xz", "not an Nsight Compute report"
    elif case == "missing":
        bad, words = tmp_path / "nowhere.ncu-rep", "no such file"
    elif case == "run dir without ncu":
        bad, words = contention_parquet_run, "holds no Nsight Compute run"
        inputs = [_other_kernels(tmp_path)]
    elif case == "no kernel in common":
        bad, words = REPORT, "none of its profiled kernels"
        inputs = [_other_kernels(tmp_path)]
    else:
        bad, words = REPORT, "profiled on NVIDIA H200, but the input ran on NVIDIA A100-SXM4-80GB"
        inputs = [_other_gpu(tmp_path)]
    rc, stdout, stderr = run_cli("attribute", *inputs, "--ncu", bad)
    assert rc == 2, (stdout, stderr)
    assert "--ncu" in stderr and str(bad) in stderr and words in stderr and "Traceback" not in stderr, stderr
    assert stdout == ""


def test_bad_ncu_input_python(tmp_path, contention_parquet_run):
    with pytest.raises(BadInputError, match="truncated"):
        attribute(contention_parquet_run, ncu=_truncated(tmp_path))
    with pytest.raises(MissingInputError, match="--ncu"):
        attribute(contention_parquet_run, ncu=tmp_path / "nowhere.ncu-rep")


# -- synthetic known answers ---------------------------------------------------------------------------

S = 100
NCU_RUN = "5e7e7e7e000000cc"


def _profile(name: str, grid_x: int, block_x: int = 128, **demand) -> dict:
    """An ncu_kernels row of a profiled kernel, as Nsight Compute ingest writes it (H200, S = 100 here)."""
    return dict(kernel_id=0, range_id=0, workload="kernel", name=name, short_name=name, device_id=0,
                device_name="NVIDIA H200", sm_count=S, grid_x=grid_x, grid_y=1, grid_z=1, block_x=block_x, block_y=1,
                block_z=1, static_smem_bytes=0, dynamic_smem_bytes=0, ctas=grid_x, **demand)


def _wave_store(root: Path, profile: dict | None) -> Path:
    """Kernel W: 200 CTAs of 128 threads, registers unknown: the launch configuration allows 16 CTAs per SM
    (64 warps / 4), so W is one partial wave. Alone 1000 ns (3x); 1500 ns (2x) beside a comm kernel of 20 CTAs, each
    an NCCL CTA (544 threads of 96 registers: more than half an SM's registers, so they take their SMs)."""
    kernels = [dict(name="wave_W", ctas=200, start_ns=s, end_ns=s + 1000) for s in (0, 2000, 4000)]
    for start in (10_000, 20_000):
        kernels += [dict(name="wave_W", ctas=200, start_ns=start, end_ns=start + 1500),
                    dict(kind="comm", ctas=20, start_ns=start - 100, end_ns=start + 1600, block_x=544,
                         regs_per_thread=96)]
    make_store(root, kernels=kernels, devices=[dict(device_id=0, sm_count=S)])
    if profile is not None:  # in a run of its own in the same run directory
        make_store(root, run_id=NCU_RUN, devices=[], ncu_kernels=[_profile("wave_W", 200, **profile)])
    return root


@pytest.mark.xfail(strict=True, reason="the SM model decides per (victim, co-runner) pair from the launch "
                   "configurations, not from Nsight Compute's CTAs per SM: by its launch (16 CTAs per SM, registers "
                   "unknown) the victim fits beside the NCCL CTAs, so no SM is taken (docs/attribution.md, Limits)")
def test_ncu_occupancy_changes_the_wave_model(tmp_path):
    [launch] = [r for r in attribute(_wave_store(tmp_path / "a", None)).to_json()["kernels"]
                if r["name"] == "wave_W"]
    # ncu: 1 CTA per SM (say, register-limited)
    profile = dict(ctas_per_sm=1, occupancy_limiter="registers")
    [ncu] = [r for r in attribute(_wave_store(tmp_path / "b", profile)).to_json()["kernels"]
             if r["name"] == "wave_W"]
    # launch: occ 16, 200 <= 16 x (100 - 20): the grid fits in the free SMs, no SM loss, nothing explains 0.5
    assert (launch["occupancy"], launch["occupancy_source"], launch["sm_predicted"]) == (16, "launch", 0)
    assert launch["explained"]["sm"] == 0 and launch["class"] == "unexplained"
    # ncu: occ 1, two waves: throughput form 100/80 - 1 = 0.25 (the point) .. waves ceil(200/80)/ceil(200/100) - 1
    assert (ncu["occupancy"], ncu["occupancy_source"], ncu["ncu_match"]) == (1, "ncu", "exact")
    assert ncu["launch_occupancy"] == 16 and ncu["ncu_ctas_per_sm"] == 1
    # ncu: occ 1, the grid of 200 CTAs no longer fits the 80 free SMs: x = min(200, 1 x 100) / (1 x 80) - 1 = 0.25
    band = _band("sm_band")
    assert ncu["sm_predicted"] == approx(0.25)
    assert ncu["explained_interval"]["sm"] == [approx(0.25 - band), approx(0.25 + band)]
    s = 0.5  # 1500 / 1000 - 1, fully overlapped (f = 1)
    assert ncu["slowdown"] == approx(s) and ncu["explained"]["sm"] == approx(0.25)
    assert ncu["residual"] == approx(0.25) and ncu["predicted_band"] == approx(band)
    # the one present cause, missing its band: named, with its error
    assert ncu["class"] == "sm" and ncu["agreement"] == "under" and "under-predicted by 25 points" in ncu["reason"]


def test_profile_without_occupancy_metrics_falls_back_to_launch(tmp_path):
    """A report collected without the Occupancy section: no CTAs per SM; the launch estimate stands, a note says why."""
    profile = dict(ctas_per_sm=None, missing=["launch__occupancy_limit_registers", "launch__occupancy_limit_warps"])
    result = attribute(_wave_store(tmp_path / "s", profile))
    [r] = [r for r in result.to_json()["kernels"] if r["name"] == "wave_W"]
    assert (r["ncu_match"], r["ncu_ctas_per_sm"]) == ("exact", None)
    assert (r["occupancy_source"], r["occupancy"]) == ("launch", 16)
    assert r["sm_predicted"] == 0
    [note] = [n for n in result.notes if "lack metrics" in n]
    assert note.startswith("Nsight Compute: 1 profiled kernel(s) lack metrics the models use "
                           "(launch__occupancy_limit_registers, launch__occupancy_limit_warps)")


def _cache_store(root: Path, co_ws_mib: int) -> Path:
    """Victim V (10 CTAs) alone 1000 ns (3x), 1300 ns (2x) beside C (10 CTAs) from 100 ns before to 100 ns after.
    Profiles: V hits L2 80% alone with a 40 MiB working set and 20% of DRAM peak; C moves 5% of DRAM peak over
    ``co_ws_mib``. L2: 50 MiB. No GPU metrics. SM: 10 CTAs fit in the 90 free SMs, so the SM model predicts 0."""
    kernels = [dict(name="victim_V", ctas=10, start_ns=s, end_ns=s + 1000) for s in (0, 2000, 4000)]
    for start in (10_000, 20_000):
        kernels += [dict(name="victim_V", ctas=10, start_ns=start, end_ns=start + 1300),
                    dict(name="corunner_C", ctas=10, start_ns=start - 100, end_ns=start + 1400)]
    make_store(root, kernels=kernels, devices=[dict(device_id=0, sm_count=S, l2_bytes=50 << 20)])
    mib = 1 << 20
    make_store(root, run_id=NCU_RUN, devices=[], ncu_kernels=[
        _profile("victim_V", 10, ctas_per_sm=16, l2_hit_rate_pct=80.0, dram_throughput_pct=20.0,
                 dram_bytes_read=30 * mib, dram_bytes_write=10 * mib),
        _profile("corunner_C", 10, ctas_per_sm=16, l2_hit_rate_pct=10.0, dram_throughput_pct=5.0,
                 dram_bytes_read=co_ws_mib * mib, dram_bytes_write=0)])
    return root


@pytest.mark.parametrize("co_ws_mib, cache", [(30, True), (5, False)])
def test_ncu_working_sets_against_l2(tmp_path, co_ws_mib, cache):
    rows = attribute(_cache_store(tmp_path / "s", co_ws_mib)).to_json()["kernels"]
    [v] = [r for r in rows if r["name"] == "victim_V"]
    mib = 1 << 20
    assert v["ncu_working_set_bytes"] == 40 * mib and v["l2_bytes"] == 50 * mib
    assert v["co_working_set_bytes"] == approx(co_ws_mib * mib)
    assert v["ncu_l2_hit_pct"] == 80 and v["ncu_dram_pct"] == 20 and v["co_dram_pct"] == approx(5)
    assert v["sm_predicted"] == 0 and v["explained"]["sm"] == 0
    assert v["explained"]["dram_bw"] == 0  # 20% + 5% is far from saturation; C moves under 10%: no queueing
    s = 0.3
    assert v["slowdown"] == approx(s) and v["significant"]
    if cache:  # 40 MiB fits alone; 40 + 30 does not fit in 50: every L2 hit misses, at the victim's full DRAM share
        # (20% + 5% of peak: it keeps all of its 20%): x = 1/(1 - 0.8) - 1 = 4
        band = _band("cache_band")
        assert v["cache_evidence"] == "ncu_working_set"
        assert v["explained_interval"]["cache"] == [approx(4.0 - band), approx(4.0 + band)]
        assert v["explained"]["cache"] == approx(4.0) and v["predicted"] == approx(4.0)
        # far more than the 0.3 observed: the present cause is named, over-predicted
        assert v["agreement"] == "over" and v["class"] == "cache" and "over-predicted by 370 points" in v["reason"]
    else:  # 40 + 5 still fits: no evidence, nothing explains the slowdown
        assert v["cache_evidence"] is None and v["explained"]["cache"] == 0
        assert v["class"] == "unexplained"
        assert v["reason"].endswith("(no GPU metrics: only the SM model and Nsight Compute demand could be applied)")


def _band(name: str) -> float:
    """A calibrated band of queries/_calibration.sql (regenerated by calibration: read, not copied)."""
    sql = (Path(__file__).resolve().parent.parent / "queries/_calibration.sql").read_text()
    return float(re.search(rf"([-0-9.e]+)::DOUBLE AS {name}\b", sql).group(1))


# -- the views' headers ---------------------------------------------------------------------------------

NCU_VIEWS = ("_ncu_demand", "_activity_dram", "_corunner_dram", "kernel_instances", "kernel_signatures",
             "kernel_attribution")


def test_view_headers_match_describe(tmp_path, contention_parquet_run):
    both = tmp_path / "both"
    shutil.copytree(contention_parquet_run, both)
    traceql.ingest(REPORT, both)
    con = traceql.connect(both)
    files = dict(query_files())
    for view in NCU_VIEWS:
        described = [(c, t) for c, t, *_ in con.sql(f'DESCRIBE "{view}"').fetchall()]
        assert header_columns(files[f"{view}.sql"]) == described, view
