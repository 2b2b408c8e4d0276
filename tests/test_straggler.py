"""A known slow rank (tests/data/h200x2_training: DDP on 2 x H200, rank 0 slowed in steps 1 and 3 by a co-runner
holding 60% of its SMs for 300 ms; collectors/reproduction.sh step straggler). The expected answers were written in
tests/data/h200x2_training/EXPECTED.md before the trace was collected; each test below is one of them."""

from __future__ import annotations

from pathlib import Path

import pytest
from h200x2 import build_store, by_step

DATA = Path(__file__).parent / "data" / "h200x2_training"
SLOW, CLEAN = {1, 3}, {0, 2, 4, 5}


@pytest.fixture(scope="module")
def straggler(tmp_path_factory):
    return by_step(tmp_path_factory.mktemp("straggler") / "run", DATA, "waits", SLOW)


def test_the_other_rank_waited_for_the_slow_one_in_the_slowed_steps(straggler):
    _, steps = straggler
    for s in SLOW:
        assert steps[(1, s)]["late_device_id"] == 0 and steps[(1, s)]["late_share"] >= 0.5


def test_its_wait_is_longest_in_the_slowed_steps(straggler):
    _, steps = straggler
    assert min(steps[(1, s)]["wait_ms"] for s in SLOW) > max(steps[(1, s)]["wait_ms"] for s in CLEAN)


def test_the_slow_rank_waits_less_than_the_other(straggler):
    _, steps = straggler
    assert all(steps[(0, s)]["wait_ms"] < steps[(1, s)]["wait_ms"] for s in SLOW)


def test_the_verdicts_name_the_cause_and_the_wait(straggler):
    doc, _ = straggler
    v = {x["device_id"]: x for x in doc["verdicts"]}
    lost = v[0]["lost_by_cause_ms"]
    assert max(lost, key=lost.get) == "sm"
    assert "was waiting for device 0 to arrive, which was late" in v[1]["text"]
    assert "most of it to SMs taken" in v[1]["text"]


def test_transfers_agree_across_the_ranks(straggler):
    _, steps = straggler
    for s in SLOW | CLEAN:
        assert steps[(0, s)]["transfer_ms"] == pytest.approx(steps[(1, s)]["transfer_ms"], rel=0.05)


# On 4 x H200 (tests/data/h200x4, the same command with 4 ranks: rank 2 slowed), the expectations of the first part of
# tests/data/h200x2_training/EXPECTED.md, written before that trace was collected.
DATA4, SLOW_DEVICE, OTHERS = Path(__file__).parent / "data" / "h200x4", 2, (0, 1, 3)


@pytest.fixture(scope="module")
def straggler4(tmp_path_factory):
    return by_step(tmp_path_factory.mktemp("straggler4") / "run", DATA4, "waits", SLOW, ["train_ddp_straggler"])


def test_four_ranks_the_others_waited_for_the_slow_one(straggler4):
    _, steps = straggler4
    for d in OTHERS:
        for s in SLOW:
            assert steps[(d, s)]["late_device_id"] == SLOW_DEVICE and steps[(d, s)]["late_share"] >= 0.5, (d, s)


def test_four_ranks_their_wait_is_longest_in_the_slowed_steps(straggler4):
    _, steps = straggler4
    for d in OTHERS:
        assert min(steps[(d, s)]["wait_ms"] for s in SLOW) > max(steps[(d, s)]["wait_ms"] for s in CLEAN), d


@pytest.mark.xfail(strict=True, reason="expectation 3 missed on 4 ranks, in both collections: device 2 also arrives "
                   "last in clean steps (in step 0, before any co-runner, too; 1473 ms of the others' waits in clean "
                   "steps were for it, 187 ms for device 1), though every step starts on all ranks together. Kept as "
                   "written (tests/data/h200x4/README.md)")
def test_four_ranks_the_slow_one_is_not_the_most_waited_for_otherwise(straggler4):
    _, steps = straggler4
    waited: dict[int, float] = {}
    for d in OTHERS:
        for s in CLEAN:
            w = steps[(d, s)]
            if w["late_device_id"] is not None:
                waited[w["late_device_id"]] = waited.get(w["late_device_id"], 0.0) + w["wait_ms"]
    assert not waited or max(waited, key=waited.get) != SLOW_DEVICE, waited


def test_four_ranks_the_verdicts_name_the_cause_and_the_wait(straggler4):
    doc, _ = straggler4
    v = {x["device_id"]: x for x in doc["verdicts"]}
    lost = v[SLOW_DEVICE]["lost_by_cause_ms"]
    assert max(lost, key=lost.get) == "sm"
    for d in OTHERS:
        assert f"was waiting for device {SLOW_DEVICE} to arrive, which was late" in v[d]["text"], d


def test_four_ranks_transfers_agree(straggler4):
    _, steps = straggler4
    for s in SLOW | CLEAN:
        ms = [steps[(d, s)]["transfer_ms"] for d in range(4)]
        assert max(ms) <= 1.05 * min(ms), (s, ms)


def test_four_ranks_exposed_wait_is_the_wait_no_compute_hid(tmp_path):
    """collective_waits' exposed_wait_ns against a brute-force reading: each wait interval (the rank's arrival to the
    last arrival) minus its overlap with the union of the device's non-communication kernels. Then, as a regression
    check written after the figures were seen (not one of EXPECTED.md's expectations): the others' exposed wait in the
    slowed steps (97-108 ms) is many times that of the clean steps (at most 13 ms)."""
    import bisect
    from collections import defaultdict

    from conftest import intervals_intersection, merged_intervals

    from traceql import attribution, store

    con = store.connect(build_store(tmp_path / "run", ["train_ddp_straggler"], data=DATA4))
    attribution.group_by_nvtx(con, "case:train*")
    attribution.prepare(con)
    compute = defaultdict(list)
    for dev, start, end in con.sql("SELECT device_id, start_ns, end_ns FROM kernels WHERE kind <> 'comm' "
                                   "AND end_ns > start_ns").fetchall():
        compute[dev].append((start, end))
    unions = {dev: merged_intervals(iv) for dev, iv in compute.items()}
    starts = {dev: [s for s, _ in u] for dev, u in unions.items()}

    def hidden(dev: int, a: int, b: int) -> int:
        """How long the device's compute union covers [a, b): over the pieces that can reach it."""
        u, st = unions.get(dev, []), starts.get(dev, [])
        return intervals_intersection(u[max(0, bisect.bisect_right(st, a) - 1):bisect.bisect_left(st, b)], [(a, b)])

    rows = con.sql("SELECT device_id, start_ns, wait_ns, exposed_wait_ns, nvtx FROM collective_waits").fetchall()
    assert rows and sum(w for _, _, w, _, _ in rows) > 0
    for dev, start, wait, exposed, _ in rows:
        assert exposed == wait - hidden(dev, start, start + wait), (dev, start)
    exposed_by_step: dict[tuple[int, int], float] = defaultdict(float)
    for dev, _, _, exposed, nvtx in rows:
        if nvtx is not None and dev in OTHERS:
            step = int(dict(kv.split("=", 1) for kv in nvtx.split(";")[1:])["step"])
            exposed_by_step[(dev, step)] += exposed
    for d in OTHERS:
        assert min(exposed_by_step[(d, s)] for s in SLOW) > 5 * max(exposed_by_step[(d, s)] for s in CLEAN), d
    con.close()


# Against a baseline run (tests/data/h200x4/README.md, written before this was analysed): the straggler run has no
# kernel alone, so alone most of its time has no answer; given the clean DDP run of the same program as --baseline,
# its mixed GEMM signatures are split by the launch contexts of the baseline run's isolated instances.
def test_a_baseline_run_answers_the_straggler_run(tmp_path):
    from traceql.attribute import attribute

    run = build_store(tmp_path / "run", data=DATA)
    base = build_store(tmp_path / "base", ["train_ddp"], data=Path(__file__).parent / "data" / "h200x2")
    doc = attribute(run, group_by_nvtx="case:train*", baseline=base).to_json()
    v = {x["device_id"]: x for x in doc["verdicts"]}
    alone = {x["device_id"]: x for x in attribute(run, group_by_nvtx="case:train*").to_json()["verdicts"]}
    assert alone[1]["coverage_compute"] < 0.5 and alone[1]["coverage_comm"] < 0.1  # what it answers alone
    assert v[1]["coverage_compute"] >= 0.85 and all(v[d]["coverage_comm"] >= 0.8 for d in (0, 1))
    overlapped = [k for k in doc["kernels"] if k["n_overlapped"] and k["kind"] == "compute" and k["nvtx"] is None]
    assert not any(k["conflated"] for k in overlapped)
    assert {k["baseline"] for k in overlapped if k["t0_ns"] is not None} == {"baseline run"}
    assert any(k["split"] == "duration mode" for k in overlapped)  # mixtures there, split by context
    lost = v[0]["lost_by_cause_ms"]
    assert max(lost, key=lost.get) == "sm"
    assert v[1]["wait_ms"] == alone[1]["wait_ms"]  # waits read no baseline


# The co-runner that makes the rank slow (spin_hold) runs alone nowhere: neither in the straggler run nor in the
# baseline run, which never launches it. An Nsight Compute profile of it (tests/data/h200_corunner_ncu, its README's
# expectations written before the collection) gives its isolated duration; every other signature keeps the baseline
# run's, and the co-runner's 600 ms on the slowed device are answered: a timer-bound spin, not slowed.
def test_nsight_compute_answers_what_the_baseline_run_never_ran(tmp_path):
    from traceql.attribute import attribute

    run = build_store(tmp_path / "run", data=DATA)
    base = build_store(tmp_path / "base", ["train_ddp"], data=Path(__file__).parent / "data" / "h200x2")
    ncu = Path(__file__).parent / "data" / "h200_corunner_ncu" / "spin_hold.ncu-rep.xz"
    doc = attribute(run, group_by_nvtx="case:train*", baseline=base, ncu=[ncu]).to_json()
    spins = [k for k in doc["kernels"] if k["short_name"] == "spin_hold"]
    assert len(spins) == 2 and {k["device_id"] for k in spins} == {0}
    for k in spins:
        assert k["baseline"] == "ncu" and k["t0_ns"] == pytest.approx(300e6, rel=0.02)
        assert abs(k["slowdown"]) < 0.02 and k["class"] != "unexplained"
    others = [k for k in doc["kernels"] if k["n_overlapped"] and k["kind"] == "compute" and k["t0_ns"] is not None
              and k["short_name"] != "spin_hold"]
    assert others and {k["baseline"] for k in others} == {"baseline run"}
    v = {x["device_id"]: x for x in doc["verdicts"]}
    assert v[0]["coverage_compute"] >= 0.9
