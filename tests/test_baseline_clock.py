"""The clock factor compares an instance's clock with that of the isolated instances its baseline comes from, on a real
trace where the device throttled as the run went on (tests/data/eval/README.md, "The clock of the baseline").

In `gemm_gemm` of `tests/data/eval/h100/eval_cases` (1 x H100), the first isolated GEMMs ran at about 1590 MHz, the
later ones and the overlapped pairs at about 1380 MHz. The baseline drifts, so each pair is compared with its nearest
isolated GEMMs in time, which ran at the throttled clock: the clock then explains nothing, and the loss the pairs show
(the SMs of the other GEMM's tail) is `sm`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from traceql.attribute import attribute

TRACE = Path(__file__).parent / "data" / "eval" / "h100" / "eval_cases.sqlite.xz"


@pytest.fixture(scope="module")
def gemm_gemm(tmp_path_factory) -> dict:
    doc = attribute(TRACE, group_by_nvtx="case:*", workdir=tmp_path_factory.mktemp("eval")).to_json()
    [row] = [r for r in doc["kernels"] if (r["nvtx"] or "").startswith("case:gemm_gemm;")
             and r["short_name"].startswith("nvjet") and r["n_overlapped"]]
    return row


def test_the_baseline_drifts_and_its_clock_is_the_throttled_one(gemm_gemm):
    r = gemm_gemm
    assert r["baseline"] == "isolated nearest in time" and r["baseline_drift"]
    assert r["gpc_clock_mhz_iso"] > 1550  # the pool's median: half the isolated GEMMs ran before the throttling
    assert 1350 < r["gpc_clock_mhz_base"] < 1420  # the nearest ones in time ran throttled
    assert abs(r["gpc_clock_mhz_ovl"] - r["gpc_clock_mhz_base"]) < 20


def test_the_clock_explains_nothing_and_the_class_is_sm(gemm_gemm):
    r = gemm_gemm
    assert abs(r["explained"]["clock"]) < 0.01
    assert r["class"] == "sm" and r["explained"]["sm"] > 0.05
    assert r["agreement"] == "agrees" and abs(r["residual"]) < 0.02
