"""traceql's tables against NVIDIA's own recipes (``nsys recipe``, Nsight Systems 2025.3) on the same capture.

``tests/data/h200/nsys_recipes/`` holds what ``cuda_gpu_kern_sum`` and ``gpu_metric_util_sum`` wrote for
``contention.nsys-rep``; ``contention_parquetdir`` is the same capture exported to Parquet. Kernels agree exactly;
GPU metrics agree but for three differences, each checked here as what it is (``docs/scale.md`` says which side is
right): the recipe leaves out the one sample taken before the session's time zero, prints the clock metrics in Hz
under a ``[MHz]`` name (traceql converts them to MHz), and drops the `` [Throughput %]`` suffix of four metric names.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from conftest import H200

import traceql

RECIPES = H200 / "nsys_recipes"
SUFFIX = " [Throughput %]"


def rows(name: str) -> list[dict]:
    with open(RECIPES / name, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def con(contention_parquet_run: Path):
    c = traceql.connect(contention_parquet_run, views=False)
    yield c
    c.close()


def test_kernel_summary_matches_cuda_gpu_kern_sum(con):
    ours = {r[0]: r[1:] for r in con.sql("""
        SELECT short_name, count(*), sum(dur_ns)::BIGINT, min(dur_ns), max(dur_ns), median(dur_ns)
        FROM kernels GROUP BY 1""").fetchall()}
    nvidia = {r["Name"]: (int(r["Count"]), int(r["Sum"]), int(r["Min"]), int(r["Max"]), float(r["Median (approx)"]))
              for r in rows("cuda_gpu_kern_sum_all_stats.csv")}
    assert nvidia and ours == nvidia
    by_device = {(int(r["Device ID"]), r["Name"]): (int(r["Count"]), int(r["Sum"]))
                 for r in rows("cuda_gpu_kern_sum_rank_stats_by_device.csv")}
    assert by_device == {(d, n): (c, s) for d, n, c, s in con.sql(
        "SELECT device_id, short_name, count(*), sum(dur_ns)::BIGINT FROM kernels GROUP BY ALL").fetchall()}


def test_gpu_metrics_match_gpu_metric_util_sum(con):
    ours = {(d, m): (n, mean, lo, hi) for d, m, n, mean, lo, hi in con.sql("""
        SELECT device_id, metric, count(*), avg(value), min(value), max(value)
        FROM gpu_metrics WHERE ts_ns >= 0 GROUP BY ALL""").fetchall()}
    (before_zero,) = con.sql("SELECT count(DISTINCT ts_ns) FROM gpu_metrics WHERE ts_ns < 0").fetchall()[0]
    assert before_zero == 1  # the sample the recipe leaves out
    nvidia = rows("gpu_metric_util_sum_rank_stats.csv")
    assert len(nvidia) == len(ours)
    renamed = clocks = 0
    for r in nvidia:
        key = (int(r["GPU ID"]), r["Metric Name"])
        if key not in ours:  # the recipe's name without nsys' suffix
            key = (key[0], key[1] + SUFFIX)
            renamed += 1
        n, mean, lo, hi = ours[key]
        scale = 1.0
        if "Clock Frequency" in key[1]:  # the recipe keeps the export's Hz under a [MHz] name
            scale = 1e6
            clocks += 1
            assert 1_000 < hi < 3_000  # MHz: an H200 boosts to 1,980 MHz
        assert int(r["Count"]) == n
        assert float(r["Min"]) == pytest.approx(lo * scale) and float(r["Max"]) == pytest.approx(hi * scale)
        assert float(r["Mean"]) == pytest.approx(mean * scale, abs=0.051 * scale)  # the recipe rounds to 0.1
    assert renamed == 4 and clocks == 2
