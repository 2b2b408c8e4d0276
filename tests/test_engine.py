"""The numpy engine (traceql.engine) against the reference SQL of the views it replaces, and against brute force.

On every bundled real trace, ``prepare`` with the engine (one pass per device: ``_instance_sweeps`` and the views
that are projections of it) and ``prepare(sweeps="sql")`` (the reference SQL of each view) must give the same tables:
integers (ns, SM·ns, sample counts) exactly, averages to floating-point rounding. Random layouts check the sweep
itself against a count of unit time cells (the reference of tests/test_intervals_property.py).
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from conftest import DATA
from hypothesis import example, given, settings
from hypothesis import strategies as st
from synthetic import make_store
from test_intervals_property import KINDS, S, _reference, activity

import traceql
from traceql import attribution, duck, engine, launch
from traceql.engine import SWEPT, sweeps


@pytest.fixture(autouse=True)
def _tables_in_files(monkeypatch):
    """The engine's largest tables go to files whatever their size here (``duck.FILE_MIN_ROWS``): the bundled traces
    are smaller than the size past which they would, and the rest of the suite reads them kept in memory."""
    monkeypatch.setattr(duck, "FILE_MIN_ROWS", 1)

TABLES = {
    "_instance_overlap": ("activity_id", "comm_overlap_ns", "compute_overlap_ns", "copy_overlap_ns", "overlap_ns",
                          "corunner_sm_ns", "comm_sm_ns", "sm_count"),
    "_device_unions": ("device_id", "compute_ns", "comm_ns", "overlap_ns"),
    "_instance_metrics": ("activity_id", "samples", "sm_active_pct", "dram_pct", "gpc_clock_mhz", "nvlink_pct",
                          "pcie_pct"),
    "_corunner_dram": ("activity_id", "own_dram_pct", "co_dram_pct", "co_kernel_dram_pct", "co_working_set_bytes"),
    "_activity_occurrence": ("activity_id", "scope_id", "step_start_ns", "step_text", "occurrence"),
    "_activity_dram": ("activity_id", "start_ns", "end_ns", "dram_pct", "working_set_bytes"),
    "_solo_rates": ("sig", "dram_pct", "samples"),
    # every column the one pass per device gives (the views above are projections of it)
    "_instance_sweeps": ("activity_id", *SWEPT.names),
    "_activity_rows": ("activity_id", "activity", "kind", "start_ns", "end_ns", "sm_held", "sig"),
    "instance_facts": ("activity_id", "comm_overlap_ns", "corunner_sms", "sm_share", "dram_pct", "co_dram_pct",
                       "samples", "cycles"),
    "kernel_attribution": ("group_id", "name", "grid", "n", "t0_ns", "t1_ns", "slowdown", "predicted", "class",
                           "reason"),
    "device_summary": ("device_id", "nvtx", "compute_ns", "comm_ns", "overlap_ns", "compute_slowdown"),
    "_group_predictions": ("group_id", "sm_lo", "sm_pt", "sm_hi", "dram_lo", "dram_pt", "dram_hi", "cache_lo",
                           "cache_pt", "cache_hi", "clock_lo", "clock_pt", "clock_hi", "link_lo", "link_pt", "link_hi",
                           "sm_predicted", "dram_busy", "extra_bytes_frac", "dram_sat_pct", "memory_bound",
                           "footprint", "clock_power", "cache_evidence"),
}


def _rows(run, sweeps_mode: str) -> dict[str, list[tuple]]:
    con = traceql.connect(run)
    attribution.prepare(con, sweeps=sweeps_mode)
    out = {table: _table_rows(con, table) for table in TABLES}
    con.close()
    return out


def _table_rows(con, table: str) -> list[tuple]:
    """The columns of ``TABLES`` of ``table``, with the run (group ids are global), in order."""
    names = ", ".join(f'"{c}"' for c in TABLES[table])
    run = "run_id, " if "run_id" in con.sql(f"SELECT * FROM {table} LIMIT 0").columns else ""
    return con.sql(f"SELECT {run}{names} FROM {table} ORDER BY ALL").fetchall()


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) or (math.isnan(a) and math.isnan(b))
    return a == b


def _assert_equal(got: dict[str, list[tuple]], want: dict[str, list[tuple]]) -> None:
    """Every table of ``TABLES`` the same: integers exactly, averages to rounding."""
    for table in TABLES:
        assert len(got[table]) == len(want[table]), table
        for g, w in zip(got[table], want[table], strict=True):
            assert all(_same(x, y) for x, y in zip(g, w, strict=True)), (table, g, w)


def _assert_same(run) -> None:
    engine, reference = _rows(run, "engine"), _rows(run, "sql")
    for table in TABLES:
        if table not in ("_instance_metrics", "_activity_occurrence", "_solo_rates"):  # without metrics, NVTX
            assert engine[table], table
    _assert_equal(engine, reference)


def test_engine_equals_reference_known_cause(known_cause_run):
    _assert_same(known_cause_run)


@pytest.mark.parametrize("fixture", ["overlap_run", "contention_sqlite_run", "train_ddp_run"])
def test_engine_equals_reference(fixture, request):
    _assert_same(request.getfixturevalue(fixture))


def test_engine_equals_reference_suite():
    """The bundled store: several runs at once, Nsight Compute profiles among them."""
    _assert_same(DATA / "h200" / "suite")


def test_occurrence_is_the_rank_within_its_keys():
    """sweeps.occurrence against its SQL definition, row_number() OVER (PARTITION BY a, b ORDER BY t, tiebreak) - 1,
    counted by brute force, with many ties in the keys and in t (launches at the same time)."""
    rng = np.random.default_rng(3)
    n = 3_000
    a, b, t = rng.integers(0, 4, n), rng.integers(0, 5, n).astype(np.uint64), rng.integers(0, 50, n)
    tiebreak = rng.permutation(n)
    got = sweeps.occurrence(a, b, t, tiebreak)
    want = [sum(1 for j in range(n) if a[j] == a[i] and b[j] == b[i] and (t[j], tiebreak[j]) < (t[i], tiebreak[i]))
            for i in range(n)]
    assert got.tolist() == want
    # in the order of (t, tiebreak), as a thread's launches are read, the keys alone are sorted: the same ranks, and
    # the counts per key (key_counts) from the same sort
    order = np.lexsort((tiebreak, t))
    until = rng.integers(0, 10**6, n)
    ranks, counts = sweeps.occurrence_and_counts(a[order], b[order], t[order], tiebreak[order], until[order])
    assert ranks.tolist() == [want[i] for i in order]
    assert all(np.array_equal(x, y) for x, y in zip(counts, sweeps.key_counts(a, b, until), strict=True))


def test_sample_means_of_every_metric_at_once_equal_one_by_one():
    """The engine averages every GPU metric at once (a row of samples per metric): the same means and counts, bit
    for bit, as each metric alone, with metrics missing at different samples and intervals before, between and
    after the samples."""
    rng = np.random.default_rng(7)
    ts = np.sort(rng.choice(np.arange(0, 100_000, 7), 4_000, replace=False)).astype(np.int64)
    values = rng.random((7, len(ts))) * 100
    for row, every in enumerate((3, 5, 11, 2, 1000)):
        values[row, rng.integers(0, every, len(ts)) == 0] = np.nan
    values[6] = np.nan  # a metric never sampled; row 5 is sampled at every sample
    start = rng.integers(-1_000, 101_000, 20_000)
    end = start + rng.integers(0, 300, len(start))
    for rows in (range(7), [5, 6], [5], [6], [0, 5]):  # metrics sampled at every sample or never take a shortcut
        means, counts = sweeps.sample_means(ts, values[list(rows)], start, end)
        for i, row in enumerate(rows):
            alone, k = sweeps.sample_means(ts, values[row], start, end)
            assert np.array_equal(means[i], alone, equal_nan=True) and np.array_equal(counts[i], k)
    means, counts = sweeps.sample_means(ts, values, start, end)
    assert (counts == 0).any() and (counts > 1).any() and np.isnan(means).any()


LIMITS = (32, 64, 65536, 233472)  # an SM's CTAs, warps, registers, shared memory bytes
launch_config = st.tuples(st.sampled_from([32, 96, 128, 256, 384, 512, 640, 1024]),  # threads per CTA
                   st.sampled_from([0, 16, 32, 64, 96, 128, 168, 255]),  # registers per thread (0: not said)
                   st.sampled_from([0, 1024, 48 << 10, 90 << 10, 100 << 10, 140 << 10, 200 << 10]))  # shared memory


def _occupancy(threads: int, regs: int, smem: int) -> int:
    """CTAs per SM, as queries/_activity_list.sql has it."""
    warps = -(-threads // 32)
    limits = [LIMITS[0], LIMITS[1] // warps] + ([LIMITS[2] // (regs * 32 * warps)] if regs else []) \
        + ([LIMITS[3] // smem] if smem else [])
    return max(1, min(limits))


def _taken_brute(acts, configs, held) -> dict[str, list[int]]:
    """Per activity, pair by pair, over it and from its start: the SM·ns of the co-running kernels beside whose
    resident CTAs not one of its CTAs fits, and of each co-runner's SMs the share of its CTA slots lost there."""
    kernel = ("compute", "comm")
    out = {c: [] for c in ("exclusive_sm_ns", "exclusive_start_sm_ns", "slots_sm_ns", "slots_start_sm_ns")}
    for i, (si, di, ki, _) in enumerate(acts):
        num = dict.fromkeys(out, 0)
        occ_i = _occupancy(*configs[i][1:]) if ki in kernel else 0
        wi = -(-configs[i][1] // 32)
        needs = (1, wi, configs[i][2] * 32 * wi, configs[i][3])
        for j, (sj, dj, kj, _) in enumerate(acts):
            if j == i or kj not in kernel or not occ_i:
                continue
            ctas, threads, regs, smem = configs[j]
            resident = min(_occupancy(threads, regs, smem), -(-ctas // S))
            wj = -(-threads // 32)
            left = (LIMITS[0] - resident, LIMITS[1] - resident * wj, LIMITS[2] - resident * regs * 32 * wj,
                    LIMITS[3] - resident * smem)
            fits = min(occ_i, *(room // need for room, need in zip(left, needs, strict=True) if need))
            lost = occ_i - max(0, fits)
            both = max(0, min(si + di, sj + dj) - max(si, sj))
            from_start = min(si + di, sj + dj) - si if sj <= si < sj + dj else 0
            for col, t in (("exclusive_sm_ns", both), ("exclusive_start_sm_ns", from_start)):
                num[col] += int(held[j]) * t if lost == occ_i else 0
            for col, t in (("slots_sm_ns", both), ("slots_start_sm_ns", from_start)):
                num[col] += int(held[j]) * lost * t
        for col in out:
            out[col].append(num[col] // max(occ_i, 1) if col.startswith("slots") else num[col])
    return out


def _fit(configs) -> sweeps.Fit:
    ctas, threads, regs, smem = (np.array(c, dtype=np.int64) for c in zip(*configs, strict=True))
    occ = np.array([_occupancy(*c[1:]) for c in configs], dtype=np.int64)
    return sweeps.Fit.of(ctas, threads, regs, smem, occ, S, LIMITS)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(activity, st.integers(1, 40), launch_config), min_size=1, max_size=12))
def test_sweep_matches_brute_force(drawn):
    acts = [a for a, _, _ in drawn]
    configs = [(ctas, *cfg) for _, ctas, cfg in drawn]
    start = np.array([a[0] for a in acts], dtype=np.int64)
    end = start + np.array([a[1] for a in acts], dtype=np.int64)
    cls = np.array([{"compute": 1, "comm": 0, "peer": 0}.get(a[2], 2) for a in acts], dtype=np.int8)
    kernel = np.array([a[2] in ("compute", "comm") for a in acts])
    sm = np.array([min(a[3], S) if k else 0 for a, k in zip(acts, kernel, strict=True)], dtype=np.int64)
    fit = _fit(configs)
    fit = sweeps.Fit(fit.need, np.where(kernel, fit.occ, 0), fit.room)  # copy engines: no CTA slots to take
    res = sweeps.overlap(start, end, cls, sm, S, None, fit)
    want, device = _reference(acts)
    for col, want_taken in _taken_brute(acts, configs, sm).items():
        assert list(res.per_activity[col]) == want_taken, (col, acts)
    for i, w in want.items():
        dur = int(end[i] - start[i])
        for col in ("comm_overlap_ns", "compute_overlap_ns", "copy_overlap_ns", "overlap_ns"):
            assert res.per_activity[col][i] == w[col], (col, i, acts)
        if dur:
            assert res.per_activity["comm_sm_ns"][i] / dur / S == pytest.approx(w["comm_sm_share"])
            assert min(1.0, res.per_activity["corunner_sm_ns"][i] / dur / S) == pytest.approx(w["sm_share"])
    assert res.totals == {k: device[k] for k in ("compute_ns", "comm_ns", "overlap_ns")}
    assert set(KINDS) >= {a[2] for a in acts}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 40), st.integers(0, 12)), min_size=0, max_size=40), st.booleans())
def test_boundaries_are_the_distinct_times_and_each_intervals_index(intervals, in_start_order):
    """Boundaries of intervals whose starts are in time order (merged from two sorted runs) and of intervals in any
    order (one sort of every time): the distinct times, and each start's and end's index into them. Ties between
    starts, ends and each other, and intervals of no length, included."""
    if in_start_order:
        intervals = sorted(intervals, key=lambda i: i[0])
    start = np.array([s for s, _ in intervals], dtype=np.int64)
    end = start + np.array([d for _, d in intervals], dtype=np.int64)
    b = sweeps.Boundaries.of(start, end)
    times = sorted({*start.tolist(), *end.tolist()})
    assert b.t.tolist() == times
    assert b.i_start.tolist() == [times.index(s) for s in start.tolist()]
    assert b.i_end.tolist() == [times.index(e) for e in end.tolist()]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=0, max_size=20, unique=True),
       st.lists(st.tuples(st.integers(0, 50), st.integers(1, 20)), min_size=1, max_size=8))
def test_solo_samples_match_brute_force(times, intervals):
    """A sample is solo for interval j when, on every time cell from its previous sample to its next, j and nothing
    else is active, and no other interval starts or ends strictly between them."""
    ts = np.array(sorted(times), dtype=np.int64)
    start = np.array([s for s, _ in intervals], dtype=np.int64)
    end = start + np.array([d for _, d in intervals], dtype=np.int64)
    k, who = sweeps.solo_samples(sweeps.Boundaries.of(start, end), ts)
    want = []
    for i in range(1, len(ts) - 1):
        lo, hi = int(ts[i - 1]), int(ts[i + 1])
        active = [{j for j in range(len(start)) if start[j] <= c < end[j]} for c in range(lo, hi)]
        cut = any(lo < t < hi for t in (*start.tolist(), *end.tolist()))
        if not cut and all(len(a) == 1 for a in active) and len({min(a) for a in active}) == 1:
            want.append((i, min(active[0])))
    assert list(zip(k.tolist(), who.tolist(), strict=True)) == want


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.one_of(st.none(), st.floats(0, 100))), min_size=1, max_size=15,
                unique_by=lambda s: s[0]),
       st.lists(st.tuples(st.integers(0, 30), st.integers(0, 10)), min_size=1, max_size=10))
def test_sample_means_match_brute_force(samples, intervals):
    samples = sorted(samples)
    ts = np.array([t for t, _ in samples], dtype=np.int64)
    values = np.array([np.nan if v is None else v for _, v in samples])
    start = np.array([s for s, _ in intervals], dtype=np.int64)
    end = start + np.array([d for _, d in intervals], dtype=np.int64)
    means, counts = sweeps.sample_means(ts, values, start, end)
    for i, (s, d) in enumerate(intervals):
        inside = [v for t, v in samples if s < t <= s + d and v is not None]
        before = [v for t, v in samples if t <= s]
        assert counts[i] == len(inside)
        if inside:
            assert means[i] == pytest.approx(sum(inside) / len(inside))
        elif before and before[-1] is not None:
            assert means[i] == before[-1]
        else:
            assert np.isnan(means[i])


def test_attribution_is_the_same_bits_whatever_the_threads(h200x2_store):
    """The same store gives the same attribution, bit for bit, on one thread and on several: no result depends on
    the order in which parallel threads sum floating-point values (four DDP/FSDP2/overlap runs on 2 GPUs)."""
    def rows(threads: int | None) -> dict[str, list[tuple]]:
        con = traceql.connect(h200x2_store)
        if threads:
            con.execute(f"SET threads = {threads}")
        attribution.prepare(con)
        out = {v: con.sql(f"SELECT * FROM {v} ORDER BY ALL").fetchall()
               for v in ("kernel_signatures", "kernel_attribution", "device_summary", "_signature_stats")}
        con.close()
        return out

    one, many = rows(1), rows(None)
    for view, got in many.items():
        assert len(got) == len(one[view]) > 0, view
        for g, w in zip(got, one[view], strict=True):
            assert all(x == y or (x != x and y != y) for x, y in zip(g, w, strict=True)), (view, g, w)



@pytest.mark.parametrize("nvtx", [None, "iter:*"])
def test_baselines_medians_are_sqls_medians_of_the_facts(h200x2_store, nvtx):
    """The medians of _signature_stats (taken per pool and group as the baselines hold them) are, to the bit, SQL's
    medians over instance_facts: per pool over its isolated instances, per group over its overlapped ones (the DDP,
    FSDP2 and overlap runs on 2 H200s with NVML power; grouped by NVTX iteration, a pool is several groups)."""
    _assert_sql_medians(h200x2_store, nvtx)


def test_baselines_medians_are_sqls_medians_known_cause(known_cause_run):
    """The same on the known-cause runs, with GPU metrics (DRAM, clock, SMs Active, NVLink, PCIe)."""
    _assert_sql_medians(known_cause_run)


def _assert_sql_medians(run, nvtx: str | None = None) -> None:
    from traceql.attribution.baselines import ISO_MEDIANS, OVL_MEDIANS

    con = traceql.connect(run)
    if nvtx:
        attribution.group_by_nvtx(con, nvtx)
    attribution.prepare(con)
    iso = ", ".join(f"median({m}) FILTER (overlap_ns = 0 AND dur_ns > 0) OVER (PARTITION BY pool_id)"
                    for m in ISO_MEDIANS)
    ovl = ", ".join(f"median({m}) FILTER (overlap_ns > 0) OVER (PARTITION BY group_id)" for m in OVL_MEDIANS)
    want = con.sql(f"""SELECT DISTINCT group_id, {iso}, {ovl}
                       FROM instance_facts JOIN _instance_baselines USING (run_id, activity_id)
                       ORDER BY group_id""").fetchall()
    cols = ", ".join([f"{m}_iso" for m in ISO_MEDIANS] + [f"{m}_ovl" for m in OVL_MEDIANS])
    got = con.sql(f"SELECT group_id, {cols} FROM _signature_stats ORDER BY group_id").fetchall()
    pools = con.sql("SELECT count(DISTINCT pool_id), count(DISTINCT group_id) FROM _instance_baselines").fetchall()
    con.close()
    assert got == want
    assert any(v is not None for row in got for v in row[1:])
    if nvtx:
        assert pools[0][1] > pools[0][0]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 25)), max_size=14),
       st.lists(st.integers(-2, 70), min_size=1, max_size=12))
def test_innermost_matches_brute_force(ranges, times):
    """Ranges that nest, cross, share starts or ends, or are empty: the last range (in start order) around each time."""
    ranges = sorted(ranges, key=lambda r: r[0])
    start = np.array([s for s, _ in ranges], dtype=np.int64)
    end = start + np.array([d for _, d in ranges], dtype=np.int64)
    t = np.array(times, dtype=np.int64)
    got = sweeps.innermost(start, end, t)
    for k, x in enumerate(times):
        around = [i for i in range(len(ranges)) if start[i] <= x <= end[i]]
        assert got[k] == (around[-1] if around else -1), (ranges, x)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 2), st.integers(0, 60), st.integers(0, 40),
                          st.sampled_from(["step", "fwd", "bwd", None]), st.sampled_from(["push_pop", "start_end"]),
                          st.sampled_from([None, None, "NCCL", "mine"])),
                max_size=12),
       st.lists(st.tuples(st.integers(1, 2), st.integers(0, 110), st.sampled_from(["gemm", "norm"])),
                min_size=1, max_size=14))
@example(ranges=[(1, 0, 40, "step", "push_pop", None), (1, 10, 20, None, "push_pop", None)],
         launched=[(1, 20, "gemm")])
@example(ranges=[(1, 0, 0, None, "push_pop", None)], launched=[(1, 0, "gemm")])
@example(ranges=[(1, 0, 200, "step", "push_pop", None)], launched=[(1, 5, "gemm"), (1, 5, "gemm"), (1, 5, "gemm")])
@example(ranges=[(1, 0, 10, "step", "push_pop", None)],
         launched=[(1, 5, "gemm"), (1, 6, "gemm"), (1, 7, "gemm"), (2, 10, "gemm")])
@example(ranges=[(1, 0, 50, "step", "push_pop", None), (2, 10, 5, "bwd", "push_pop", "NCCL")],
         launched=[(2, 12, "gemm")])
@example(ranges=[(1, 0, 0, "step", "push_pop", None), (1, 56, 17, "step", "push_pop", None),
                 (1, 56, 37, "fwd", "push_pop", None)],
         launched=[(1, 0, "gemm"), (1, 0, "gemm"), (1, 71, "norm"), (1, 80, "norm")])
@pytest.mark.parametrize("window", [None, 2])
@pytest.mark.parametrize("scope", ["process", "thread"])
def test_occurrence_engine_equals_reference_sql(tmp_path_factory, scope, window, ranges, launched):
    """The launch context of every activity (innermost of the user's NVTX ranges in its process or on its thread, its
    text, the occurrence of its signature in that range instance), from the engine and from the reference SQL of
    _activity_occurrence, on two threads of one process with ranges that nest, cross, share starts, have no text or
    are in a library's domain (NCCL: never a context) or a domain the user names (mine); also with each scope's
    launches read in windows of 2 (the occurrences counted so far carried from one window to the next, ties in launch
    time included)."""
    from unittest import mock

    from synthetic import make_store

    from traceql import engine, launch

    root = tmp_path_factory.mktemp("occ")
    kernels = [dict(start_ns=1000 + 10 * i, end_ns=1005 + 10 * i, name=name, correlation_id=100 + i)
               for i, (_tid, _t, name) in enumerate(launched)]
    api = [dict(global_pid=1, global_tid=tid, correlation_id=100 + i, start_ns=t, end_ns=t + 1)
           for i, (tid, t, _name) in enumerate(launched)]
    nvtx = [dict(global_pid=1, global_tid=tid, start_ns=s, end_ns=s + d, text=text, event_type=kind, domain=domain)
            for tid, s, d, text, kind, domain in ranges]
    make_store(root, kernels=kernels, runtime_api=api, nvtx=nvtx)
    got = {}
    for mode in ("engine", "sql"):
        con = traceql.connect(root)
        launch.set_rule(con, scope, ["mine"])
        attribution.group_by_nvtx(con, "[sb]*")  # the innermost range whose text matches, as --group-by-nvtx asks
        with mock.patch.object(engine, "WINDOW_ROWS", window or engine.WINDOW_ROWS):
            attribution.prepare(con, sweeps=mode)
        got[mode] = (con.sql("SELECT activity_id, scope_id, step_start_ns, step_text, occurrence "
                             "FROM _activity_occurrence ORDER BY ALL").fetchall(),
                     con.sql("SELECT activity_id, nvtx, nvtx_start_ns, nvtx_end_ns FROM _activity_groups "
                             "ORDER BY ALL").fetchall())
        con.close()
    assert got["engine"] == got["sql"]


def test_nvtx_groups_engine_equals_reference_sql(train_ddp_run):
    """--group-by-nvtx on a real DDP trace: the same group for every kernel, and the same attribution, from the
    engine's sweep and from the reference SQL's range join."""
    got = {}
    for mode in ("engine", "sql"):
        con = traceql.connect(train_ddp_run)
        attribution.group_by_nvtx(con, "*")
        attribution.prepare(con, sweeps=mode)
        got[mode] = [con.sql(f"SELECT * FROM {v} ORDER BY ALL").fetchall()
                     for v in ("_activity_groups", "_signature_stats")]
        con.close()
    assert got["engine"][0] and got["engine"] == got["sql"]


def test_baselines_streamed_in_small_batches_equal_one_batch(train_ddp_run, monkeypatch):
    """The baselines read the facts as a stream and cut it per signature, a signature's rows spanning batches, and
    append their instances to the table in pieces: with batches and pieces of 7 rows the two tables are those of one
    batch, both as computed and as registered for the views (a real DDP trace)."""
    from traceql.attribution import baselines

    def tables() -> tuple[list, list, list, list]:
        con = traceql.connect(train_ddp_run)
        attribution.prepare(con)
        inst, stats = baselines.compute(con)
        registered = [con.sql(f"SELECT * FROM {v} ORDER BY ALL").fetchall()
                      for v in ("_instance_baselines", "_signature_stats")]
        con.close()
        return inst.to_pylist(), stats.to_pylist(), *registered

    whole = tables()
    monkeypatch.setattr(baselines, "FACT_BATCH_ROWS", 7)
    streamed = tables()
    assert len(whole[0]) > 7 * 100 and len(whole[1]) > 10
    assert len(whole[2]) == len(whole[0]) and len(whole[3]) == len(whole[1])
    assert streamed == whole


@pytest.mark.parametrize("batch_rows", [1 << 20, 7])
def test_baselines_from_the_kept_order_equal_the_sorted_scan(h200x2_store, monkeypatch, batch_rows):
    """After the engine, the baselines read the facts in the order they are kept (by run and activity) and sort each
    device's rows by signature themselves: the same tables as from a scan sorted by run, device, signature and time
    (four runs on 2 GPUs; also in batches of 7 rows, a device's rows spanning batches)."""
    from traceql.attribution import baselines

    con = traceql.connect(h200x2_store)
    attribution.prepare(con)
    monkeypatch.setattr(baselines, "FACT_BATCH_ROWS", batch_rows)
    kept = [t.to_pylist() for t in baselines.compute(con, ordered=True)]
    sorted_scan = [t.to_pylist() for t in baselines.compute(con)]
    con.close()
    assert len(kept[0]) > 1000 and len(kept[1]) > 20
    assert kept == sorted_scan


def test_a_connection_that_does_not_keep_order_gets_the_same_tables(h200x2_store):
    """The pass and the baselines read tables in the order they were kept, which DuckDB returns unless the
    connection sets preserve_insertion_order off: then they sort what they read, and every table is the same."""
    whole = _rows(h200x2_store, "engine")
    con = traceql.connect(h200x2_store)
    con.execute("SET preserve_insertion_order = false")
    attribution.prepare(con)
    for table in TABLES:
        assert _table_rows(con, table) == whole[table], table
    con.close()


def test_results_appended_in_pieces_equal_one_piece(h200x2_store, monkeypatch):
    """Each engine stage appends its result to its table in pieces as the sweeps finish: with pieces of 500 rows (a
    device cut in slices, or several devices in one) and a task per device, finishing in any order, every table is
    that of one piece, row for row (four runs on 2 GPUs: eight devices)."""
    from traceql import engine

    whole = _rows(h200x2_store, "engine")
    monkeypatch.setattr(engine, "APPEND_ROWS", 500)
    monkeypatch.setattr(engine, "BUNDLE_ROWS", 1)
    pieces = _rows(h200x2_store, "engine")
    assert len(whole["_device_unions"]) == 8
    assert pieces == whole


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(0, 2), st.integers(0, 14)),
                min_size=1, max_size=30),
       st.integers(1, 6), st.integers(1, 7))
def test_windows_of_a_device_give_its_whole_sweep(acts, size, piece):
    """A device swept in windows of ``size`` activities (read in pieces of ``piece`` rows) gives each activity the
    integrals, and the device the unions, of the whole device swept at once: with long activities that outlive
    many windows, zero-length ones, and ties."""
    from traceql.engine import _windows

    acts = sorted(acts)  # activities in time order, as the activity rows are kept
    start = np.array([a[0] for a in acts], dtype=np.int64)
    end = start + np.array([a[1] for a in acts], dtype=np.int64)
    cls = np.array([a[2] for a in acts], dtype=np.int8)
    sm = np.array([a[3] for a in acts], dtype=np.int64)
    fit = _fit([(a[3], 128 * (1 + a[3] % 8), 32 * (a[3] % 5), (a[3] % 3) * (100 << 10)) for a in acts])
    whole = sweeps.overlap(start, end, cls, sm, S, None, fit)
    cols = {"activity_id": np.arange(len(acts)), "start_ns": start, "end_ns": end, "cls": cls, "sm": sm,
            "need": fit.need.T, "occ": fit.occ, "room": fit.room.T}
    pieces = [(("run", 0), {c: v[i:i + piece] for c, v in cols.items()}) for i in range(0, len(acts), piece)]
    got = {c: [] for c in whole.per_activity}
    totals = dict.fromkeys(whole.totals, 0)
    windows = list(_windows(iter(pieces), size))
    for w in windows:
        c = w.cols
        res = sweeps.overlap(c["start_ns"], c["end_ns"], c["cls"], c["sm"], S, w.span,
                             sweeps.Fit(c["need"].T, c["occ"], c["room"].T))
        if w.span is None:  # the device in one window: all of it
            assert list(c["activity_id"][w.own]) == list(range(len(acts)))
        else:
            assert len(c["activity_id"][w.own]) <= size
        for k, v in res.per_activity.items():
            got[k].extend(v[w.own].tolist())
        for k, v in res.totals.items():
            totals[k] += v
    assert [i for w in windows for i in w.cols["activity_id"][w.own]] == list(range(len(acts)))
    assert (len(windows) == 1) == (len(acts) <= size)
    for k, v in whole.per_activity.items():
        assert got[k] == v.tolist(), k
    assert totals == whole.totals


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=1, max_size=25, unique=True),
       st.lists(st.tuples(st.integers(0, 60), st.integers(0, 15)), min_size=1, max_size=20), st.integers(1, 5))
def test_samples_handed_to_windows_give_the_same_means(ts, intervals, piece):
    """The GPU-metric samples a window gets (from the last before its first start to its last end, read as it goes)
    give each of its activities the means and counts of the device's whole series."""
    from traceql.engine import _Series

    ts = np.array(sorted(ts), dtype=np.int64)
    values = np.sin(ts.astype(np.float64))
    intervals = sorted(intervals)
    start = np.array([s for s, _ in intervals], dtype=np.int64)
    end = start + np.array([d for _, d in intervals], dtype=np.int64)
    want, want_k = sweeps.sample_means(ts, values, start, end)
    other = (("a", 0), {"ts_ns": np.array([1]), "v": np.array([9.0])})  # another device before it
    series = _Series(iter([other, *((("a", 1), {"ts_ns": ts[i:i + piece], "v": values[i:i + piece]})
                                    for i in range(0, len(ts), piece))]))
    for a in range(0, len(start), 3):  # windows of 3 activities
        s, e = start[a:a + 3], end[a:a + 3]
        got = series.window(("a", 1), int(s[0]), int(e.max()))
        means, k = sweeps.sample_means(got["ts_ns"], got["v"], s, e) if len(got["ts_ns"]) else \
            (np.full(len(s), np.nan), np.zeros(len(s), dtype=np.int64))
        assert np.allclose(means, want[a:a + 3], equal_nan=True, rtol=1e-12) and (k == want_k[a:a + 3]).all()
    assert series.window(("b", 0), 0, 10) is None


@pytest.mark.parametrize("fixture", ["h200x2_store", "train_ddp_run"])
def test_devices_swept_in_windows_equal_the_whole_device(fixture, request, monkeypatch):
    """Devices swept in windows of 97 activities (so every device is many windows, its isolated DRAM rates taken
    in a pass of their own) give the tables of each device swept at once: integers exactly, averages to rounding."""
    from traceql import engine

    run = request.getfixturevalue(fixture)
    whole = _rows(run, "engine")
    monkeypatch.setattr(engine, "WINDOW_ROWS", 97)
    windows = _rows(run, "engine")
    con = traceql.connect(run)
    assert con.sql("SELECT max(n) FROM (SELECT count(*) AS n FROM _activity_rows GROUP BY run_id, device_id)"
                   ).fetchall()[0][0] > 10 * 97
    con.close()
    _assert_equal(windows, whole)


@pytest.mark.parametrize("per_scan", [6000, 2000])
def test_launch_contexts_read_a_few_threads_at_a_time_equal_one_scan(train_ddp_run, monkeypatch, per_scan):
    """Under a memory cap, the launch contexts' scan (every launch joined with its API call, sorted by thread) is cut
    into scans of consecutive threads of a run, and a thread with more launches than a scan holds into scans of its
    launch times: with at most 6,000 or 2,000 API calls per scan (the trace's threads have 749 to 9,093), every table
    is that of one scan."""
    from traceql import engine

    monkeypatch.setenv("TRACEQL_MEMORY_LIMIT", "4GB")
    whole = _rows(train_ddp_run, "engine")
    monkeypatch.setattr(engine, "LAUNCH_BYTES", 4 * 10**9 // per_scan)
    con = traceql.connect(train_ddp_run)
    scans = engine._launch_scans(con, "global_tid")  # the thread scope: the trace's threads are what it counts
    threads = con.sql("SELECT count(DISTINCT (run_id, global_tid)) FROM runtime_api").fetchall()[0][0]
    con.close()
    assert None not in scans and len(scans) > (1 if per_scan == 6000 else threads)
    assert any(s.first != s.last for s in scans) == (per_scan == 6000)  # consecutive threads together
    for prev, s in zip(scans[:-1], scans[1:], strict=True):  # a thread's slices follow each other in time
        assert (s.after is not None) == (prev.before is not None)
        if s.after is not None:
            assert prev.first == prev.last == s.first == s.last and prev.before == s.after
    assert sum(s.after is not None for s in scans) >= (2 if per_scan == 6000 else 10)
    split = _rows(train_ddp_run, "engine")
    assert split["_activity_occurrence"] and split == whole


def test_launch_contexts_cut_at_launch_times_equal_one_scan(train_ddp_run, monkeypatch):
    """A scope's launches (a process's, by default) cut into scans exactly at launch times (every 500th API call's):
    a launch at a cut is read once, by the later scan, and every table is that of one scan."""
    from traceql import engine

    monkeypatch.setenv("TRACEQL_MEMORY_LIMIT", "4GB")
    whole = _rows(train_ddp_run, "engine")
    monkeypatch.setattr(engine, "LAUNCH_BYTES", 4 * 10**9 // 2000)

    def at_launches(con, run, key, tid, parts):
        times = [t for (t,) in con.execute(f"SELECT start_ns FROM runtime_api WHERE run_id = $1 AND {key} = $2 "
                                           "ORDER BY start_ns", [run, tid]).fetchall()]
        bounds = [None, *sorted(set(times[500::500])), None]
        return [engine._LaunchScan(run, tid, tid, a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    monkeypatch.setattr(engine, "_time_slices", at_launches)
    split = _rows(train_ddp_run, "engine")
    assert split["_activity_occurrence"] and split == whole


def test_group_medians_read_in_small_batches_equal_one_batch(h200x2_store, monkeypatch):
    """The medians per group from a scan in batches of 7 rows (groups spanning batches, carried whole to the next)
    equal those from batches of a million (four runs on 2 GPUs)."""
    from traceql.engine import medians

    def table() -> list[tuple]:
        con = traceql.connect(h200x2_store)
        attribution.prepare(con)
        rows = _table_rows(con, "_group_predictions")
        con.close()
        return rows

    whole = table()
    monkeypatch.setattr(medians, "BATCH_ROWS", 7)
    assert table() == whole and len(whole) > 100


@pytest.mark.parametrize("case", ["in order", "a start goes back", "a tie broken otherwise", "with a copy"])
def test_activity_rows_numbered_from_the_scan_as_stored(tmp_path, monkeypatch, case):
    """Kernels alone, stored in their order: the activities are numbered from the scan as stored, with no sort, and
    any row out of order (a start that goes back, runs in another order, a tie of device, start, end and process
    broken by another id than the order's) has them sorted instead; with a copy or a set they are sorted at once.
    Every case gives the reference SQL's rows, in its order (small batches: the order is checked across them)."""
    monkeypatch.setattr(engine, "BATCH_ROWS", 5)
    rng = np.random.default_rng(11)
    runs = ["5e7e7e7e00000001", "5e7e7e7e00000002"]
    for r, run in enumerate(runs):
        kernels = []
        for dev in (0, 1):
            start = np.cumsum(rng.integers(0, 50, 12)) + 1_000 * r
            kernels += [dict(device_id=dev, start_ns=int(s), end_ns=int(s) + int(d), name=f"k{i % 3}", ctas=8,
                             global_pid=1, correlation_id=100 * dev + i)
                        for i, (s, d) in enumerate(zip(start, rng.integers(1, 40, 12), strict=True))]
        if case == "a start goes back" and r == 1:
            kernels[3], kernels[4] = kernels[4], kernels[3]
            kernels[3]["start_ns"] += 100
        if case == "a tie broken otherwise" and r == 0:  # the same device, start, end and process; ids descending
            kernels[5].update(start_ns=kernels[4]["start_ns"], end_ns=kernels[4]["end_ns"],
                              correlation_id=kernels[4]["correlation_id"] - 1)
        memcpy = [dict(device_id=0, start_ns=5, end_ns=9)] if case == "with a copy" else []
        make_store(tmp_path, kernels=kernels, memcpy=memcpy, run_id=run)
    con = traceql.connect(tmp_path)
    launch.Rule("process", ()).apply(con)
    want = con.sql("SELECT * FROM _activity_rows ORDER BY run_id, activity_id").fetchall()
    checked = []
    number = engine._number_activities
    monkeypatch.setattr(engine, "_number_activities", lambda *a, **k: (checked.append(k["checked"]), number(*a, **k)))
    engine.STAGES["_activity_rows"](con)
    assert con.sql("SELECT * FROM _activity_rows").fetchall() == want
    assert checked == {"in order": [True], "with a copy": [False]}.get(case, [True, False])


def test_activity_order_checked_across_runs_and_batches():
    """A run's rows must come together and runs in order, also across batches (the store's scan gives them so)."""
    def batch(runs, starts):
        n = len(runs)
        return pa.record_batch({"run_id": runs, "device_id": pa.array([0] * n, pa.int32()), "start_ns": starts,
                                "end_ns": [s + 1 for s in starts], "global_pid": [1] * n, "correlation_id": [1] * n,
                                "sig": pa.array([1] * n, pa.uint64()), "activity": ["kernel"] * n})
    for batches in ([batch(["b", "a"], [0, 1])], [batch(["a", "b", "a"], [0, 0, 1])],
                    [batch(["b"], [0]), batch(["a"], [1])], [batch(["a"], [5]), batch(["a"], [4])]):
        last: list = []
        with pytest.raises(engine._OutOfOrder):
            for b in batches:
                engine._in_order(b, last)
    last = []
    for b in (batch(["a", "a"], [0, 3]), batch(["a", "b"], [3, 0]), batch(["c"], [0])):
        engine._in_order(b, last)


def test_taken_in_small_pieces_equals_one_piece(monkeypatch):
    """The SMs co-runners take from each activity, computed over its (activity, co-runner) pairs in pieces of 7 pairs,
    equal those computed at once (3000 random kernels of random launch configurations)."""
    rng = np.random.default_rng(1)
    start = np.sort(rng.integers(0, 100_000, 3000))
    end = start + rng.integers(0, 3000, 3000)
    configs = list(zip(rng.integers(1, 400, 3000), rng.choice([64, 128, 256, 512, 1024], 3000),
                       rng.choice([0, 32, 64, 128, 255], 3000), rng.choice([0, 1024, 100 << 10, 200 << 10], 3000),
                       strict=True))
    fit = _fit([tuple(int(x) for x in c) for c in configs])
    held = np.minimum(np.array([c[0] for c in configs]), 132)
    whole = sweeps.taken(start, end, held, fit)
    monkeypatch.setattr(sweeps, "PAIR_CHUNK", 7)
    pieces = sweeps.taken(start, end, held, fit)
    assert all(np.array_equal(whole[c], pieces[c]) for c in whole)
    assert (whole["slots_sm_ns"] > whole["exclusive_sm_ns"]).sum() > 1000
    assert (whole["exclusive_sm_ns"] > whole["exclusive_start_sm_ns"]).any()
    assert (whole["exclusive_sm_ns"] > 0).sum() > 100
