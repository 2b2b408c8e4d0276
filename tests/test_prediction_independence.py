"""A prediction never uses what it predicts: change the overlapped victims' durations, and every prediction stays.

Each test attributes a store, then the same store with the durations of the overlapped instances changed (kept inside
their co-runners, so the overlap fraction stays 1), and compares. The observed slowdowns move; no factor's prediction,
band or total may move with them.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import without_digests
from synthetic import make_store, samples

from traceql.attribute import attribute

PREDICTIONS = ("sm_lo", "sm_hi", "dram_bw_lo", "dram_bw_hi", "cache_lo", "cache_hi", "clock_lo", "clock_hi",
               "link_lo", "link_hi", "sm_predicted")
READ, CLOCK = "DRAM Read Bandwidth [Throughput %]", "GPC Clock Frequency [MHz]"
S = 100


def _rows(result, name: str | None = None) -> dict:
    """Overlapped rows (of the activity ``name`` only: the victims whose durations a test changes)."""
    return {(r["name"], r["nvtx"], r["mode"]): r for r in result.kernels.to_pylist()
            if r["n_overlapped"] and name in (None, r["name"])}


def _store(path: Path, scale: list[float]) -> Path:
    """Victims alone (1000 ns), then fully inside co-runners: a comm kernel holding 40 SMs, and a bandwidth-hungry
    kernel whose isolated DRAM rate is known; the overlapped victims last 1000 ns x ``scale``."""
    one = dict(block_x=1024, dynamic_smem_bytes=200_000)
    kernels, metrics = [], []
    for i in range(8):  # alone: victim, then the co-runner kernel, each with its own DRAM rate
        kernels.append(dict(name="victim", start_ns=i * 3000, end_ns=i * 3000 + 1000, ctas=200, **one))
        kernels.append(dict(name="hungry", start_ns=i * 3000 + 1500, end_ns=i * 3000 + 2500, ctas=30, **one))
        metrics += samples(READ, i * 3000, i * 3000 + 1000, 60, period_ns=50)
        metrics += samples(READ, i * 3000 + 1500, i * 3000 + 2500, 55, period_ns=50)
        metrics += samples(CLOCK, i * 3000, i * 3000 + 2500, 1980, period_ns=50)
    t = 100_000
    for k in scale:
        dur = int(1000 * k)
        kernels.append(dict(name="victim", start_ns=t, end_ns=t + dur, ctas=200, **one))
        kernels.append(dict(kind="comm", ctas=40, start_ns=t - 100, end_ns=t + 2000))
        kernels.append(dict(name="hungry", start_ns=t - 100, end_ns=t + 2000, ctas=30, **one))
        # the device as it was: the witnesses' samples do not follow the victim's duration
        metrics += samples(READ, t - 100, t + 2000, 95, period_ns=50)
        metrics += samples(CLOCK, t - 100, t + 2000, 1800, period_ns=50)
        t += 5000
    return make_store(path, kernels=kernels, gpu_metrics=metrics, devices=[dict(device_id=0, sm_count=S)])


def _compare(before: dict, after: dict) -> int:
    """Every prediction of every overlapped row equal; returns how many rows changed their observation."""
    assert before.keys() == after.keys()
    moved = 0
    for key, a in before.items():
        b = after[key]
        for col in PREDICTIONS:
            assert a[col] == pytest.approx(b[col], rel=1e-12, abs=1e-12), (key, col)
        if a["memory_explanation"] == b["memory_explanation"]:  # two fixed alternatives; the class picks one
            for col in ("predicted", "predicted_lo", "predicted_hi", "predicted_band"):
                assert a[col] == pytest.approx(b[col], rel=1e-12, abs=1e-12), (key, col)
        moved += a["slowdown"] is not None and b["slowdown"] is not None and abs(a["slowdown"] - b["slowdown"]) > 0.05
    return moved


def test_synthetic_predictions_ignore_the_overlapped_durations(tmp_path):
    rng = random.Random(35)
    plain = attribute(_store(tmp_path / "a", [1.5] * 8))
    changed = attribute(_store(tmp_path / "b", [rng.uniform(1.0, 1.9) for _ in range(8)]))
    shorter = attribute(_store(tmp_path / "c", [1.2] * 8))
    # the co-runners' own rows change: how long the victims overlap them is theirs to see
    before = _rows(plain, "victim")
    victim = before[("victim", None, None)]
    # the factors under test are there: SMs taken, DRAM shared, lost reuse, a lower clock
    assert victim["sm_hi"] > 0 and victim["dram_bw_hi"] > 0 and victim["cache_hi"] > 0 and victim["clock_hi"] > 0
    assert _compare(before, _rows(changed, "victim")) >= 1
    assert _compare(before, _rows(shorter, "victim")) >= 1


def _shortened_copy(src: Path, dst: Path, factor: float) -> int:
    """A copy of the run store at ``src`` whose kernels that run entirely inside another, longer activity on the same
    device (the victims of the known-cause cases) end ``factor`` of their duration after they start.

    The GPU-metric samples taken in the time a shortened kernel no longer covers are dropped: they measured that
    kernel running, and in the changed trace nothing says what ran there instead (a sampler gap). Left in, they would
    be a measurement of whatever the changed trace shows alone there (its co-runner), made while the victim ran: a
    world that no GPU gives. Every other sample stays as measured."""
    shutil.copytree(src, dst)
    n = 0
    for path in sorted(dst.glob("runs/*/kernels.parquet")):
        t = pq.read_table(path)
        start = t.column("start_ns").to_numpy()
        end = t.column("end_ns").to_numpy()
        dev = t.column("device_id").to_numpy()
        order = sorted(range(len(start)), key=lambda i: (dev[i], start[i]))
        new_end = end.copy()
        longest = {}  # per device: the latest end of the activities started so far
        freed = []  # (device, new end, old end) of each shortened kernel
        for i in order:
            cover = longest.get(dev[i], -1)
            if cover >= end[i]:
                new_end[i] = start[i] + int((end[i] - start[i]) * factor)
                freed.append((dev[i], new_end[i], end[i]))
                n += 1
            longest[dev[i]] = max(cover, end[i])
        t = t.set_column(t.schema.get_field_index("end_ns"), "end_ns", pa.array(new_end, pa.int64()))
        t = t.set_column(t.schema.get_field_index("dur_ns"), "dur_ns", pc.subtract(t["end_ns"], t["start_ns"]))
        pq.write_table(t, path, compression="zstd")
        metrics = path.with_name("gpu_metrics.parquet")
        if freed and metrics.exists():
            m = pq.read_table(metrics)
            ts, mdev = m.column("ts_ns").to_numpy(), m.column("device_id").to_numpy()
            keep = np.ones(len(ts), dtype=bool)
            for d, lo, hi in freed:
                keep &= ~((mdev == d) & (ts > lo) & (ts < hi))
            pq.write_table(m.filter(pa.array(keep)), metrics, compression="zstd")
    without_digests(dst)  # files rewritten on purpose: the store is read by sizes and footers, as one written before
    return n


@pytest.mark.parametrize("factor", [0.8, 0.6])
def test_real_predictions_ignore_the_overlapped_durations(known_cause_run, tmp_path, factor):
    """The known-cause trace with its covered victims shortened by 20% or 40% (lengthened, a victim would run into
    the next launch on its stream)."""
    before = _rows(attribute(known_cause_run, group_by_nvtx="case:*"))
    copy = tmp_path / "shortened"
    assert _shortened_copy(Path(known_cause_run), copy, factor) > 50
    after = _rows(attribute(copy, group_by_nvtx="case:*"))
    # twins are each other's co-runner: the demand one brings the other changes with its own duration
    judged = {k: v for k, v in before.items() if (k[1] or "").startswith("case:") and v["t0_ns"] is not None
              and f"corunner={v['short_name']};" not in k[1]}
    assert len(judged) >= 10
    # the clock is read over the instance's own window, so it may move a little with it: everything else may not
    cols = [c for c in PREDICTIONS if not c.startswith("clock")]
    for key, a in judged.items():
        b = after[key]
        for col in cols:
            assert a[col] == pytest.approx(b[col], rel=1e-9, abs=1e-9), (key, col)
    moved = sum(abs(a["slowdown"] - after[k]["slowdown"]) > 0.05 for k, a in judged.items() if a["slowdown"])
    assert moved >= 5
