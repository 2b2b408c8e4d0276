"""The verdict credits a cause only with the rows of that class; unexplained rows stay unexplained."""

from __future__ import annotations

import pyarrow as pa
import pytest

from traceql.attribution.verdict import verdicts


def _row(cls: str, s: float, parts: dict, comm_fraction: float = 0.5, sum_t0_ns: float = 1e6) -> dict:
    row = dict(run_id="r", device_id=0, activity="kernel", kind="compute", n_overlapped=3, slowdown=s,
               slowdown_lo=s - 0.01, slowdown_hi=s + 0.01, sum_t0_ns=sum_t0_ns, conflated=False, significant=True,
               comm_fraction=comm_fraction, **{"class": cls})
    row.update({c: parts.get(c, 0.0) for c in ("sm", "dram_bw", "cache", "clock", "link")})
    return row


def _verdict(rows: list[dict]) -> dict:
    summary = pa.Table.from_pylist([dict(run_id="r", device_id=0, nvtx=None, compute_ns=10e6, comm_ns=4e6,
                                         exposed_comm_ns=1e6, overlap_ns=3e6)])
    [v] = verdicts(summary, pa.Table.from_pylist(rows))
    return v


def test_unexplained_rows_are_not_credited_to_their_predicted_parts():
    v = _verdict([_row("unexplained", 0.5, {"sm": 0.3, "dram_bw": 0.1}),
                  _row("sm", 0.2, {"sm": 0.15, "clock": 0.03}),
                  _row("mixed", 0.4, {"sm": 0.1, "cache": 0.3}, comm_fraction=0)])
    by = v["lost_by_cause_ms"]
    assert by["unexplained"] == pytest.approx(0.5)        # all of the unexplained row's loss
    assert by["sm"] == pytest.approx(0.2 + 0.4 * 0.25)    # the sm row whole; a quarter of the mixed row
    assert by["cache"] == pytest.approx(0.4 * 0.75)
    assert by["dram_bw"] == 0 and by["clock"] == 0
    assert v["compute_lost_ms"] == pytest.approx(1.1)
    assert v["compute_lost_beside_comm_ms"] == pytest.approx(0.7)  # the mixed row had no communication beside it
    assert "0.500 ms to unexplained" in v["text"] and "communication overlapped" in v["text"]
