"""The known-cause traces (collectors/known_cause.py, real H100 and H200): every victim row exists, every case gets
its expected class (benchmarks/validate_attribution.py holds the expectations), instance facts are exact, and
renaming every kernel that is not NCCL changes nothing."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from test_attribution_v2 import _comparable, _renamed_copy, assert_overlaps_exact

from traceql import store
from traceql.attribute import attribute

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("validate_attribution", ROOT / "benchmarks/validate_attribution.py")
validate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(validate)


@pytest.fixture(scope="module")
def grouped(known_cause_run):
    return attribute(known_cause_run, group_by_nvtx="case:*")


def _gpu(result) -> str:
    return result.runs.column("gpu_names")[0].as_py()


def test_every_case_has_its_victim_rows(grouped):
    rows = [r for r in grouped.kernels.to_pylist() if r["n_overlapped"] and (r["nvtx"] or "").startswith("case:")]
    cases = {validate._case(r["nvtx"]) for r in rows} - {None}
    # every case with a co-runner: the victim kernel, and the copies too where copies ran
    for case in cases:
        if case.endswith("_alone"):
            continue
        mine = [r for r in rows if validate._case(r["nvtx"]) == case]
        corunner = validate._labels(mine[0]["nvtx"])["corunner"]
        victims = {r["short_name"] for r in mine if r["activity"] == "kernel" and r["t0_ns"] is not None}
        assert victims - {corunner} or case.endswith(f"{corunner}_{corunner}") or corunner in victims, case
        if corunner == "copy":
            assert any(r["activity"] == "memcpy" and r["t0_ns"] is not None and r["slowdown"] > 0.5 for r in mine), \
                f"{case}: the copy is a victim row with its own slowdown"
    assert {c.split("_")[0] for c in cases} >= {"gemm", "stream", "sweep"}


def test_every_case_gets_its_expected_class(grouped):
    """Every kernel victim of SMs, DRAM bandwidth or L2 gets its class; at most one row of a trace misses (a GEMM or a
    copy beside a copy, whose DRAM stays below busy: docs/validation.md lists them), never because a model was
    stretched to fit."""
    judged = validate.case_rows(grouped, _gpu(grouped))
    assert len(judged) >= 10
    wrong = [(x["case"], x["row"]["short_name"], x["row"]["class"], x["expected"], x["row"]["reason"])
             for x in judged if not x["ok"]]
    assert len(wrong) <= 1, wrong
    assert all(x["row"]["activity"] == "memcpy" or x["expected"] == "clock|none" for x in judged if not x["ok"])
    for x in judged:
        r = x["row"]
        if x["expected"] in ("sm", "dram_bw", "cache") and r["activity"] == "kernel":
            assert r["class"] == x["expected"], (x["case"], r["reason"])
        if r["class"] in ("sm", "dram_bw", "cache", "clock", "link", "mixed"):
            assert r["significant"]
            # within the band, or the miss is said in the reason
            assert r["agreement"] == "agrees" or "predicted by" in r["reason"]
            assert r["predicted_hi"] - r["predicted"] == pytest.approx(r["predicted_band"])


def test_sm_loss_grows_with_the_sms_held(grouped):
    rows = [r for r in grouped.kernels.to_pylist() if validate._case(r["nvtx"]) == "gemm_busy_wait"
            and r["mode"] is not None]
    by_n = {int(validate._labels(r["nvtx"])["held_sms"]): r for r in rows}
    assert len(by_n) == 3
    ns = sorted(by_n)
    assert [by_n[n]["slowdown"] for n in ns] == sorted(by_n[n]["slowdown"] for n in ns)
    assert [by_n[n]["sm_predicted"] for n in ns] == sorted(by_n[n]["sm_predicted"] for n in ns)


def test_mixed_k_signature_is_split_into_its_two_gemms(grouped):
    rows = [r for r in grouped.kernels.to_pylist() if validate._case(r["nvtx"]) == "gemm_mixed_k_busy_wait"
            and r["activity"] == "kernel" and r["n_overlapped"] and r["t0_ns"] is not None]
    modes = sorted((r["mode"], r["t0_ns"]) for r in rows if r["split"] == "duration mode")
    assert [m for m, _ in modes] == [0, 1]
    assert 1.7 < modes[1][1] / modes[0][1] < 2.3  # K = 8192 against K = 4096


def test_instance_facts_exact(known_cause_run):
    assert assert_overlaps_exact(store.connect(known_cause_run)) > 300


def test_renamed_kernels_give_the_same_attribution(tmp_path, known_cause_run, grouped):
    mapping = _renamed_copy(known_cause_run, tmp_path / "renamed", seed=5)
    assert {"busy_wait", "stream_triad", "sweep_update", "sweep_relax"} <= set(mapping)
    after = attribute(tmp_path / "renamed", group_by_nvtx="case:*")
    assert _comparable(grouped) == _comparable(after)


def test_the_paper_breakdown_applies_the_attribution_class_rule(grouped):
    """traceql.paper.breakdown combines and classes factor points as kernel_attribution does: fed a row's own points
    and bands (the midpoints and half-widths of its factor intervals), it gives the row's prediction, band, parts and
    class."""
    from traceql.paper.breakdown import FACTORS, cause, combine

    names = {"sm": "sm", "dram_bw": "dram_bw", "cache": "cache", "clock": "clock", "link": "link"}
    checked = 0
    for r in grouped.kernels.to_pylist():
        if not r["significant"] or r["predicted"] is None:
            continue
        points = {f: (r[f"{names[f]}_lo"] + r[f"{names[f]}_hi"]) / 2 for f, _ in FACTORS}
        bands = {f: (r[f"{names[f]}_hi"] - r[f"{names[f]}_lo"]) / 2 for f, _ in FACTORS}
        c = combine(r["slowdown"], points, bands)
        assert c["predicted"] == pytest.approx(r["predicted"], abs=1e-9)
        assert c["band"] == pytest.approx(r["predicted_band"], abs=1e-9)
        assert c["memory"] == r["memory_explanation"]
        for f, _ in FACTORS:
            assert c["parts"][f] == pytest.approx(r[f], abs=1e-9), f
        assert cause(r["slowdown"], r["slowdown_lo"], r["slowdown_hi"], c) == (r["agreement"], r["class"])
        checked += 1
    assert checked >= 10
