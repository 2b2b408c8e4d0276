"""A known slow rank (tests/data/h200x2_training: DDP on 2 x H200, rank 0 slowed in steps 1 and 3 by a co-runner
holding 60% of its SMs for 300 ms; collectors/reproduction.sh step straggler). The expected answers were written in
tests/data/h200x2_training/EXPECTED.md before the trace was collected; each test below is one of them."""

from __future__ import annotations

from pathlib import Path

import pytest
from h200x2 import build_store

from traceql.attribute import attribute

DATA = Path(__file__).parent / "data" / "h200x2_training"
SLOW, CLEAN = {1, 3}, {0, 2, 4, 5}


@pytest.fixture(scope="module")
def straggler(tmp_path_factory):
    store = build_store(tmp_path_factory.mktemp("straggler") / "run", data=DATA)
    doc = attribute(store, group_by_nvtx="case:train*").to_json()
    steps = {}
    for w in doc["waits"]:
        if w["nvtx"] is not None:
            labels = dict(kv.split("=", 1) for kv in w["nvtx"].split(";")[1:])
            assert labels["slow"] == str(int(int(labels["step"]) in SLOW))  # the labels say which steps were slowed
            steps[(w["device_id"], int(labels["step"]))] = w
    return doc, steps


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
    store = build_store(tmp_path_factory.mktemp("straggler4") / "run", ["train_ddp_straggler"], data=DATA4)
    doc = attribute(store, group_by_nvtx="case:train*").to_json()
    steps = {}
    for w in doc["waits"]:
        if w["nvtx"] is not None:
            labels = dict(kv.split("=", 1) for kv in w["nvtx"].split(";")[1:])
            assert labels["slow"] == str(int(int(labels["step"]) in SLOW))
            steps[(w["device_id"], int(labels["step"]))] = w
    return doc, steps


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
