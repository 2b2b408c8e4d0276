"""A bandwidth-bound kernel beside co-runners in the threads it leaves on every SM: tests/data/calibration/coresident
(1 x H200, predictions written in its README before collection)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from calibration import victim_rows

TRACE = Path(__file__).parent / "data" / "calibration" / "coresident" / "residency_coresident_nvidia_h200.sqlite.xz"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    con = duckdb.connect()
    rows = {(int(labels["victim_ctas_per_sm"]), labels["corunner"]): r
            for labels, r in victim_rows(TRACE, "cores_beside", tmp_path_factory.mktemp("cores"), con)}
    return con, rows


def test_a_sleeping_co_runner_beside_every_sm_costs_nothing(run):
    _, rows = run
    for k in (1, 2, 3):
        r = rows[(k, "co_sleep")]
        assert r["n_overlapped"] >= 19 and abs(r["slowdown"]) < 0.02 and r["class"] == "none", (k, r["slowdown"])


def test_a_streaming_co_runner_takes_more_the_fewer_warps_the_victim_has(run):
    """The loss falls as the victim's warps grow, and stays above its share of the warps (W_c / W_v)."""
    _, rows = run
    got = [rows[(k, "co_stream")]["slowdown"] for k in (1, 2, 3)]
    assert got[0] > got[1] > got[2] > 0.5, got
    assert all(s > share for s, share in zip(got, (3.0, 1.0, 1 / 3), strict=True)), got
    assert all(rows[(k, "co_stream")]["dram_pct_ovl"] >= 90 for k in (1, 2, 3))


def test_where_the_co_runners_demand_was_measured_the_dram_model_names_it(run):
    """At k = 3 the co-runner ran alone after the victim (its DRAM rate alone measured): dram_bw, and the prediction
    agrees with the observation."""
    _, rows = run
    r = rows[(3, "co_stream")]
    assert r["class"] == "dram_bw" and r["agreement"] == "agrees", (r["class"], r["predicted"], r["slowdown"])


def test_beside_the_fmas_the_victim_waits_for_them_to_end(run):
    """The one victim launch that ran beside co_alu ends after it, within its own time alone (it made next to no
    progress while the FMAs ran), for every k."""
    con, _ = run
    pairs = con.sql("""
        SELECT v.nvtx, v.end_ns - c.end_ns, v.dur_ns, c.dur_ns FROM instance_facts v JOIN instance_facts c
          ON c.run_id = v.run_id AND c.nvtx = v.nvtx AND c.short_name = 'co_alu' AND v.short_name = 'read_stride'
         AND v.start_ns > c.start_ns AND v.start_ns < c.end_ns""").fetchall()
    assert len(pairs) == 3
    alone = dict(con.sql("""SELECT nvtx, median(dur_ns) FROM instance_facts WHERE short_name = 'read_stride'
                            AND nvtx LIKE 'case:cores_alone;%' GROUP BY nvtx""").fetchall())
    for nvtx, after, dur, co in pairs:
        k = nvtx.split("victim_ctas_per_sm=")[1].split(";")[0]
        [t0] = [t for n, t in alone.items() if f"victim_ctas_per_sm={k};" in n]
        assert 0 < after <= 1.1 * t0 and dur > 0.95 * co - 1e6, (nvtx, after, t0, dur, co)
