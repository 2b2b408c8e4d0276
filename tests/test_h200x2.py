"""The reproduction runs collected on 2 x H200 (tests/data/h200x2, collectors/reproduction.sh), ingested.

They check the collectors as much as traceql: every microbenchmark configuration was warmed up, the NCCL CTA limits
took effect, and the three training modes do what their names say (overlapped overlaps, sequential does not,
compute communicates nothing). Plus the energy of NVTX ranges from the NVML counter, on real samples and on a
synthetic counter whose true energy is known.
"""

from __future__ import annotations

import lzma
import math
import shutil
import sqlite3
from pathlib import Path

import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import H200, raw_query
from h200x2 import DATA, runs

import traceql
from traceql.queries_loader import query_files

RUNS = ("overlap", "train_ddp", "train_ddp_repeat", "train_fsdp2")


@pytest.fixture(scope="module")
def con(h200x2_store):
    con = traceql.connect(h200x2_store)
    yield con
    con.close()


def run_id(con, name: str) -> str:
    return con.sql("SELECT run_id FROM runs WHERE labels_json->>'name' = ?", params=[name]).fetchall()[0][0]


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    """Each committed export, decompressed with Python's lzma, to hold traceql's reading against."""
    out = tmp_path_factory.mktemp("h200x2_raw")

    def get(name: str) -> Path:
        dest = out / f"{name}.sqlite"
        if not dest.exists():
            with lzma.open(DATA / f"{name}.sqlite.xz") as src, open(dest, "wb") as dst:
                shutil.copyfileobj(src, dst)
        return dest

    return get


def test_committed_runs_and_their_labels(con):
    # the store of these tests holds RUNS; the two runs of the second collection are read by the diff and paper tests
    assert set(runs()) == {*RUNS, "train_ddp_ctas2", "train_pp"}
    labels = {r[0]: r[1] for r in con.sql("SELECT labels_json->>'name', labels_json FROM runs").fetchall()}
    assert set(labels) == set(RUNS)
    cmd = {name: runs()[name]["command"] for name in RUNS}
    assert cmd["train_ddp"] == cmd["train_ddp_repeat"], "the repeated run must be the same program"
    assert all(runs()[name]["experiment"] == "reproduction" for name in RUNS)
    assert all(runs()[name]["gpus"] == "NVIDIA H200;NVIDIA H200" for name in RUNS)


@pytest.mark.parametrize("name", RUNS)
def test_ingest_matches_the_export(con, raw, name):
    db = raw(name)
    rid = run_id(con, name)
    for table, raw_table in (("kernels", "CUPTI_ACTIVITY_KIND_KERNEL"), ("runtime_api", "CUPTI_ACTIVITY_KIND_RUNTIME"),
                             ("nvtx", "NVTX_EVENTS WHERE eventType <> 75")):  # 75: domain names, not ranges
        (n,) = con.sql(f"SELECT count(*) FROM {table} WHERE run_id = ?", params=[rid]).fetchall()[0]
        assert n == raw_query(db, f"SELECT count(*) FROM {raw_table}")[0][0], table
    # GPU metrics: one row per (sample, metric) in both
    (n,) = con.sql("SELECT count(*) FROM gpu_metrics WHERE run_id = ?", params=[rid]).fetchall()[0]
    assert n == raw_query(db, "SELECT count(*) FROM GPU_METRICS")[0][0] > 100_000
    # NVML samples: every one aligned onto a GPU of the trace
    power = pq.read_table(DATA / f"{name}.power.parquet")
    (n, gpus) = con.sql("SELECT count(*), count(DISTINCT device_id) FROM power WHERE run_id = ?",
                        params=[rid]).fetchall()[0]
    assert n == power.num_rows and gpus == 2


def test_power_sampler_kept_its_period(con):
    """The committed samples come from the fixed-period sampler: 15 ms apart (the sampler that slept after its
    reads gave 25-27 ms in tests/data/h200/suite), and the energy counter steps about every 100 ms."""
    rows = con.sql("""
        WITH s AS (SELECT run_id, device_id, ts_ns - lag(ts_ns) OVER w AS gap, energy_j <> lag(energy_j) OVER w AS step,
                          ts_ns FROM power WINDOW w AS (PARTITION BY run_id, device_id ORDER BY ts_ns))
        SELECT run_id, device_id, median(gap) / 1e6, (max(ts_ns) - min(ts_ns)) / count(*) FILTER (step) / 1e6
        FROM s GROUP BY ALL""").fetchall()
    assert len(rows) == 2 * len(RUNS)
    for rid, dev, period_ms, step_ms in rows:
        assert 14.5 < period_ms < 16.5, (rid, dev, period_ms)
        assert 90 < step_ms < 110, (rid, dev, step_ms)



def test_each_instance_takes_the_nvml_sample_at_its_midpoint(con):
    """instance_facts' power_w, NVML SM clock and throttle reasons are those of the device's latest sample at or
    before the instance's midpoint (none before the first sample), checked against a binary search in numpy on
    every instance of the real runs."""
    from traceql import attribution

    attribution.prepare(con)
    facts = con.sql("""SELECT run_id, device_id, (start_ns + end_ns) // 2 AS mid, power_w, nvml_sm_clock_mhz,
                              throttle_reasons FROM instance_facts""").fetchnumpy()
    power = con.sql("SELECT run_id, device_id, ts_ns, power_w, sm_clock_mhz, throttle_reasons FROM power "
                    "ORDER BY run_id, device_id, ts_ns").fetchnumpy()
    checked = 0
    for rid, dev in {(r, int(d)) for r, d in zip(power["run_id"], power["device_id"], strict=True)}:
        mine = (facts["run_id"] == rid) & (facts["device_id"] == dev)
        theirs = (power["run_id"] == rid) & (power["device_id"] == dev)
        ts = power["ts_ns"][theirs]
        at = np.searchsorted(ts, facts["mid"][mine], side="right") - 1
        assert len(np.unique(ts)) == len(ts)  # one sample per time: "the latest" is one row
        for ours, col in (("power_w", "power_w"), ("nvml_sm_clock_mhz", "sm_clock_mhz"),
                          ("throttle_reasons", "throttle_reasons")):
            want = np.where(at >= 0, np.asarray(power[col][theirs], dtype=float)[np.maximum(at, 0)], np.nan)
            got = np.ma.filled(np.ma.asarray(facts[ours][mine], dtype=float), np.nan)
            np.testing.assert_array_equal(got, want, err_msg=f"{rid} {dev} {ours}")
        checked += int(mine.sum())
        assert (at >= 0).sum() > 1000
    assert checked > 10_000

# -- the microbenchmark ---------------------------------------------------------------------------------------

def test_microbenchmark_matrix_is_complete(con):
    rows = con.sql("SELECT dtype, op, bytes, max_ctas, mode, count(*), min(iters) FROM microbench_modes "
                   "GROUP BY ALL").fetchall()
    assert {(r[0], r[1], r[2], r[3], r[4]) for r in rows} == {
        (d, o, b, c, m) for d in ("bf16", "fp16", "tf32", "fp32", "fp8")
        for o in ("all_reduce", "all_gather", "reduce_scatter") for b in (16777216, 134217728)
        for c in ("default", "2", "8") for m in ("compute", "comm", "overlapped", "sequential")}
    assert all(r[5] == 2 and r[6] == 12 for r in rows)  # both GPUs, 12 iterations each


def test_every_configuration_is_warmed_up_before_it_is_measured(con):
    """Each thread's first case of a configuration comes right after a warm-up range with the same labels."""
    rows = con.sql("""
        WITH c AS (SELECT global_tid, start_ns, text, case_name,
                          lag(text) OVER (PARTITION BY global_tid ORDER BY start_ns) AS before
                   FROM nvtx WHERE depth = 0 AND (case_name = 'overlap' OR text LIKE 'warmup;%'))
        SELECT text, before FROM c
        WHERE case_name = 'overlap' AND text LIKE 'case:overlap;mode=compute;%'""").fetchall()
    assert len(rows) == 2 * 90
    for text, before in rows:
        config = text.split(";", 2)[2]  # after case:overlap;mode=compute
        assert before == f"warmup;{config}", text


def test_no_warmed_up_case_is_mostly_idle_and_cold_ones_are(con):
    """The idle flag separates the bundled suite's never-warmed cases (cuBLAS first use) from every warmed case."""
    busy = con.sql("SELECT min(gpu_busy_fraction), count(*) FILTER (mostly_idle) FROM microbench_modes").fetchall()[0]
    assert busy[1] == 0 and busy[0] > 0.25
    (flagged, effects) = con.sql("SELECT count(*) FILTER (mostly_idle), count(*) FROM microbench_effects").fetchall()[0]
    assert flagged == 0 and effects == 90
    old = traceql.connect(H200 / "suite")
    cold = old.sql("SELECT dtype, mode, gpu_busy_fraction FROM microbench_modes WHERE mostly_idle").fetchall()
    # the suite warmed up only its first configuration: the first compute case of the next data types absorbed
    # cuBLAS first use
    assert {(d, m) for d, m, _ in cold} == {("fp16", "compute"), ("tf32", "compute")}
    assert all(b < 0.1 for *_, b in cold)


def test_cta_limits_took_effect(con):
    """max_ctas=N: NCCL ran every collective of those cases with N CTAs (one per channel)."""
    rows = con.sql("""
        SELECT n.labels['max_ctas'], min(k.grid_x), max(k.grid_x), count(*)
        FROM kernels k JOIN runtime_api a USING (run_id, global_pid, correlation_id)
        JOIN nvtx n ON n.run_id = a.run_id AND n.global_tid = a.global_tid
                   AND a.start_ns BETWEEN n.start_ns AND n.end_ns
        WHERE k.kind = 'comm' AND n.case_name = 'overlap' GROUP BY 1""").fetchall()
    grids = {r[0]: (r[1], r[2]) for r in rows}
    assert grids["2"] == (2, 2) and grids["8"] == (8, 8)
    assert grids["default"][0] > 8


def test_fp8_cases_ran_fp8_gemms(con):
    """fp8 GEMMs (torch._scaled_mm) ran other kernels than bf16's, at close to twice the rate."""
    per_iter = dict(con.sql("SELECT dtype, median(compute_per_iter_ns) FROM microbench_modes WHERE mode = 'compute' "
                            "GROUP BY 1").fetchall())
    assert per_iter["fp8"] < 0.7 * per_iter["bf16"] < per_iter["tf32"] < per_iter["fp32"]
    kernels = dict(con.sql("""
        SELECT n.labels['dtype'], list(DISTINCT k.name) FROM kernels k
        JOIN runtime_api a USING (run_id, global_pid, correlation_id)
        JOIN nvtx n ON n.run_id = a.run_id AND n.global_tid = a.global_tid
                   AND a.start_ns BETWEEN n.start_ns AND n.end_ns
        WHERE n.case_name = 'overlap' AND n.labels['mode'] = 'compute' GROUP BY 1""").fetchall())
    assert not set(kernels["fp8"]) & set(kernels["bf16"])


# -- the training runs ----------------------------------------------------------------------------------------

MODE_TIME = """
    SELECT r.text AS mode, r.device_id,
           coalesce(sum(least(s.end_ns, r.end_ns) - greatest(s.start_ns, r.start_ns)) FILTER (s.state = 'overlap'), 0)
               AS overlap_ns,
           coalesce(sum(least(s.end_ns, r.end_ns) - greatest(s.start_ns, r.start_ns)) FILTER (s.state <> 'compute'), 0)
               AS comm_ns,
           coalesce(sum(least(s.end_ns, r.end_ns) - greatest(s.start_ns, r.start_ns)) FILTER (s.state <> 'comm'), 0)
               AS compute_ns
    FROM nvtx_device_ranges r
    LEFT JOIN timeline_segments s ON s.run_id = r.run_id AND s.device_id = r.device_id AND s.start_ns < r.end_ns
                                 AND s.end_ns > r.start_ns
    WHERE r.run_id = ? AND r.text LIKE 'mode:%' GROUP BY ALL"""


@pytest.mark.parametrize("name", ["train_ddp", "train_ddp_repeat", "train_fsdp2"])
def test_training_modes_do_what_they_say(con, name):
    rows = con.sql(MODE_TIME, params=[run_id(con, name)]).fetchall()
    assert sorted((m, d) for m, d, *_ in rows) == [(m, d) for m in ("mode:compute", "mode:overlapped",
                                                                      "mode:sequential") for d in (0, 1)]
    for mode, dev, overlap_ns, comm_ns, compute_ns in rows:
        assert compute_ns > 1e9, (mode, dev)  # three steps of a 5.8 B parameter model
        if mode == "mode:compute":
            assert comm_ns == 0, (mode, dev)
        elif mode == "mode:sequential":
            assert comm_ns > 50e6 and overlap_ns < 0.02 * comm_ns, (mode, dev, overlap_ns, comm_ns)
        else:
            assert overlap_ns > 0.5 * comm_ns, (mode, dev, overlap_ns, comm_ns)


def test_training_steps_carry_both_label_conventions(con):
    rows = con.sql("""
        SELECT r.labels_json->>'name', n.labels['parallel'], n.labels['mode'], count(*)
        FROM nvtx n JOIN runs r USING (run_id) WHERE n.case_name = 'train' GROUP BY ALL""").fetchall()
    expected = {(name, par, mode) for name, par in (("train_ddp", "ddp"), ("train_ddp_repeat", "ddp"),
                                                    ("train_fsdp2", "fsdp2"))
                for mode in ("overlapped", "sequential", "compute")}
    assert {r[:3] for r in rows} == expected
    assert all(r[3] == 6 for r in rows)  # 3 steps on each of 2 ranks
    # every step range lies inside the mode:NAME range of its thread
    (outside,) = con.sql("""
        SELECT count(*) FROM nvtx s WHERE s.case_name = 'train' AND NOT EXISTS (
            SELECT 1 FROM nvtx m WHERE m.run_id = s.run_id AND m.global_tid = s.global_tid
              AND m.text = 'mode:' || s.labels['mode'] AND m.start_ns <= s.start_ns AND m.end_ns >= s.end_ns)
        """).fetchall()[0]
    assert outside == 0


# -- energy of NVTX ranges ------------------------------------------------------------------------------------

def test_range_energy_on_the_training_modes(con):
    rows = con.sql("""
        SELECT e.text, e.dur_ns, e.counter_steps, e.energy_j, e.energy_lo_j, e.energy_hi_j, e.mean_power_w,
               (SELECT max(power_limit_w) FROM power p WHERE p.run_id = e.run_id) AS limit_w
        FROM range_energy e WHERE e.text LIKE 'mode:%'""").fetchall()
    assert len(rows) == 3 * 3 * 2
    for text, dur_ns, steps, energy, lo, hi, watts, limit_w in rows:
        assert 0 < lo <= energy <= hi, text
        assert steps >= math.floor(dur_ns / 100e6) - 2  # about one counter step per 100 ms
        assert 0.3 * limit_w < watts < 1.05 * limit_w, (text, watts)


def _range_energy(power_rows, ranges) -> list[tuple]:
    """range_energy's SQL over a synthetic power table and synthetic ranges (one GPU)."""
    con = duckdb.connect()
    con.execute("CREATE TABLE power (run_id VARCHAR, device_id INTEGER, ts_ns BIGINT, energy_j DOUBLE)")
    con.executemany("INSERT INTO power VALUES ('r', 0, ?, ?)", power_rows)
    con.execute("""CREATE TABLE nvtx_device_ranges (run_id VARCHAR, device_id INTEGER, global_pid BIGINT,
                   global_tid BIGINT, depth INTEGER, text VARCHAR, case_name VARCHAR, start_ns BIGINT, end_ns BIGINT,
                   dur_ns BIGINT)""")
    con.executemany("INSERT INTO nvtx_device_ranges VALUES ('r', 0, 1, 1, 0, ?, NULL, ?, ?, ?)",
                    [(f"r{i}", a, b, b - a) for i, (a, b) in enumerate(ranges)])
    sql = dict(query_files())["range_energy.sql"]
    return con.sql(f"SELECT start_ns, end_ns, energy_j, energy_lo_j, energy_hi_j FROM ({sql}) ORDER BY text").fetchall()


def _counter(power_w: np.ndarray, dt_ns: int, step_ns: int, sample_ns: int, phase_ns: int):
    """A GPU whose counter adds the energy of each step_ns at once, read every sample_ns: (samples, true energy)."""
    cum = np.concatenate([[0.0], np.cumsum(power_w) * dt_ns / 1e9])  # true energy at k * dt_ns

    def true_energy(t_ns):
        return np.interp(t_ns, np.arange(len(cum)) * dt_ns, cum)

    end = (len(power_w)) * dt_ns
    stamps = np.arange(phase_ns, end, sample_ns)
    counter = true_energy((stamps // step_ns) * step_ns)  # the value of the last step before each sample
    return list(zip(stamps.tolist(), counter.tolist(), strict=True)), true_energy


def test_range_energy_brackets_the_true_energy():
    """A counter that steps every 100 ms, sampled every 15 ms, under a power that changes every 10 ms: the bounds
    hold the true energy of every range, short or long, and the estimate is close for ranges of several steps."""
    rng = np.random.default_rng(7)
    dt = 1_000_000  # power changes every 1 ms, in blocks of 10 ms
    power = np.repeat(rng.uniform(100, 700, 600), 10)  # 6 s
    samples, true_energy = _counter(power, dt, 100_000_000, 15_000_000, 3_000_000)
    ranges = []
    for _ in range(300):
        a = int(rng.uniform(0.3e9, 5.0e9))
        ranges.append((a, a + int(rng.choice([2e6, 15e6, 80e6, 300e6, 900e6]))))
    rows = _range_energy(samples, ranges)
    assert len(rows) == len(ranges)
    for a, b, energy, lo, hi in rows:
        truth = float(true_energy(b) - true_energy(a))
        assert lo - 1e-9 <= truth <= hi + 1e-9, (a, b, lo, truth, hi)
        if b - a >= 900e6:
            assert abs(energy - truth) < 0.08 * truth, (a, b, energy, truth)


def test_range_energy_outside_the_samples_is_null():
    samples = [(t, t / 1e9 * 500.0) for t in range(0, 2_000_000_000, 15_000_000)]
    samples = [(t, 50.0 * (t // 100_000_000)) for t, _ in samples]  # steps of 50 J every 100 ms: 500 W
    rows = _range_energy(samples, [(3_000_000_000, 3_100_000_000), (500_000_000, 1_500_000_000)])
    inside = next(r for r in rows if r[0] == 500_000_000)
    outside = next(r for r in rows if r[0] == 3_000_000_000)
    assert outside[2:] == (None, None, None)
    assert inside[2] == pytest.approx(500.0, rel=0.02) and inside[3] <= 500.0 <= inside[4]


def test_trim_keeps_every_remaining_row(tmp_path, raw):
    """collectors/trim_export.py: emptied tables and every other GPU metrics sample are gone, all else is equal."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "collectors"))
    from trim_export import trim

    src = raw("train_fsdp2")
    dest = tmp_path / "t.sqlite"
    deleted = trim(src, dest, ["CUPTI_ACTIVITY_KIND_MEMSET"], metrics_every=2)
    before = raw_query(src, "SELECT count(DISTINCT timestamp), count(*) FROM GPU_METRICS")[0]
    after = raw_query(dest, "SELECT count(DISTINCT timestamp), count(*) FROM GPU_METRICS")[0]
    assert deleted["GPU_METRICS"] == before[1] - after[1] and after[1] * 2 == pytest.approx(before[1], rel=0.01)
    assert raw_query(dest, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET")[0][0] == 0
    kept = sqlite3.connect(dest).execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()[0][0]
    assert kept == raw_query(src, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
