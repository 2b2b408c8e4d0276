"""docs/reproduction.md is generated from the committed runs: regenerating it here must give the same page.

When this fails after a change to the analysis (or new committed runs), look at the difference, then regenerate:
``python benchmarks/reproduction.py --write docs/reproduction.md``.
"""

from __future__ import annotations

import difflib
import importlib.util

from conftest import REPO

_spec = importlib.util.spec_from_file_location("reproduction", REPO / "benchmarks/reproduction.py")
reproduction = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reproduction)

DOC = REPO / "docs/reproduction.md"


def test_reproduction_doc_is_what_the_committed_runs_give(request):
    data = reproduction.default_data()
    store = request.getfixturevalue("h200x2_all_store") if data == "h200x2" else None
    result, source = reproduction.compute(data, store)
    text = reproduction.generate(result, source)
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
