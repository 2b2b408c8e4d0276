"""Tests for traceql.stats: interval coverage, exact order-statistic ranks, determinism, trend and mode splitting."""

from __future__ import annotations

import itertools
import math
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceql.stats import (
    group_medians,
    grouped,
    lookup,
    median_ci,
    ratio_ci,
    relative_spread,
    scale_interval,
    seed_for,
    segment_medians,
    slowdown_ci,
    split_modes,
    sql_median,
    trend,
)


def _binomial_lower_rank(n: int, level: float) -> int:
    """Largest 1-based rank r with P(K <= r - 1) <= (1 - level) / 2 for K ~ Binomial(n, 1/2), by brute force."""
    best, tail = 0, 0
    for r in range(1, n + 1):
        tail += math.comb(n, r - 1)  # P(K <= r - 1) * 2**n
        if tail / 2**n > (1 - level) / 2:
            break
        best = r
    return best


# --- seed_for -----------------------------------------------------------------------------------------------------


def test_seed_for_is_pinned_and_distinguishes_keys():
    # Pinned values: a switch to Python's salted hash() or to another digest would change them.
    assert seed_for("a", 1) == 12444202034427101082
    assert seed_for(("gemm", 3), "x") == 8444249881148868852
    assert seed_for("a", 1) != seed_for("a", 2) != seed_for(("a", 1))
    assert 0 <= seed_for() < 2**64


# --- median_ci ----------------------------------------------------------------------------------------------------


def test_median_ci_exact_ranks_hand_checked():
    x = np.arange(1, 21)
    lo_rank = _binomial_lower_rank(20, 0.95)
    hi_rank = 21 - lo_rank
    assert (lo_rank, hi_rank) == (6, 15)
    # The chosen ranks cover >= 95%, and one rank tighter would not.
    cover = sum(math.comb(20, k) for k in range(lo_rank, hi_rank)) / 2**20
    tighter = sum(math.comb(20, k) for k in range(lo_rank + 1, hi_rank - 1)) / 2**20
    assert cover >= 0.95 > tighter
    med, lo, hi = median_ci(x[::-1])  # unsorted input
    assert (med, lo, hi) == (10.5, 6.0, 15.0)


def test_median_ci_normal_approximation_matches_exact_ranks_near_switch():
    x = np.arange(1, 1002, dtype=float)  # n = 1001 takes the normal-approximation branch
    lo_rank = _binomial_lower_rank(1001, 0.95)
    _, lo, hi = median_ci(x)
    assert abs(lo - lo_rank) <= 1
    assert abs(hi - (1002 - lo_rank)) <= 1


def test_median_ci_coverage_lognormal():
    rng = np.random.default_rng(20240611)
    samples = rng.lognormal(mean=2.0, sigma=0.7, size=(400, 30))
    true_median = math.exp(2.0)
    hits = 0
    for row in samples:
        med, lo, hi = median_ci(row)
        assert lo <= med <= hi
        hits += lo <= true_median <= hi
    assert 0.92 <= hits / 400 <= 0.985


def test_median_ci_small_n():
    assert all(math.isnan(v) for v in median_ci([]))
    med, lo, hi = median_ci([3, 1, 2, 5, 4])
    assert med == 3.0 and math.isnan(lo) and math.isnan(hi)
    _, lo, hi = median_ci([3, 1, 2, 5, 4, 6])  # n = 6 is the smallest n with a 95% interval: (min, max)
    assert (lo, hi) == (1.0, 6.0)
    _, lo, _ = median_ci([3, 1, 2, 5, 4, 6], level=0.99)
    assert math.isnan(lo)
    with pytest.raises(ValueError):
        median_ci([1, 2, 3], level=1.5)


# --- slowdown_ci --------------------------------------------------------------------------------------------------


def _durations(rng: np.random.Generator, n: int, center: float, noise: float = 0.05) -> np.ndarray:
    return np.round(center * rng.lognormal(0.0, noise, n)).astype(np.int64)


def test_slowdown_point_is_exact_median_ratio():
    rng = np.random.default_rng(1)
    t0, t1 = _durations(rng, 101, 1e5), _durations(rng, 57, 1.2e5)
    s, _, _ = slowdown_ci(t0, t1, key=("k",), n_boot=200)
    assert s == float(np.median(t1)) / float(np.median(t0)) - 1.0


def test_slowdown_ci_detects_shift_and_contains_truth():
    rng = np.random.default_rng(2)
    t0, t1 = _durations(rng, 300, 1e5), _durations(rng, 300, 1.11e5)
    s, lo, hi = slowdown_ci(t0, t1, key=("gemm", 0))
    assert lo < s < hi
    assert lo <= 0.11 <= hi
    assert lo > 0.0
    assert hi - lo < 0.05


def test_slowdown_ci_identical_distributions_contains_zero():
    rng = np.random.default_rng(3)
    t0, t1 = _durations(rng, 200, 1e5), _durations(rng, 150, 1e5)
    _, lo, hi = slowdown_ci(t0, t1, key=("same",))
    assert lo <= 0.0 <= hi


def test_slowdown_ci_coverage():
    rng = np.random.default_rng(4)
    hits = 0
    for rep in range(200):
        t0 = 1e5 * rng.lognormal(0.0, 0.1, 40)
        t1 = 1.05e5 * rng.lognormal(0.0, 0.1, 40)
        _, lo, hi = slowdown_ci(t0, t1, key=("cov", rep), n_boot=400)
        hits += lo <= 0.05 <= hi
    assert 0.88 <= hits / 200 <= 0.995


def test_slowdown_ci_is_deterministic_and_keyed():
    rng = np.random.default_rng(5)
    t0, t1 = _durations(rng, 80, 1e5), _durations(rng, 80, 1.03e5)
    a = slowdown_ci(t0, t1, key=("k", 1), n_boot=500)
    b = slowdown_ci(t0.copy(), t1.copy(), key=("k", 1), n_boot=500)
    c = slowdown_ci(t0, t1, key=("k", 2), n_boot=500)
    assert a == b
    assert a[0] == c[0]
    assert a[1:] != c[1:]
    # Depends on the values only, not on the order they were collected in.
    assert slowdown_ci(rng.permutation(t0), rng.permutation(t1), key=("k", 1), n_boot=500) == a


def test_slowdown_ci_subsampling_path():
    rng = np.random.default_rng(6)
    t0, t1 = _durations(rng, 5000, 1e5), _durations(rng, 3000, 1.11e5)
    a = slowdown_ci(t0, t1, key=("big",), n_boot=300, max_n=1000)
    b = slowdown_ci(rng.permutation(t0), t1, key=("big",), n_boot=300, max_n=1000)
    assert a == b
    s, lo, hi = a
    assert s == float(np.median(t1)) / float(np.median(t0)) - 1.0  # point estimate uses all values
    assert lo <= 0.11 <= hi and lo > 0.0
    # A subsample of 1000 is noisier than all 5000/3000 values: the interval is wider than without subsampling.
    _, lo_full, hi_full = slowdown_ci(t0, t1, key=("big",), n_boot=300, max_n=5000)
    assert hi - lo > hi_full - lo_full


def test_slowdown_ci_degenerate_inputs():
    assert all(math.isnan(v) for v in slowdown_ci([], [1, 2], key=("e",)))
    assert all(math.isnan(v) for v in slowdown_ci([1, 2], [], key=("e",)))
    assert all(math.isnan(v) for v in slowdown_ci([0, 0, 1], [1, 2], key=("e",)))
    s, lo, hi = slowdown_ci([100], [110, 130], key=("e",))
    assert s == pytest.approx(0.2) and math.isnan(lo) and math.isnan(hi)


# --- ratio_ci, scale_interval, relative_spread --------------------------------------------------------------------


def test_ratio_ci_uses_order_statistics():
    r = 1.0 + np.arange(1, 21) / 100.0  # 1.01 .. 1.20
    m, lo, hi = ratio_ci(r[::-1], key=("r",))
    assert m == pytest.approx(0.105)
    assert lo == pytest.approx(0.06)  # 6th order statistic
    assert hi == pytest.approx(0.15)  # 15th order statistic
    m, lo, hi = ratio_ci([1.1, 1.2], key=("r",))
    assert m == pytest.approx(0.15) and math.isnan(lo) and math.isnan(hi)


def test_scale_interval():
    assert scale_interval(0.05, 0.2, 0.1, 0.3) == pytest.approx((0.025, 0.075))
    # A negative slowdown flips the bounds: the result is still ordered.
    assert scale_interval(0.1, -0.2, -0.3, -0.1) == pytest.approx((0.05, 0.15))
    assert all(math.isnan(v) for v in scale_interval(0.1, 0.0, -0.1, 0.1))
    assert all(math.isnan(v) for v in scale_interval(0.1, float("nan"), 0.0, 0.1))
    assert all(math.isnan(v) for v in scale_interval(0.1, 0.2, float("nan"), 0.3))


def test_relative_spread():
    assert relative_spread([5, 1, 3, 2, 4]) == pytest.approx(2 / 3)
    assert math.isnan(relative_spread([7]))
    assert relative_spread([10, 10, 10, 10]) == 0.0


# --- trend --------------------------------------------------------------------------------------------------------


def _drift(n: int, rel: float, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    rng = np.random.default_rng(seed)
    t = 1_700_000_000_000_000_000 + np.arange(n, dtype=np.int64) * 1_000_000  # int64 ns near a real epoch
    frac = (t - t[0]) / (t[-1] - t[0])
    x = 1000.0 * (1.0 + rel * frac) + rng.normal(0.0, 10.0, n)
    true_rel = 1000.0 * rel / (1000.0 * (1.0 + rel / 2))  # slope * span / median
    return t, x, true_rel


def test_trend_detects_linear_drift():
    t, x, true_rel = _drift(500, 0.1, seed=7)
    tau, p, rel = trend(t, x)
    assert p < 0.01 and tau > 0.3
    assert rel == pytest.approx(true_rel, abs=0.01)
    tau, p, rel = trend(t, x[::-1])
    assert p < 0.01 and tau < -0.3 and rel == pytest.approx(-true_rel, abs=0.01)


def test_trend_iid_noise_not_significant():
    rng = np.random.default_rng(8)
    t = np.arange(300, dtype=np.int64) * 1000
    tau, p, rel = trend(t, rng.normal(100.0, 5.0, 300))
    assert p > 0.01
    assert abs(tau) < 0.1 and abs(rel) < 0.05


def test_trend_subsample_and_unsorted_time():
    t, x, true_rel = _drift(5000, -0.08, seed=9)
    perm = np.random.default_rng(10).permutation(5000)
    a = trend(t, x)
    assert a == trend(t[perm], x[perm])
    tau, p, rel = a
    assert p < 0.01 and tau < 0
    assert rel == pytest.approx(true_rel, abs=0.01)


def test_trend_tau_b_matches_brute_force_with_ties():
    t = np.array([1, 2, 2, 3, 4, 5, 5, 5, 6, 7, 8, 9], dtype=np.int64)
    x = np.array([3, 1, 4, 4, 2, 5, 5, 6, 3, 7, 7, 9], dtype=float)
    conc = sum(np.sign(t[j] - t[i]) * np.sign(x[j] - x[i]) for i in range(12) for j in range(i + 1, 12))
    n0 = 12 * 11 / 2
    ties_t = sum(c * (c - 1) / 2 for c in np.unique(t, return_counts=True)[1])
    ties_x = sum(c * (c - 1) / 2 for c in np.unique(x, return_counts=True)[1])
    tau, _, _ = trend(t, x)
    assert tau == pytest.approx(conc / math.sqrt((n0 - ties_t) * (n0 - ties_x)))


def test_trend_tie_corrected_variance_equals_permutation_variance():
    # With distinct times and ties in x, Var(S) under H0 is exactly the variance over all permutations of x.
    x = np.array([1, 1, 2, 2, 2, 3, 4], dtype=float)
    t = np.arange(7, dtype=np.int64)
    iu, ju = np.triu_indices(7, k=1)
    s_all = np.array([np.sum(np.sign(np.array(p)[ju] - np.array(p)[iu])) for p in itertools.permutations(x)])
    var_exact = float(np.mean(s_all**2))
    observed = np.array([1, 2, 1, 3, 2, 4, 2], dtype=float)
    s_obs = float(np.sum(np.sign(observed[ju] - observed[iu])))
    _, p, _ = trend(t, observed)
    z = NormalDist().inv_cdf(1 - p / 2)
    assert ((abs(s_obs) - 1) / z) ** 2 == pytest.approx(var_exact, rel=1e-9)


def test_trend_ties_and_tiny_n():
    t = np.arange(50, dtype=np.int64)
    tau, p, rel = trend(t, np.full(50, 7.0))
    assert p == 1.0 or math.isnan(p)
    assert math.isnan(tau) and rel == 0.0
    tau, p, rel = trend([1, 2, 3], [1.0, 2.0, 3.0])
    assert math.isnan(tau) and p == 1.0 and math.isnan(rel)
    tau, p, rel = trend(np.zeros(10, dtype=np.int64), np.arange(10.0))  # all at one instant: no time axis
    assert p == 1.0 and math.isnan(rel)


def _trend_by_all_pairs(t_ns, x) -> tuple[float, float, float]:
    """trend as it was written first: every pair through np.triu_indices, S as a float sum of sign products, the
    Theil-Sen slope by np.median (the reference of the shortcut in traceql.stats)."""
    from traceql.stats import _norm_sf, _tie_sums

    t_all, x_all = np.asarray(t_ns).ravel(), np.asarray(x, dtype=np.float64).ravel()
    n = x_all.size
    if n < 4:
        return math.nan, 1.0, math.nan
    order = np.argsort(t_all, kind="stable")
    if n > 500:
        order = order[np.linspace(0, n - 1, 500).round().astype(np.int64)]
    t, xs = t_all[order], x_all[order]
    m = xs.size
    i, j = np.triu_indices(m, k=1)
    dt = (t[j] - t[i]).astype(np.float64)
    dx = xs[j] - xs[i]
    s_stat = float(np.sum(np.sign(dt) * np.sign(dx)))
    n0 = m * (m - 1) / 2.0
    n1, vt, t1, t2 = _tie_sums(t)
    n2, vu, u1, u2 = _tie_sums(xs)
    denom = math.sqrt((n0 - n1) * (n0 - n2))
    tau = s_stat / denom if denom > 0 else math.nan
    var = ((m * (m - 1) * (2 * m + 5) - vt - vu) / 18.0 + t1 * u1 / (2.0 * m * (m - 1))
           + t2 * u2 / (9.0 * m * (m - 1) * (m - 2)))
    p = min(1.0, 2.0 * _norm_sf((abs(s_stat) - 1.0) / math.sqrt(var))) if var > 0 and s_stat != 0 else 1.0
    moving = dt != 0
    med_x = float(np.median(x_all))
    if not moving.any() or med_x == 0:
        return tau, p, math.nan
    slope = float(np.median(dx[moving] / dt[moving]))
    return tau, p, slope * float(t_all.max() - t_all.min()) / med_x


def _bits(values) -> bytes:
    return np.asarray(values, dtype=np.float64).tobytes()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_trend_equals_all_pairs_bit_for_bit():
    """The shortcut (pairs gathered into kept buffers, S counted, the median slope selected in place) gives what every
    pair through np.triu_indices and np.median give, to the bit: times with and without ties, sorted or not, int64,
    int32 and float; values with ties, constant (a zero median), signed zeros, NaN and infinities (the other path);
    ranges that overflow; above and below the 500-point subsample; odd and even numbers of pairs."""
    rng = np.random.default_rng(2024)
    cases = []
    for trial in range(600):
        n = int(rng.choice([4, 5, 6, 7, 31, 32, 499, 500, 501, 1500]))
        t = np.sort(rng.integers(0, 10**9, n)) + 1_700_000_000_000_000_000
        kind = trial % 8
        if kind == 1:
            t = rng.integers(0, 20, n).astype(np.int32 if trial % 3 == 0 else np.int64)  # ties, not in order
        elif kind == 2:
            t = np.full(n, 5, dtype=np.int64)  # one instant
        elif kind == 3:
            t = rng.permutation(n).astype(np.float64)
        x = rng.normal(1e4, 300, n)
        if kind in (1, 4):
            x = np.round(rng.normal(10, 2, n))
        elif kind == 5:
            x = np.full(n, 7.0)
        elif kind == 6:
            x = rng.integers(-1, 2, n).astype(float)
            x[x == 0] = rng.choice([0.0, -0.0], int((x == 0).sum()))
        elif kind == 7:
            x[rng.integers(0, n)] = rng.choice([np.nan, np.inf, -np.inf])
        cases.append((t, x))
    x6 = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    cases += [(np.array([-2**62, 0, 2**62, 2**62 + 5, 3, 9], dtype=np.int64), x6),  # the range overflows int64
              (np.array([0, 1e308, -1e308, 5, 6, 7]), x6),
              (np.array([0, 3, 2**63 - 1, 5, 2, 1], dtype=np.uint64), x6),
              (np.arange(6, dtype=np.int64), np.array([1e308, -1e308, 0, 1, 2, 3]))]  # x's range overflows
    for t, x in cases:
        assert _bits(trend(t, x)) == _bits(_trend_by_all_pairs(t, x)), (t, x)


# --- split_modes --------------------------------------------------------------------------------------------------


def test_split_modes_two_clusters_in_original_order():
    rng = np.random.default_rng(11)
    big = rng.random(400) < 0.3
    x = np.where(big, 595_000.0, 14_000.0) * rng.normal(1.0, 0.02, 400)
    labels = split_modes(x, 1.25)
    np.testing.assert_array_equal(labels, big.astype(np.int64))


def test_split_modes_one_cluster_stays_one():
    rng = np.random.default_rng(12)
    x = 80_000.0 * rng.normal(1.0, 0.03, 2000)
    np.testing.assert_array_equal(split_modes(x, 1.25), np.zeros(2000, dtype=np.int64))


def test_split_modes_three_modes_and_non_positive():
    x = np.array([100.0, 10.0, 0.0, 1000.0, 11.0, -5.0, 105.0, float("nan"), 990.0])
    labels = split_modes(x, 2.0)
    np.testing.assert_array_equal(labels, [1, 0, -1, 2, 0, -1, 1, -1, 2])
    np.testing.assert_array_equal(split_modes([0.0, -1.0], 2.0), [-1, -1])
    with pytest.raises(ValueError):
        split_modes(x, 1.0)


_VALUES = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False).map(lambda v: round(v, 1))


@settings(max_examples=300, deadline=None)
@given(st.lists(_VALUES, min_size=1, max_size=60), st.integers(0, 2**32 - 1), st.integers(1, 40))
def test_boot_medians_are_the_medians_of_the_resamples(values, seed, n_boot):
    """The bootstrap medians come from the sorted index rows; they are exactly np.median of the resampled values (ties,
    odd and even sizes, one value)."""
    from traceql.stats import _boot_medians

    a = np.sort(np.asarray(values, dtype=np.float64))
    want = np.median(a[np.random.default_rng(seed).integers(0, a.size, size=(n_boot, a.size))], axis=1)
    assert np.array_equal(_boot_medians(a, np.random.default_rng(seed), n_boot), want)


def _boot_medians_by_sort(a: np.ndarray, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """_boot_medians as it was written first: each index row sorted, its middle read."""
    n = a.size
    idx = np.sort(rng.integers(0, n, size=(n_boot, n)), axis=1)
    k = n // 2
    if n % 2:
        return a[idx[:, k]].astype(np.float64)
    return (a[idx[:, k - 1]] + a[idx[:, k]]) / 2.0


def test_boot_medians_by_partition_equal_those_by_sort():
    """Rows long enough to be partitioned (and short ones, sorted) give the medians of the sorted rows, to the bit,
    from the same draws: odd and even sizes about the threshold and up to the largest side, ties, one resample."""
    from traceql.stats import _BOOT_SORT_MAX_N, _boot_medians

    rng = np.random.default_rng(77)
    sizes = [2, 3, _BOOT_SORT_MAX_N - 1, _BOOT_SORT_MAX_N, _BOOT_SORT_MAX_N + 1, _BOOT_SORT_MAX_N + 2, 399, 400, 4000]
    sizes += rng.integers(2, 4001, 40).tolist()
    for trial, n in enumerate(sizes):
        a = [rng.normal(1e4, 100, n), np.round(rng.normal(10, 2, n)), rng.integers(0, 3, n).astype(float)][trial % 3]
        a = np.sort(a)
        for n_boot in (1, 7, 500):
            seed = int(rng.integers(0, 2**32))
            got = _boot_medians(a, np.random.default_rng(seed), n_boot)
            assert _bits(got) == _bits(_boot_medians_by_sort(a, np.random.default_rng(seed), n_boot)), (n, n_boot)


# --- quantiles of sorted arrays -----------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.floats(-1e12, 1e12, allow_nan=False), st.sampled_from([0.0, 1.5, 1e3, 1e3 + 0.5])),
                min_size=1, max_size=80),
       st.lists(st.floats(0, 1), min_size=1, max_size=5))
def test_sorted_quantiles_and_median_equal_numpys_bit_for_bit(values, qs):
    from traceql.stats import sorted_median, sorted_quantiles

    a = np.array(values)
    s = np.sort(a)
    qs = tuple(qs) + (0.25, 0.5, 0.75, 0.025, 0.975)
    for method in ("linear", "inverted_cdf"):
        assert sorted_quantiles(s, qs, method) == np.quantile(a, qs, method=method).tolist()
    assert sorted_median(s) == np.median(a)
    assert sorted_quantiles(np.sort(np.append(a, np.nan)), (0.5,)) != sorted_quantiles(s, (0.5,))  # NaN is NaN


# --- SQL's median ---------------------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(-1e6, 1e6, allow_nan=False)), min_size=1, max_size=30),
       st.sampled_from([1, 256]))
def test_medians_are_duckdbs_to_the_bit(rows, partition_min):
    """group_medians and sql_median give DuckDB's ``median`` of DOUBLE exactly: between the two middle values of an
    even count, (lo + hi) / 2, which lo + (hi - lo) / 2 misses in the last bit for about one pair in ten; a group
    partitioned alone and groups sorted together alike."""
    import duckdb

    import traceql.stats as s

    keys = np.array([k for k, _ in rows], dtype=np.int64)
    values = np.array([v for _, v in rows], dtype=np.float64)
    con = duckdb.connect()
    con.execute("CREATE TABLE t (k BIGINT, v DOUBLE)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(int(k), float(v)) for k, v in rows])
    want = con.execute("SELECT k, median(v) FROM t GROUP BY k ORDER BY k").fetchall()
    saved, s._PARTITION_MIN = s._PARTITION_MIN, partition_min
    try:
        got_keys, got = group_medians(keys, values)
    finally:
        s._PARTITION_MIN = saved
    assert [(int(k), float(m)) for k, m in zip(got_keys, got, strict=True)] == want
    for k, m in want:
        assert sql_median(values[keys == k]) == m
    assert sql_median(np.array([])) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 5), min_size=1, max_size=60),
       st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 5), max_size=60))
def test_grouped_and_lookup_are_a_stable_sort_and_a_binary_search(keys, at):
    """``grouped``: the order of a stable sort by key (equal keys in the order they came), the sorted distinct keys
    and where each begins; ``lookup``: each key's value by binary search in the sorted keys, NaN where absent. Keys
    over the whole range of 64 bits, and small ones that repeat."""
    keys = np.array(keys, dtype=np.uint64)
    distinct, order, starts = grouped(keys)
    want = np.argsort(keys, kind="stable")
    assert order.tolist() == want.tolist()
    assert distinct.tolist() == sorted(set(keys.tolist()))
    assert starts.tolist() == [int(np.searchsorted(keys[want], k)) for k in distinct]
    values = np.arange(len(distinct), dtype=np.float64) * 1.5
    at = np.array(at, dtype=np.uint64)
    expect = [values[distinct.tolist().index(a)] if a in distinct.tolist() else None for a in at.tolist()]
    got = lookup(distinct, values, at)
    assert [None if np.isnan(g) else g for g in got.tolist()] == expect


def test_sql_median_of_a_pair_that_interpolation_misses():
    """A pair where lo + (hi - lo) / 2 and (lo + hi) / 2 differ: DuckDB's value is the second."""
    lo, hi = 0.027, 8.159
    assert lo + (hi - lo) / 2 != (lo + hi) / 2
    assert sql_median(np.array([hi, lo])) == (lo + hi) / 2


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.one_of(st.none(), st.floats(-1e3, 1e3, allow_nan=False), st.just(float("nan"))),
                         max_size=12), min_size=1, max_size=6),
       st.sampled_from([1, 3, 256]))
def test_segment_medians_are_duckdbs(segments, partition_min):
    """segment_medians gives DuckDB's grouped ``median`` to the bit: NULLs skipped, NaN the largest value, a segment
    of only NULLs (or none) not found; segments partitioned each and sorted together alike."""
    import duckdb

    import traceql.stats as s

    rows = [(g, v) for g, seg in enumerate(segments) for v in seg]
    values = np.array([np.nan if v is None else v for _, v in rows], dtype=np.float64)
    present = np.array([v is not None for _, v in rows], dtype=bool)
    starts = np.cumsum([0] + [len(seg) for seg in segments[:-1]])
    con = duckdb.connect()
    con.execute("CREATE TABLE t (g BIGINT, v DOUBLE)")
    if rows:
        con.executemany("INSERT INTO t VALUES (?, ?)", rows)
    want = dict(con.execute("SELECT g, median(v) FROM t GROUP BY g").fetchall())
    saved, s._PARTITION_MIN = s._PARTITION_MIN, partition_min
    try:
        medians, found = segment_medians(values, starts, present)
    finally:
        s._PARTITION_MIN = saved
    for g in range(len(segments)):
        w = want.get(g)
        if w is None:
            assert not found[g]
        else:
            assert found[g] and (medians[g] == w or (math.isnan(w) and math.isnan(medians[g]))), (g, medians[g], w)
