"""traceql against NVIDIA's NCCL recipes, and against traceql's own recipe in ``dask-futures`` mode, on a real
4 x H100 DDP run (``tests/data/h100x4``: what each file is and how it was collected is in its README.md).

The run: one report of 4 processes (torchrun, one process per GPU, 19,480 kernels of which 552 NCCL kernels).
``nsys recipe nccl_gpu_overlap_trace``, ``nccl_gpu_proj_sum`` and ``traceql_attribution --mode dask-futures`` ran on
that report on the GPU machine; ``ddp4.sqlite.xz`` is its SQLite export (trimmed, every kernel row as nsys wrote it).

What the recipes compute (their source, ``nsys_recipe`` of Nsight Systems 2025.3):

- ``nccl_gpu_overlap_trace``: kernels whose short name starts with ``nccl`` are communication, every other kernel is
  compute (copies and sets are not kernels and take no part). Per (process, device), each kernel's
  "Communication Overlap" is the length of the union of its intersections with the *other* communication kernels,
  "Compute Overlap" the same with the other compute kernels, in percent of its duration, rounded to 0.1 (pandas'
  ``round(1)``, which is ``numpy.round``). traceql's ``instance_facts`` gives each kernel the exact union of the
  time other communication (NCCL kernels and peer copies) and other non-communication kernels overlapped it, per
  device. Here one process drives each device and no copy is a peer copy, so the definitions coincide and traceql's
  nanoseconds, rounded as the recipe rounds, must equal the recipe's figures exactly: no tolerance.
- ``nccl_gpu_proj_sum``: each range of the NCCL NVTX domain projected onto the GPU: [first start, last end] of the
  GPU work (kernels, copies, sets) launched by CUDA runtime calls that lie inside the range on its thread; ranges
  that launch nothing are left out; count, mean, std, min, quartiles, max, sum per range text. Its "rank" is the
  report (one here: Rank 0 holds all 4 processes).
"""

from __future__ import annotations

import json
import lzma
import re
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import DATA

import traceql
from traceql import attribution
from traceql.attribute import attribute
from traceql.ingest import ingest_one

H100X4 = DATA / "h100x4"
RECIPES = H100X4 / "nsys_recipes"
DASK = H100X4 / "traceql_attribution_dask"


def parquet_rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("h100x4_ddp4") / "run"
    info = ingest_one(H100X4 / "ddp4.sqlite.xz", out)
    assert info.tables["kernels"] == 19_480 and not info.already
    return out


@pytest.fixture(scope="module")
def con(run):
    c = traceql.connect(run)
    attribution.prepare(c)  # instance_facts from the engine, as attribute computes them (2 s, not minutes of SQL)
    yield c
    c.close()


# -- nccl_gpu_overlap_trace ----------------------------------------------------------------------

def test_the_recipe_sees_traceqls_kernels(con):
    """Every kernel of rank_trace is one kernel of traceql's, by device and start/end ns, with the same name; the
    recipe's communication kernels (name starts with ``nccl``) are traceql's ``comm`` kernels; one process per
    device; no peer copies (which traceql would count as communication and the recipe would not)."""
    trace = parquet_rows(RECIPES / "nccl_gpu_overlap_trace" / "rank_trace.parquet")
    ours = {(d, s, e): (name, kind, pid) for d, s, e, name, kind, pid in con.sql(
        "SELECT device_id, start_ns, end_ns, short_name, kind, global_pid FROM kernels").fetchall()}
    assert len(trace) == len(ours) == 19_480
    keys = {(r["DeviceID"], r["Start"], r["End"]) for r in trace}
    assert keys == set(ours)  # (device, start, end) is unique on both sides and the sets are equal
    assert all(ours[(r["DeviceID"], r["Start"], r["End"])][0] == r["Name"] for r in trace)
    nccl = {k for k in keys if ours[k][0].startswith("nccl")}
    assert nccl == {k for k, v in ours.items() if v[1] == "comm"} and len(nccl) == 552
    assert {r["Rank"] for r in trace} == {0}  # one report
    assert len({(r["DeviceID"], r["PID"]) for r in trace}) == 4
    assert len({(d, pid) for (d, _, _), (_, _, pid) in ours.items()}) == 4
    assert con.sql("SELECT count(*) FROM memcpy WHERE is_peer").fetchall()[0][0] == 0


def overlap_rows(con) -> list[tuple]:
    return con.sql("""
        SELECT device_id, start_ns, end_ns, dur_ns, kind, comm_overlap_ns, compute_overlap_ns, short_name
        FROM instance_facts WHERE activity = 'kernel'""").fetchall()


def pct(ns, dur) -> np.ndarray:
    """What the recipe prints for an overlap of ``ns`` over ``dur``: ns / dur * 100 in float64, pandas' round(1)."""
    return np.round(np.asarray(ns, dtype=np.float64) / np.asarray(dur, dtype=np.float64) * 100, 1)


def test_per_kernel_overlap_equals_nccl_gpu_overlap_trace(con):
    """Expected before comparing: equal for every kernel, both columns (same definitions here, see the module's
    docstring; traceql's exact nanoseconds rounded as the recipe rounds). Found: equal, 19,480 of 19,480."""
    trace = {(r["DeviceID"], r["Start"], r["End"]): (r["Communication Overlap"], r["Compute Overlap"])
             for r in parquet_rows(RECIPES / "nccl_gpu_overlap_trace" / "rank_trace.parquet")}
    rows = overlap_rows(con)
    assert len(rows) == len(trace) == 19_480
    keys = [(d, s, e) for d, s, e, *_ in rows]
    dur = [r[3] for r in rows]
    comm = pct([r[5] for r in rows], dur)
    compute = pct([r[6] for r in rows], dur)
    theirs = np.array([trace[k] for k in keys])
    assert (comm == theirs[:, 0]).all()
    assert (compute == theirs[:, 1]).all()
    # What the comparison exercised: communication overlapped 1,393 compute kernels and compute overlapped 241 NCCL
    # kernels (55-67 per device); no two NCCL kernels overlapped, nor two compute kernels, so both "same class"
    # terms are 0 on both sides. The recipe's union of a kernel's pieces groups the pieces of all kernels of the
    # process together; that can merge two pieces of one kernel that another kernel's piece bridges, and count the
    # gap: with no same-class overlap, a kernel's pieces come from one serial stream, and the exact equality above
    # says it did not happen here.
    by_comm = [r[4] for r in rows if r[5] > 0]
    by_compute = [r[4] for r in rows if r[6] > 0]
    assert len(by_comm) == 1_393 and "comm" not in by_comm
    assert len(by_compute) == 241 and set(by_compute) == {"comm"}


def test_per_name_overlap_equals_grouped_trace(con):
    """grouped_trace: per kernel name over all ranks, the count and the summed overlaps over the summed durations
    (the recipe sums unrounded nanoseconds, so traceql's sums rounded once must equal it). Expected: equal, every
    name. Found: equal, 44 names."""
    grouped = {r["Name"]: (r["Count"], r["Communication Overlap"], r["Compute Overlap"])
               for r in parquet_rows(RECIPES / "nccl_gpu_overlap_trace" / "grouped_trace.parquet")}
    sums: dict[str, list[int]] = {}
    for _, _, _, dur, _, comm, compute, name in overlap_rows(con):
        s = sums.setdefault(name, [0, 0, 0, 0])
        s[0] += 1
        s[1] += dur
        s[2] += comm
        s[3] += compute
    assert len(grouped) == len(sums) == 44
    ours = {n: (c, float(pct(cm, d)), float(pct(cp, d))) for n, (c, d, cm, cp) in sums.items()}
    assert ours == grouped


# -- nccl_gpu_proj_sum -----------------------------------------------------------------------------

PROJECTED = """
WITH gpu AS (
    SELECT run_id, global_pid, correlation_id, start_ns, end_ns, 'kernel' AS activity FROM kernels
    UNION ALL SELECT run_id, global_pid, correlation_id, start_ns, end_ns, 'memcpy' FROM memcpy
    UNION ALL SELECT run_id, global_pid, correlation_id, start_ns, end_ns, 'memset' FROM memset
), launched AS (
    SELECT r.run_id, r.global_tid, r.start_ns AS api_start, r.end_ns AS api_end, g.start_ns, g.end_ns, g.activity
    FROM runtime_api r JOIN gpu g USING (run_id, global_pid, correlation_id)
), ranges AS (
    SELECT run_id, global_tid, start_ns, end_ns, text, row_number() OVER () AS range_id
    FROM nvtx WHERE domain = 'NCCL' AND end_ns IS NOT NULL
)
SELECT n.range_id, n.text, min(l.start_ns) AS s, max(l.end_ns) AS e, count(l.start_ns) AS ops,
       count(*) FILTER (l.activity = 'kernel') AS kernels
FROM ranges n LEFT JOIN launched l
  ON l.run_id = n.run_id AND l.global_tid = n.global_tid AND n.start_ns <= l.api_start AND l.api_end <= n.end_ns
GROUP BY ALL
"""

PROJ_COUNTS = {"ncclAllGather": 4, "ncclAllReduce": 524, "ncclBroadcast": 24, "ncclCommInitRankConfig": 4}


def test_nccl_calls_count_as_nccl_gpu_proj_sum(con):
    """Expected before comparing: per collective, the recipe's count equals traceql's NCCL calls (nccl_calls: each
    NCCL kernel with the NCCL range around its launch), 1 all-gather, 131 all-reduces and 6 broadcasts per rank;
    ``ncclCommInitRankConfig`` (copies and sets, no kernel) is in the recipe and not among the calls, which are
    kernels'. Found: as expected."""
    all_stats = parquet_rows(RECIPES / "nccl_gpu_proj_sum" / "all_stats.parquet")
    rank_stats = parquet_rows(RECIPES / "nccl_gpu_proj_sum" / "rank_stats.parquet")
    assert {r["Text"]: r["Count"] for r in all_stats} == PROJ_COUNTS
    assert [r["Rank"] for r in rank_stats] == [0] * 4  # the recipe's rank is the report: one, of 4 processes
    assert {r["Text"]: r["Count"] for r in rank_stats} == PROJ_COUNTS
    calls = dict(con.sql("SELECT call, count(*) FROM nccl_calls GROUP BY 1").fetchall())
    assert calls == {t: n for t, n in PROJ_COUNTS.items() if t != "ncclCommInitRankConfig"}
    per_device = con.sql("SELECT device_id, call, count(*) FROM nccl_calls GROUP BY ALL").fetchall()
    assert sorted(per_device) == sorted((d, t, n // 4) for d in range(4) for t, n in calls.items())
    # every NCCL kernel has its call, and no call lacks a kernel
    assert con.sql("SELECT count(*) FROM kernels WHERE kind = 'comm'").fetchall()[0][0] == sum(calls.values()) == 552


def quantile(sorted_values: list[int], q: float) -> float:
    """pandas' default quantile (linear interpolation), as the recipe computes its quartiles."""
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def test_projected_nccl_ranges_equal_nccl_gpu_proj_sum(con):
    """Expected before comparing: the NCCL ranges projected from traceql's tables (the recipe's definition, in the
    module's docstring) give the recipe's count, sum, min and max exactly, and its mean, std and quartiles to its
    rounding; the ranges that launch nothing (ncclCommDestroy, ncclCommFinalize: 4 each) are the ones it leaves out.
    Found: as expected."""
    stats = {r["Text"]: r for r in parquet_rows(RECIPES / "nccl_gpu_proj_sum" / "rank_stats.parquet")}
    projected: dict[str, list[int]] = {}
    empty: dict[str, int] = {}
    for _, text, s, e, ops, _ in con.sql(PROJECTED).fetchall():
        if ops == 0:
            empty[text] = empty.get(text, 0) + 1
        else:
            projected.setdefault(text, []).append(e - s)
    assert empty == {"ncclCommDestroy": 4, "ncclCommFinalize": 4}
    assert {t: len(v) for t, v in projected.items()} == PROJ_COUNTS
    for text, durs in projected.items():
        r, durs = stats[text], sorted(durs)
        assert (r["Sum"], r["Min"], r["Max"]) == (sum(durs), durs[0], durs[-1]), text
        n, mean = len(durs), sum(durs) / len(durs)
        std = (sum((d - mean) ** 2 for d in durs) / (n - 1)) ** 0.5
        # the recipe rounds these to 0.1 (and the float sums differ in the last bits): 0.05 plus 1e-9 relative
        for theirs, ours in ((r["Mean"], mean), (r["Std"], std), (r["Q1"], quantile(durs, 0.25)),
                             (r["Median"], quantile(durs, 0.5)), (r["Q3"], quantile(durs, 0.75))):
            assert theirs == pytest.approx(ours, abs=0.05 + 1e-9 * abs(ours)), text
    all_stats = {r["Text"]: r for r in parquet_rows(RECIPES / "nccl_gpu_proj_sum" / "all_stats.parquet")}
    for text, r in all_stats.items():  # one rank: the "approx" statistics over ranks are the rank's own
        assert (r["Count"], r["Sum"], r["Min"], r["Max"], r["Mean"], r["Std (approx)"], r["Q1 (approx)"],
                r["Median (approx)"], r["Q3 (approx)"]) == tuple(stats[text][k] for k in (
                    "Count", "Sum", "Min", "Max", "Mean", "Std", "Q1", "Median", "Q3"))


def test_projection_is_the_nccl_kernel_for_all_reduce_and_broadcast(con):
    """An all-reduce or broadcast range launches its one kernel, so its projection is that kernel: the recipe's sums
    equal the summed durations of traceql's NCCL kernels per call. The one all-gather range of each process is its first
    NCCL call, in which NCCL sets up its connections: it launches its kernel and 48 host-to-device copies of 152 bytes,
    and the projection spans them all (1,182 ms over the 4 ranges, against 4.1 ms of kernels)."""
    stats = {r["Text"]: r["Sum"] for r in parquet_rows(RECIPES / "nccl_gpu_proj_sum" / "rank_stats.parquet")}
    kernel_sums = dict(con.sql("""
        SELECT c.call, sum(k.dur_ns)::BIGINT FROM nccl_calls c JOIN kernels k USING (run_id, global_pid, correlation_id)
        GROUP BY 1""").fetchall())
    assert kernel_sums["ncclAllReduce"] == stats["ncclAllReduce"] == 333_641_741
    assert kernel_sums["ncclBroadcast"] == stats["ncclBroadcast"] == 30_980_518
    assert kernel_sums["ncclAllGather"] == 4_052_766 < stats["ncclAllGather"] == 1_182_473_995
    ops = [(o, k) for _, t, _, _, o, k in con.sql(PROJECTED).fetchall() if t == "ncclAllGather"]
    assert ops == [(49, 1)] * 4  # per range: 1 kernel + 48 copies


# -- traceql_attribution in dask-futures mode against traceql.attribute here -----------------------

# Columns of kernels.parquet read from the GPU metrics (directly, or through the models that read them): the export
# keeps every 20th sample (500 Hz of nsys' 10 kHz), so these differ from what the recipe computed over every
# sample. Every other column comes from the kernels' intervals and launch records, which the export keeps whole.
METRIC_COLUMNS = {
    "sm_predicted", "predicted", "predicted_lo", "predicted_hi", "agreement", "sm", "sm_lo", "sm_hi", "dram_bw",
    "dram_bw_lo", "dram_bw_hi", "cache", "cache_lo", "cache_hi", "clock", "clock_lo", "clock_hi", "link", "link_lo",
    "link_hi", "residual", "class", "reason", "predicted_band", "memory_explanation", "dram_pct_iso", "dram_pct_ovl",
    "gpc_clock_mhz_iso", "gpc_clock_mhz_ovl", "sm_active_pct_iso", "sm_active_pct_ovl", "nvlink_pct_ovl",
    "pcie_pct_ovl", "co_dram_pct", "dram_busy", "memory_bound", "extra_bytes_frac", "cache_evidence",
}


@pytest.fixture(scope="module")
def local(run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("h100x4_attribution")
    attribute(run, executor="local").write(out)  # as the recipe's reducer calls it
    return out


def test_dask_recipe_summary_equals_local_attribute(local):
    """Expected before comparing: summary.parquet equal but for the run id (the recipe ingested the .nsys-rep, this
    the SQLite export: another file, so another id); it reads kernel intervals only. Found: equal."""
    theirs, ours = pq.read_table(DASK / "summary.parquet"), pq.read_table(local / "summary.parquet")
    assert theirs.schema == ours.schema and theirs.num_rows == ours.num_rows == 4
    assert set(theirs.column("run_id").to_pylist()) == {"818d89c1372758d4"}
    assert theirs.drop(["run_id"]).equals(ours.drop(["run_id"]))


def test_dask_recipe_kernels_equal_local_attribute_but_for_the_metrics(local):
    """Expected before comparing: the same 646 rows in the same order; every column equal but those read from GPU
    metrics. Found: those 52 columns equal; of the 38 METRIC_COLUMNS, 34 differ, and 4 agree because they are constant
    here (``link``, ``link_lo``, ``link_hi``: 0 or NULL in every row; ``pcie_pct_ovl``: 1.0 or NULL).

    The recipe ran under JSON schema 5. Schema 7 times a collective matched across ranks on its transfer (its wait
    for the last rank left out), so the communication rows change: 48 recorded, 41 now (duration modes that were
    waits are one), 14 of them with waits left out (``wait_excluded_ns``, a column schema 7 added), and group ids,
    numbered with them, differ. The 598 other rows: as expected before. Schema 8 added two witnesses of the SM model
    (``sm_issue_pct_iso``, ``co_sm_issue_pct``), left out of the comparison like ``wait_excluded_ns``; schema 10 the
    clock the clock factor compared with (``gpc_clock_mhz_base``), left out too, and schema 11 the co-running kernels'
    DRAM demand (``co_kernel_dram_pct``). Since an unresolved instance joins
    the one mode its duration allows (no mode whose isolated median is more than MODE_RATIO times its duration), the
    four conflated communication groups (20 instances) are resolved: 37 communication rows, 11 with waits left out."""
    theirs, ours = pq.read_table(DASK / "kernels.parquet"), pq.read_table(local / "kernels.parquet")
    added = ["wait_excluded_ns", "sm_issue_pct_iso", "co_sm_issue_pct", "gpc_clock_mhz_base", "co_kernel_dram_pct"]
    assert theirs.schema == ours.drop(added).schema and theirs.num_rows == 646
    assert pc.sum(pc.greater(ours.column("wait_excluded_ns"), 0)).as_py() == 11

    def kind(table, comm: bool):
        return table.filter(pc.equal(table.column("kind"), "comm") if comm else pc.not_equal(table.column("kind"),
                                                                                             "comm"))
    assert (kind(theirs, True).num_rows, kind(ours, True).num_rows) == (48, 37)
    assert not any(kind(ours, True).column("conflated").to_pylist())
    theirs, ours = kind(theirs, False), kind(ours, False)
    assert theirs.num_rows == ours.num_rows == 598
    differ = {c for c in theirs.column_names if c not in ("run_id", "group_id")
              and not theirs.column(c).equals(ours.column(c))}
    assert differ <= METRIC_COLUMNS, differ - METRIC_COLUMNS
    kept = [c for c in theirs.column_names if c not in ("run_id", "group_id") and c not in METRIC_COLUMNS]
    assert len(kept) == 51 and theirs.select(kept).equals(ours.select(kept))
    assert {"dram_pct_iso", "sm_active_pct_iso", "gpc_clock_mhz_iso", "class"} <= differ


def test_dask_recipe_attribution_json_equals_local_attribute_but_for_the_metrics(local):
    """attribution.json: the same notes and waits, and per device the same verdict figures that come from
    intervals (compute, communication, hidden and exposed time, the compute lost and its interval, what running in
    sequence would have cost, the waits); how the loss splits between causes and what share of it is answered read
    the metrics, and differ; the split still adds up to the same total."""
    theirs = json.loads(lzma.open(DASK / "attribution.json.xz").read())
    ours = json.loads((local / "attribution.json").read_text())
    assert json.loads((DASK / "failed.json").read_text()) == {}
    assert [r["run_id"] for r in theirs["runs"]] == ["818d89c1372758d4"]
    assert theirs["runs"][0]["format"] == "nsys-rep" and ours["runs"][0]["format"] == "nsys-sqlite"
    # the same notes, but for their times: schema 7 counts collectives' transfer, not their waits for other ranks;
    # schema 8 adds a third: the trace has no CUDA event records, so no kernel held back from starting is claimed
    assert len(theirs["notes"]) == 2 and len(ours["notes"]) == 3
    assert "without CUDA event tracing" in ours["notes"][2] and ours["delays"] == []
    ours["notes"] = ours["notes"][:2]
    times = [[re.sub(r"\(([\d.]+) ms\)", "(t)", n) for n in doc["notes"]] for doc in (theirs, ours)]
    # the 20 conflated communication instances (4 groups) are resolved by their duration since (the kernels' test)
    assert times[0][1:] == times[1][1:] and times[0][0].startswith("64 overlapped instances (t) in 12 signature group")
    assert times[1][0].startswith("44 overlapped instances (t) in 8 signature group(s)")
    conflated = [re.search(r"\(([\d.]+) ms\)", doc["notes"][0]) for doc in (theirs, ours)]
    assert float(conflated[0][1]) == 61.881 and float(conflated[1][1]) == 1.233

    def without(rows: list[dict], keys: set[str]) -> list[dict]:
        return [{k: v for k, v in r.items() if k not in keys} for r in rows]

    ids = {"run_id", "late_run_id"}
    # the recipe's output was recorded under JSON schema 5: the keys schemas 6, 7, 8 and 9 added are not in it
    assert theirs["schema_version"] == 5
    added = {"exposed_wait_ms", "held_back_ms", "held_back_n", "held_back_by", "step_ms", "reached_by_cause_ms",
             "path_lost_by_cause_ms", "path_other_devices_ms", "path_set_by_device_id", "path_wait_reached_ms"}
    assert without(theirs["waits"], ids) == without(ours["waits"], ids | added) and len(ours["waits"]) == 4
    metric_keys = {"lost_by_cause_ms", "coverage_compute", "coverage_comm", "text"}
    assert without(theirs["verdicts"], ids | metric_keys) == without(ours["verdicts"], ids | metric_keys | added)
    for t, o in zip(theirs["verdicts"], ours["verdicts"], strict=True):
        assert sum(t["lost_by_cause_ms"].values()) == pytest.approx(sum(o["lost_by_cause_ms"].values()), rel=1e-12)
    assert all(t["lost_by_cause_ms"] != o["lost_by_cause_ms"]
               for t, o in zip(theirs["verdicts"], ours["verdicts"], strict=True))
