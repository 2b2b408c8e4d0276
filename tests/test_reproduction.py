"""docs/reproduction.md is generated from the committed runs: regenerating it here must give the same page.

When this fails after a change to the analysis (or new committed runs), look at the difference, then regenerate:
``python benchmarks/reproduction.py --write docs/reproduction.md``.
"""

from __future__ import annotations

import difflib
import importlib.util

import pytest
from conftest import REPO

_spec = importlib.util.spec_from_file_location("reproduction", REPO / "benchmarks/reproduction.py")
reproduction = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reproduction)

DOC = REPO / "docs/reproduction.md"


@pytest.fixture(scope="session")
def h200x4_store(tmp_path_factory):
    """The 4-rank runs the page sets beside the 2-rank ones (tests/data/h200x4), ingested once per session."""
    from h200x2 import build_store

    return build_store(tmp_path_factory.mktemp("h200x4") / "run", reproduction.H200X4_RUNS, reproduction.H200X4)


def test_reproduction_doc_is_what_the_committed_runs_give(request):
    data = reproduction.default_data()
    store = request.getfixturevalue("h200x2_all_store") if data == "h200x2" else None
    four = (reproduction.compute4(data, request.getfixturevalue("h200x4_store"))
            if data == "h200x2" and (reproduction.H200X4 / "runs.json").exists() else None)
    result, source = reproduction.compute(data, store)
    text = reproduction.generate(result, source, four)
    committed = DOC.read_text()
    if text != committed:
        diff = "".join(difflib.unified_diff(committed.splitlines(True), text.splitlines(True), "committed",
                                            "regenerated", n=1))
        raise AssertionError(f"docs/reproduction.md differs from what {source} gives; if the change is meant, run "
                             f"python benchmarks/reproduction.py --write docs/reproduction.md\n{diff[:6000]}")
    # the page rests on the runs it names: every configuration of the analysis has its row
    for c in result.configs.to_pylist():
        assert f"| {reproduction._short(c)} |" in text
    assert "18.9%" in text and "26.6%" in text and "## Findings the paper does not have" in text
    if four is not None:  # and every 4-rank configuration its row, with the ranks beside it
        for c in four[0].configs.to_pylist():
            assert f"| {reproduction._short(c)} | 4 |" in text
        assert "## From 2 to 4 ranks" in text and "`train_pp` (a pipeline of 2 stages" in text


def test_generated_sentences_follow_the_numbers():
    """The comparison with the paper is chosen by the interval, not typed: move the interval and the words move."""
    class Fake:
        headline = None

    import pyarrow as pa

    rows = [dict(figure=f, group_by="all", group="all", configs=3, avg=avg, avg_lo=lo, avg_hi=hi, max=avg, max_lo=lo,
                 max_hi=hi, max_config="x", paper_avg=None, paper_max=None)
            for f, avg, lo, hi in (("compute_slowdown", 0.30, 0.25, 0.35), ("seq_over_ovl", 0.10, 0.05, 0.15))]
    fake = Fake()
    fake.headline = pa.Table.from_pylist(rows)
    text = reproduction.headline_section(fake)
    assert "is above the paper's 18.9% (its interval excludes it)" in text
    assert "holds the paper's 10.2% in its interval" in text


def test_four_rank_rows_stand_beside_their_two_rank_namesakes():
    t2 = "| configuration | figure |\n|---|---|\n| a | +1.0% |\n| b | +2.0% |\n| c | +3.0% |"
    t4 = "| configuration | figure |\n|---|---|\n| b | +2.0% |\n| a | +5.0% |\n| d | +4.0% |"
    merged = reproduction.beside("Intro.\n\n" + t2 + "\n\nc is 3.", "Intro.\n\n" + t4 + "\n\nd is 4.")
    assert merged.split("\n\n")[0] == "Intro."  # the same sentence once
    assert merged.split("\n\n")[1].split("\n")[2:] == [
        "| a | 2 | +1.0% |", "| a | 4 | +5.0% |", "| b | 2, 4 | +2.0% |", "| c | 2 | +3.0% |", "| d | 4 | +4.0% |"]
    assert merged.split("\n\n")[2:] == ["c is 3.", "On 4 ranks: d is 4."]


def test_rank_changes_follow_their_intervals():
    """Up or down only where the interval of 4 ranks minus 2 excludes 0: move the intervals and the words move."""
    a2 = {"avg": 0.02, "avg_lo": 0.01, "avg_hi": 0.03, "configs": 1}
    far = {"avg": 0.10, "avg_lo": 0.09, "avg_hi": 0.11, "configs": 1}
    near = {"avg": 0.025, "avg_lo": 0.015, "avg_hi": 0.035, "configs": 1}
    low = {"avg": -0.05, "avg_lo": -0.06, "avg_hi": -0.04, "configs": 1}
    assert reproduction._way(reproduction._change(a2, far)) == "up"
    assert reproduction._way(reproduction._change(a2, near)) == "within the intervals"
    assert reproduction._way(reproduction._change(a2, low)) == "down"
    assert reproduction._way(reproduction._change(a2, {**far, "avg_lo": None, "avg_hi": None})) == "no interval"
