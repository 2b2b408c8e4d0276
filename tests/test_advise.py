"""traceql advise: the schedule model's arithmetic on exact cases, the recommendation rule, the command on a real
overlap sweep (2 x H200), bad input, and docs/advise.md regenerated from the committed sweeps."""

from __future__ import annotations

import difflib
import importlib.util
import json

import pytest
from conftest import DATA, REPO, run_cli

from traceql.advise import Region, comm_at, predict, recommend, sm_loss

SWEEP = DATA / "h200x2" / "overlap.sqlite.xz"


def region(**kw) -> Region:
    base = dict(key={"op": "all_reduce"}, compute_ns=1000.0, comm_ns=400.0, comm_sms=24.0, overlapped_ns=1200.0,
                compute_slowdown=0.0, covered=0.0, x=0.0, y=0.0, hidden_ns=0.0, sm_count=132)
    return Region(**(base | kw))


def by_schedule(preds):
    return {(p["schedule"], p["max_ctas"]): p for p in preds}


def test_nothing_hidden_nothing_slowed_sequential_is_the_traced_time():
    # the collective ran exposed and nothing was slowed: sequential changes nothing
    p = by_schedule(predict(region(), [8], alpha=1.0))
    assert p[("traced", None)]["predicted_ns"] == 1200.0
    assert p[("sequential", None)]["predicted_ns"] == pytest.approx(1200.0)


def test_sequential_exposes_what_was_hidden_and_drops_both_slowdowns():
    # compute 1000 slowed 10% over its whole (covered 50% of 1100, slowed 1.2x there: x = 0.2), the collective
    # 400 slowed 25% (500), 300 of it hidden
    r = region(compute_slowdown=0.1, covered=0.5, x=0.2, y=0.25, hidden_ns=300.0)
    seq = by_schedule(predict(r, [], alpha=1.0))[("sequential", None)]["predicted_ns"]
    assert seq == pytest.approx(1200.0 + 300.0 - 550.0 * 0.2 / 1.2 - 100.0)


def test_fewer_ctas_add_the_longer_collective_less_what_compute_hides():
    # alpha 1: 8 CTAs instead of 24 take 3x as long (1200 instead of 400): 800 more; half of the traced collective
    # was hidden, so half of the added time is, up to the 1000 of compute that ran uncovered
    r = region(hidden_ns=200.0)
    p = by_schedule(predict(r, [8], alpha=1.0))[("overlapped", 8)]
    assert p["comm_ns"] == pytest.approx(1200.0)
    assert p["predicted_ns"] == pytest.approx(1200.0 + 800.0 - 400.0)
    # the covered compute loses 8 SMs instead of 24: less slowdown than traced
    r = region(covered=1.0, x=0.3)
    p = by_schedule(predict(r, [8], alpha=1.0))[("overlapped", 8)]
    assert p["compute_slowdown"] == pytest.approx(0.3 + sm_loss(132, 8) - sm_loss(132, 24))
    assert p["compute_slowdown"] < 0.3


def test_a_cap_at_or_above_the_traced_ctas_is_not_a_schedule():
    r = region()
    assert comm_at(r, 24, 0.7) == r.comm_ns
    assert {p["max_ctas"] for p in predict(r, [24, 32], alpha=0.7)} == {None}


def test_recommendation_needs_a_gain_beyond_the_median_error():
    preds = [dict(schedule="traced", predicted_ns=100.0), dict(schedule="sequential", predicted_ns=98.0),
             dict(schedule="overlapped", predicted_ns=90.0)]
    assert recommend(preds, {"sequential": 0.01, "overlapped": 0.05}) == 2
    assert recommend(preds, {"sequential": 0.01, "overlapped": 0.2}) == 1
    assert recommend(preds, {"*": 0.5}) == 0


@pytest.fixture(scope="module")
def sweep_json(tmp_path_factory):
    rc, out, err = run_cli("advise", SWEEP, "--ctas", "2,8", "--format", "json", timeout=600)
    assert rc == 0, err
    return json.loads(out)


def test_advise_on_a_real_sweep_one_recommendation_per_region(sweep_json):
    rows = sweep_json["predictions"]
    regions = {(r["op"], r["dtype"], r["bytes"], r["traced_ctas"]) for r in rows}
    assert len(regions) == 90  # 3 collectives x 5 types x 2 sizes x 3 CTA settings, each traced
    for reg in regions:
        mine = [r for r in rows if (r["op"], r["dtype"], r["bytes"], r["traced_ctas"]) == reg]
        assert sum(r["recommended"] for r in mine) == 1
        assert [r["schedule"] for r in mine][:2] == ["traced", "sequential"]
        for r in mine:
            assert r["predicted_lo_ns"] <= r["predicted_ns"] <= r["predicted_hi_ns"]
    # traced at the default (24 SMs held), 2 CTAs move 128 MiB far slower: never recommended there
    slow = [r for r in rows if r["bytes"] == 134217728 and r["traced_ctas"] == "default" and r["max_ctas"] == 2]
    assert slow and not any(r["recommended"] for r in slow)
    assert all(r["gain_ns"] < 0 for r in slow)


def test_advise_without_regions_is_bad_input(tmp_path):
    rc, out, err = run_cli("advise", DATA / "h200x2" / "train_ddp.sqlite.xz", timeout=600)
    assert rc == 2 and "nothing to predict from" in err and "Traceback" not in err
    rc, out, err = run_cli("advise", SWEEP, "--ctas", "two")
    assert rc == 2 and "--ctas" in err


def test_advise_doc_is_what_the_committed_sweeps_give(tmp_path):
    spec = importlib.util.spec_from_file_location("validate_advise", REPO / "benchmarks/validate_advise.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "advise.md"
    mod.main(["--write", str(out)])
    committed = (REPO / "docs/advise.md").read_text()
    text = out.read_text()
    assert text == committed, "".join(difflib.unified_diff(committed.splitlines(True), text.splitlines(True), n=1))


def test_advise_steps_of_a_real_training_run():
    """Held-out FSDP2 run (2 x H200): steps with no communication are predicted unchanged (and no band); in the
    sequential mode, where the collectives are exposed, fewer CTAs predict a longer step."""
    rc, out, err = run_cli("advise", DATA / "advise" / "train_fsdp2.sqlite.xz", "--group-by-nvtx", "case:train*",
                           "--ctas", "4,16", "--format", "json", timeout=900)
    assert rc == 0, err
    steps = json.loads(out)["steps"]
    assert steps and not json.loads(out)["predictions"]
    for s in steps:
        if "mode=compute" in s["nvtx"]:
            assert s["predicted_ms"] == s["step_ms"] and s["predicted_lo_ms"] == s["predicted_hi_ms"]
    seq = {}
    for s in steps:
        if "mode=sequential" in s["nvtx"]:
            seq.setdefault((s["device_id"], s["nvtx"]), {})[s["max_ctas"]] = s["predicted_ms"]
    assert seq
    for by_k in seq.values():
        assert by_k[4] > by_k[16] > by_k[None]
    for key in {(s["device_id"], s["nvtx"]) for s in steps}:
        assert sum(s["recommended"] for s in steps if (s["device_id"], s["nvtx"]) == key) == 1
