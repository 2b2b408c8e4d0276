"""Kernels held back from starting (activity_delays, the JSON's ``delays``), on a real two-GPU trace recorded with CUDA
event tracing (tests/data/h100x2_held/README.md), and on one recorded without it (a DDP training run, nsys 2025.3
under traceql collect before it asked for event tracing: its event tables are empty).

Expected before the trace was analysed (collectors/eval_held.py): on rank 0 (device 0), each of the 20 all-reduces of
``case:allreduce_held_back`` launched right after ``hold_spin`` took every SM for 20 ms (an NCCL CTA cannot be placed
beside a ``hold_spin`` CTA), with nothing it depended on pending: 20 delays of a little under 20 ms (the spin began
before the all-reduce's launch returned), cause ``sms_held``, held by ``hold_spin``. On rank 1 (device 1), none: its
all-reduces start at once and wait inside the kernel for rank 0 (a wait for another rank, in ``waits``). The
all-reduces of ``case:allreduce_alone`` are held back nowhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from traceql.attribute import attribute

DATA = Path(__file__).parent / "data"
HELD = DATA / "h100x2_held" / "held_back.sqlite.xz"


@pytest.fixture(scope="module")
def held(tmp_path_factory):
    return attribute(HELD, group_by_nvtx="case:*", workdir=tmp_path_factory.mktemp("held")).to_json()


def test_the_held_back_allreduces_are_found_and_nothing_else(held):
    rows = held["delays"]
    assert {r["device_id"] for r in rows} == {0}
    assert all(r["nvtx"].startswith("case:allreduce_held_back;") for r in rows)
    assert all(r["name"].startswith("ncclDevKernel_AllReduce") and r["activity"] == "kernel" for r in rows)
    assert sum(r["n"] for r in rows) == 20
    assert all((r["cause"], r["held_by"]) == ("sms_held", "hold_spin") for r in rows)
    per_launch = [r["delay_ms"] / r["n"] for r in rows]
    assert all(18.0 < d <= 20.0 for d in per_launch), per_launch


def test_the_verdict_says_it_and_the_waiting_rank_waits(held):
    by_device = {v["device_id"]: v for v in held["verdicts"]}
    v0, v1 = by_device[0], by_device[1]
    assert v0["held_back_n"] == 20 and v0["held_back_by"] == "hold_spin"
    assert v0["held_back_ms"] == pytest.approx(sum(r["delay_ms"] for r in held["delays"]))
    assert "20 kernel launches were held back from starting" in v0["text"] and "until hold_spin released" in v0["text"]
    # rank 1 is not held back: it waits inside its all-reduces for rank 0, which the waits say
    assert v1["held_back_ms"] is None and "held back" not in v1["text"]
    assert v1["late_device_id"] == 0 and v1["wait_ms"] > 20 * 18.0
    assert not any("without CUDA event tracing" in n for n in held["notes"])


def test_without_event_tracing_no_delay_is_claimed_and_a_note_says_why(tmp_path):
    doc = attribute(DATA / "h200x2" / "train_ddp.sqlite.xz", group_by_nvtx="case:train*", workdir=tmp_path).to_json()
    assert doc["delays"] == []
    [note] = [n for n in doc["notes"] if "without CUDA event tracing" in n]
    assert "--cuda-event-trace=true" in note
    assert all(v["held_back_ms"] is None for v in doc["verdicts"])


def test_allreduces_queued_behind_gemms_are_held_by_them(tmp_path):
    """Found after the rule was written (not an expectation fixed before): in ``allreduce_then_gemm`` of a two-GPU
    evaluation trace, whose nsys (2025.3, its default ``--cuda-event-trace=auto``) recorded the event waits, each
    all-reduce queued behind back-to-back cuBLAS GEMMs starts about 0.6 ms after the one before it ended, while the
    GEMMs' CTAs (more than half an SM each, like NCCL's) hold every SM: ``sms_held``, by the GEMM, on both ranks."""
    doc = attribute(DATA / "eval" / "h100x2" / "eval_comm_3.sqlite.xz", group_by_nvtx="case:*",
                    workdir=tmp_path).to_json()
    rows = doc["delays"]
    assert {r["device_id"] for r in rows} == {0, 1}
    assert all(r["nvtx"].startswith("case:allreduce_then_gemm;") and r["cause"] == "sms_held"
               and r["held_by"].startswith("nvjet_") for r in rows)
    assert all(0.3 < r["delay_ms"] / r["n"] < 1.0 for r in rows)
