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
