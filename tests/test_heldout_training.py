"""Held-out training traces (tests/data/h200x2_heldout: 2 x H200, another model shape than every other trace). The
expectations were written in tests/data/h200x2_heldout/README.md before the traces were collected; each test below is
one of them, as written."""

from __future__ import annotations

from pathlib import Path

import pytest
from h200x2 import build_store

from traceql.attribute import attribute

DATA = Path(__file__).parent / "data" / "h200x2_heldout"
CORUNNER_NCU = Path(__file__).parent / "data" / "h200_corunner_ncu" / "busy_wait.ncu-rep.xz"


def _verdicts(doc: dict) -> dict[int, dict]:
    return {v["device_id"]: v for v in doc["verdicts"]}


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("heldout")
    straggler = build_store(tmp / "straggler", ["train_ddp_straggler"], data=DATA)
    ddp = build_store(tmp / "ddp", ["train_ddp"], data=DATA)
    fsdp2 = build_store(tmp / "fsdp2", ["train_fsdp2"], data=DATA)
    return {"alone": attribute(straggler, group_by_nvtx="case:train*").to_json(),
            "against": attribute(straggler, group_by_nvtx="case:train*", baseline=ddp).to_json(),
            "ncu": attribute(straggler, group_by_nvtx="case:train*", baseline=ddp, ncu=[CORUNNER_NCU]).to_json(),
            "fsdp2": attribute(fsdp2, group_by_nvtx="case:train*").to_json()}


def test_1_the_straggler_run_alone_answers_little(docs):
    assert all(v["coverage_compute"] < 0.6 for v in docs["alone"]["verdicts"])


def test_2_against_a_baseline_run_the_rank_without_a_co_runner_is_answered(docs):
    v = _verdicts(docs["against"])
    assert v[1]["coverage_compute"] >= 0.85 and v[0]["coverage_comm"] >= 0.8
    assert v[0]["coverage_compute"] < 0.9  # the co-runner's own kernels ran alone nowhere


@pytest.mark.xfail(strict=True, reason="expectation 2 missed as collected: device 1 answers 69% of its communication "
                   "time; its all-reduces ran 12-18% slower beside the backward pass with no factor predicting it "
                   "(tests/data/h200x2_heldout/README.md)")
def test_2_against_a_baseline_run_the_other_ranks_communication_is_answered(docs):
    assert _verdicts(docs["against"])[1]["coverage_comm"] >= 0.8


def test_3_the_slow_ranks_loss_is_sms_taken(docs):
    lost = _verdicts(docs["against"])[0]["lost_by_cause_ms"]
    assert max(lost, key=lost.get) == "sm"


def test_4_fsdp2_is_answered_and_nothing_is_conflated(docs):
    doc = docs["fsdp2"]
    for dev, v in _verdicts(doc).items():
        assert v["coverage_compute"] >= 0.85 and v["coverage_comm"] >= 0.8
        rows = [k for k in doc["kernels"] if k["device_id"] == dev and k["kind"] == "compute" and k["n_overlapped"]
                and k["nvtx"] is None]
        total = sum(k["sum_t1_ns"] or 0 for k in rows)
        assert sum(k["sum_t1_ns"] or 0 for k in rows if k["conflated"]) <= 0.05 * total


# tests/data/h200_corunner_ncu/README.md (written before that profile was collected): an Nsight Compute profile of the
# co-runner, given beside the baseline run, answers the co-runner and changes no other row's class.
@pytest.mark.xfail(strict=True, reason="expectation missed as collected: one row (cunn_SoftMaxBackward, step 1, "
                   "device 0) goes from sm to unexplained: with every co-runner's demand known, the DRAM measured "
                   "beyond it opens the cache model's extra-traffic witness, which predicts the whole calibrated loss "
                   "(tests/data/h200_corunner_ncu/README.md)")
def test_a_profile_of_the_co_runner_answers_it_and_nothing_else_changes(docs):
    def key(k):
        return k["device_id"], k["nvtx"], k["name"], k["mode"], k["split"]

    before = {key(k): k for k in docs["against"]["kernels"]}
    after = {key(k): k for k in docs["ncu"]["kernels"]}
    assert before.keys() == after.keys()
    spins = [k for k in after.values() if k["short_name"] == "busy_wait"]
    assert len(spins) == 2 and all(k["baseline"] == "ncu" and abs(k["slowdown"]) < 0.02 for k in spins)
    assert all(before[key(k)]["t0_ns"] is None and k["class"] != "unexplained" for k in spins)
    changed = [k for k in after if after[k]["class"] != before[k]["class"] and after[k]["short_name"] != "busy_wait"]
    assert not changed
    assert _verdicts(docs["ncu"])[0]["coverage_compute"] >= 0.9
