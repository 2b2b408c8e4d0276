"""Small, deterministic statistics for comparing kernel durations.

Durations of one kernel signature are compared: isolated instances (``t0``, the baseline) against
overlapped ones (``t1``). Every number a user may act on comes with a 95% interval, and every result is
byte-identical across runs: randomness only ever comes from a :class:`numpy.random.Generator` seeded by
:func:`seed_for` on a caller-supplied key (never the global RNG, never Python's salted ``hash()``).

numpy only: the normal distribution comes from :func:`math.erfc` and :class:`statistics.NormalDist`.
"""

from __future__ import annotations

import hashlib
import math
import threading
from functools import lru_cache
from statistics import NormalDist

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import ArrayLike

NAN = float("nan")

# Above this n the exact binomial sums get slow and the normal approximation is already within one rank.
_EXACT_MAX_N = 1000
# Mann-Kendall and Theil-Sen are O(n^2) in memory; 2000 points is ~2M pairs.
# the test is O(n^2): 500 points evenly spaced in time keep its power for drifts the baselines care about
_TREND_MAX_N = 500


def seed_for(*key: object) -> int:
    """A stable 64-bit seed from the ``repr`` of the key parts (blake2b, so it survives interpreter restarts)."""
    digest = hashlib.blake2b(repr(key).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _as_1d(x: ArrayLike) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).ravel()


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")


def _norm_sf(z: float) -> float:
    # erfc rather than 1 - erf keeps tiny p-values from rounding to 0.
    return 0.5 * math.erfc(z / math.sqrt(2.0))


@lru_cache(maxsize=256)
def _median_ranks(n: int, level: float) -> tuple[int, int] | None:
    """1-based ranks (lo, n + 1 - lo) with P(lo <= K < n + 1 - lo) >= level for K ~ Binomial(n, 1/2); None if none."""
    alpha_half = (1.0 - level) / 2.0
    if n <= _EXACT_MAX_N:
        # Exact integer arithmetic: largest rank lo with P(K <= lo - 1) <= alpha/2.
        total = 2**n
        term, cum, lo = 1, 0, 0
        for k in range(n // 2 + 1):
            cum += term
            if cum / total > alpha_half:
                break
            lo = k + 1
            term = term * (n - k) // (k + 1)
    else:
        # Normal approximation with continuity correction to the same condition.
        z = NormalDist().inv_cdf(1.0 - alpha_half)
        lo = math.floor(n / 2.0 + 0.5 - z * math.sqrt(n) / 2.0)
    if lo < 1:
        return None
    return lo, n + 1 - lo


def median_ci(x: ArrayLike, level: float = 0.95, presorted: bool = False) -> tuple[float, float, float]:
    """(median, lo, hi): distribution-free CI of the median from order statistics.

    The ranks come from Binomial(n, 1/2) (exact for n <= 1000, normal approximation above), so the
    coverage is at least ``level`` for any continuous distribution. Bounds are NaN when n is too small
    for the level (n < 6 at 95%); all three are NaN for empty input. ``presorted``: ``x`` is a sorted float array
    (a sort of it again would cost as much as the first).
    """
    _check_level(level)
    a = x if presorted else np.sort(_as_1d(x))
    n = a.size
    if n == 0:
        return NAN, NAN, NAN
    med = sorted_median(a)
    ranks = _median_ranks(n, float(level))
    if ranks is None:
        return med, NAN, NAN
    lo, hi = ranks
    return med, float(a[lo - 1]), float(a[hi - 1])


def sorted_median(a: np.ndarray) -> float:
    """``np.median`` of a SORTED float array, the same value without numpy's overhead per call (tens of us, which a
    report of thousands of signature groups pays many times per group)."""
    n = a.size
    if n == 0 or math.isnan(a[-1]):
        return NAN
    k = n // 2
    return float(a[k]) if n % 2 else float((a[k - 1] + a[k]) / 2.0)


def group_medians(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The median of ``values`` per distinct key (sorted keys, medians), as DuckDB's ``median`` computes it: the
    middle value, or lo * 0.5 + hi * 0.5 between the two middle ones (lo + (hi - lo) / 2 differs in the last bit).
    The keys are grouped (:func:`grouped`), and each key's values partitioned (:func:`segment_medians`), not
    sorted."""
    if not len(keys):
        return keys, values
    distinct, order, first = grouped(keys)
    return distinct, segment_medians(values[order], first)[0]


def distinct_codes(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``keys`` (in no order) and each key's index among them: a hash of each key, not a sort."""
    enc = pc.dictionary_encode(pa.array(keys))
    return enc.dictionary.to_numpy(zero_copy_only=False), enc.indices.to_numpy(zero_copy_only=False)


def grouped(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sorted distinct ``keys``, the stable order that groups equal keys in that order, and where each group
    starts in it. For keys of a few distinct values (signatures): they are ranked through the distinct values, so
    the stable sort is of small integers, a radix sort, where one of 64-bit keys is a merge sort (22 against 64 ms
    for 1.25 M rows of 63 signatures)."""
    distinct, codes = distinct_codes(keys)
    by_value = np.argsort(distinct)
    rank = np.empty(len(distinct), dtype=np.uint16 if len(distinct) <= 1 << 16 else np.int64)
    rank[by_value] = np.arange(len(distinct))
    ranks = rank[codes]
    order = np.argsort(ranks, kind="stable")
    starts = np.r_[0, np.cumsum(np.bincount(ranks, minlength=len(distinct)))[:-1]]
    return distinct[by_value], order, starts


def lookup(keys: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """``values`` of the SORTED distinct ``keys`` at each of ``at``, NaN where absent: each distinct key of ``at``
    looked up once."""
    if not len(keys):
        return np.full(len(at), np.nan)
    distinct, codes = distinct_codes(at)
    i = np.minimum(np.searchsorted(keys, distinct), len(keys) - 1)
    return np.where(keys[i] == distinct, values[i], np.nan)[codes]


def _lexsorted_medians(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`group_medians` by one sort of (key, value): for many short groups, where a partition each costs more."""
    if not len(keys):
        return keys, values
    order = np.lexsort((values, keys))
    k, v = keys[order], values[order]
    first = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    rn = (np.diff(np.r_[first, len(k)]) - 1) * 0.5
    lo, hi = v[first + np.floor(rn).astype(np.int64)], v[first + np.ceil(rn).astype(np.int64)]
    return k[first], np.where(rn % 1 == 0, lo, lo * 0.5 + hi * 0.5)


def sql_median(values: np.ndarray) -> float | None:
    """SQL's ``median`` of ``values`` (no NULLs among them), as :func:`group_medians` computes it for one group:
    None when there are none. A partition, not a sort: linear in the values."""
    n = values.size
    if n == 0:
        return None
    k = n // 2
    if n % 2:
        return float(np.partition(values, k)[k])
    lo, hi = np.partition(values, (k - 1, k))[k - 1:k + 1]
    return float(lo * 0.5 + hi * 0.5)


# segments at least this long get a partition of their own (linear); shorter ones share one sort (few calls)
_PARTITION_MIN = 256


def segment_medians(values: np.ndarray, starts: np.ndarray, present: np.ndarray | None = None) \
        -> tuple[np.ndarray, np.ndarray]:
    """SQL's ``median`` (:func:`group_medians`) of ``values`` within each segment ``[starts[i], starts[i + 1])``
    (the last to the end), skipping values not ``present`` (NULLs): (medians, found), a median NaN where not found.
    Long segments are partitioned each (linear, not a sort), short ones sorted together."""
    if present is not None:
        keep = np.flatnonzero(present)
        values, starts = values[keep], np.searchsorted(keep, starts)
    sizes = np.diff(np.r_[starts, len(values)])
    medians = np.full(len(starts), np.nan)
    seg = np.repeat(np.arange(len(starts)), sizes)
    short = sizes[seg] < _PARTITION_MIN
    keys, found = _lexsorted_medians(seg[short], values[short])
    medians[keys] = found
    for i in np.flatnonzero(sizes >= _PARTITION_MIN):
        medians[i] = sql_median(values[starts[i]:starts[i] + sizes[i]])
    return medians, sizes > 0


def sorted_quantiles(a: np.ndarray, qs: tuple[float, ...], method: str = "linear") -> list[float]:
    """``np.quantile(a, qs, method=method)`` of a SORTED float array, the same values (numpy's index arithmetic and
    interpolation, in the same float64 operations) without its overhead per call. ``method``: linear or
    inverted_cdf."""
    n = a.size
    if n == 0:
        raise ValueError("quantiles of an empty array")
    if math.isnan(a[-1]):
        return [NAN] * len(qs)
    out = []
    for q in qs:
        if method == "inverted_cdf":
            v = n * q - 1
            i = math.floor(v)
            out.append(float(a[max(0, i if v - i == 0 else i + 1)]))
            continue
        if method != "linear":
            raise ValueError(f"method {method!r}: linear or inverted_cdf")
        v = (n - 1) * q
        if v >= n - 1:
            out.append(float(a[-1]))
            continue
        if v < 0:
            out.append(float(a[0]))
            continue
        i = math.floor(v)
        g = v - i
        lo, hi = float(a[i]), float(a[i + 1])
        d = hi - lo
        out.append(hi - d * (1 - g) if g >= 0.5 else lo + d * g)  # numpy's _lerp
    return out


# bootstrap index rows of at most this many are sorted, longer ones partitioned: numpy sorts short rows of int64
# faster than it selects in them (about 64 is where the two cost the same)
_BOOT_SORT_MAX_N = 64


def _boot_medians(a: np.ndarray, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """The medians of ``n_boot`` resamples of the SORTED ``a`` (with replacement): ``np.median(a[idx], axis=1)``,
    the same values, computed from the middle order statistics of the index rows (``a`` sorted, the k-th smallest of
    ``a[idx]`` is ``a`` at the k-th smallest index), which is faster than a partition of the values. Rows longer
    than ``_BOOT_SORT_MAX_N`` are partitioned at the upper middle k, not sorted (linear: a sort of 400 indices costs
    several times as much); for an even n the lower middle is then the largest index left of k. One kth, not
    (k - 1, k): numpy selects a single kth with vectorized code and several with a scalar introselect, which costs
    about twice as much here. The indices are integers, so the order statistic is one value however it is
    found, and the draw is the same call: the medians are those of the sort, bit for bit."""
    n = a.size
    idx = rng.integers(0, n, size=(n_boot, n))
    k = n // 2
    if n <= _BOOT_SORT_MAX_N:
        idx.sort(axis=1)
        hi = idx[:, k]
        lo = idx[:, k - 1] if n % 2 == 0 else hi
    else:
        idx.partition(k, axis=1)
        hi = idx[:, k]
        lo = idx[:, :k].max(axis=1) if n % 2 == 0 else hi
    if n % 2:
        return a[hi].astype(np.float64)
    return (a[lo] + a[hi]) / 2.0  # as np.median: the mean of the two


def slowdown_ci(t0: ArrayLike, t1: ArrayLike, *, key: tuple, level: float = 0.95, n_boot: int = 2000,
                max_n: int = 4000, presorted: bool = False) -> tuple[float, float, float]:
    """(s, lo, hi) with s = median(t1) / median(t0) - 1 and its percentile-bootstrap CI.

    t0 and t1 are resampled independently (they are different kernel instances, not pairs). Sides longer
    than ``max_n`` are first subsampled without replacement, which bounds memory at n_boot * max_n per side;
    the point estimate always uses all values. Bounds are NaN if either side has fewer than 2 values; all
    three are NaN if either side is empty or median(t0) <= 0. ``presorted``: both are sorted float arrays.
    """
    _check_level(level)
    if n_boot < 1 or max_n < 2:
        raise ValueError("n_boot must be >= 1 and max_n >= 2")
    # Sorted, so the result depends only on the multiset of durations, not on the order they were read in.
    a0, a1 = (t0, t1) if presorted else (np.sort(_as_1d(t0)), np.sort(_as_1d(t1)))
    if a0.size == 0 or a1.size == 0:
        return NAN, NAN, NAN
    m0 = sorted_median(a0)
    if not m0 > 0:
        return NAN, NAN, NAN
    s = sorted_median(a1) / m0 - 1.0
    if a0.size < 2 or a1.size < 2:
        return s, NAN, NAN

    sides = []
    for name, a in (("t0", a0), ("t1", a1)):
        if a.size > max_n:
            sub_rng = np.random.default_rng(seed_for(*key, "subsample", name))
            a = np.sort(sub_rng.choice(a, size=max_n, replace=False))
        sides.append(a)
    rng = np.random.default_rng(seed_for(*key, "bootstrap"))
    b0 = _boot_medians(sides[0], rng, n_boot)
    b1 = _boot_medians(sides[1], rng, n_boot)
    with np.errstate(divide="ignore", invalid="ignore"):
        # A resample whose baseline median is not positive has an unbounded slowdown.
        ratios = np.where(b0 > 0, b1 / b0 - 1.0, np.inf)
    # inverted_cdf picks actual bootstrap values (order statistics), so an infinite tail stays inf, not NaN.
    lo, hi = sorted_quantiles(np.sort(ratios), ((1.0 - level) / 2.0, (1.0 + level) / 2.0), "inverted_cdf")
    return s, lo, hi


def ratio_ci(r: ArrayLike, *, key: tuple, level: float = 0.95, n_boot: int = 2000,
             max_n: int = 4000) -> tuple[float, float, float]:
    """(median(r) - 1, lo - 1, hi - 1) for per-instance ratios r_i = d_i / t0_i, via :func:`median_ci`.

    ``key``, ``n_boot`` and ``max_n`` are unused: they keep the signature interchangeable with
    :func:`slowdown_ci`, and order statistics need no resampling.
    """
    del key, n_boot, max_n
    med, lo, hi = median_ci(r, level)
    return med - 1.0, lo - 1.0, hi - 1.0


def scale_interval(part: float, s: float, lo: float, hi: float) -> tuple[float, float]:
    """Interval of an explained part p of slowdown s: p is a fixed share of s, so it scales with s's bounds.

    Returns (p * lo / s, p * hi / s) in increasing order; NaN when s is NaN or ~0 (the share is undefined).
    """
    if math.isnan(s) or abs(s) < 1e-12:
        return NAN, NAN
    a, b = part * lo / s, part * hi / s
    if math.isnan(a) or math.isnan(b):
        return NAN, NAN
    return (a, b) if a <= b else (b, a)


def _tie_sums(v: np.ndarray) -> tuple[float, float, float, float]:
    """Sums over tie groups of size c: c(c-1)/2, c(c-1)(2c+5), c(c-1), c(c-1)(c-2)."""
    v = np.sort(v)
    edges = np.flatnonzero(v[1:] != v[:-1]) + 1  # np.unique's counts, without its overhead per call
    c = np.diff(np.concatenate(([0], edges, [v.size]))).astype(np.float64)
    c = c[c > 1]
    return (float(np.sum(c * (c - 1) / 2)), float(np.sum(c * (c - 1) * (2 * c + 5))),
            float(np.sum(c * (c - 1))), float(np.sum(c * (c - 1) * (c - 2))))


@lru_cache(maxsize=16)
def _pairs(m: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.triu_indices(m, k=1)``, kept (read-only) for the sizes the trend test meets again and again."""
    i, j = np.triu_indices(m, k=1)
    i.flags.writeable = j.flags.writeable = False
    return i, j


# per thread, the trend test's buffers for the pairs of up to _TREND_MAX_N points, kept between calls (:func:`_scratch`)
_SCRATCH = threading.local()


def _scratch(pairs: int) -> tuple[np.ndarray, ...]:
    """This thread's buffers for :func:`_later_pairs` over ``pairs`` pairs: two int64 (times), two float64 (values,
    then slopes), two boolean. Kept between calls: a fresh array of 1 MB is memory the allocator gives back to the
    system when it is freed and takes again, a page fault for each page, on the next call (some 1000 a call, which
    cost more than the arithmetic); the signatures are computed in parallel threads, hence one set a thread."""
    bufs = getattr(_SCRATCH, "trend", None)
    if bufs is None:
        size = _TREND_MAX_N * (_TREND_MAX_N - 1) // 2
        bufs = _SCRATCH.trend = (np.empty(size, np.int64), np.empty(size, np.int64), np.empty(size),
                                 np.empty(size), np.empty(size, bool), np.empty(size, bool))
    return tuple(b[:pairs] for b in bufs)


def _later_pairs(t: np.ndarray, xs: np.ndarray) -> tuple[float, int, float] | None:
    """(S, moving, slope) of :func:`trend` over the SORTED signed integer times ``t`` and the values ``xs``, or None
    where this shortcut does not hold (then :func:`_pairs_by_index` computes them): the Mann-Kendall sum over the
    pairs i < j of sign(t[j] - t[i]) * sign(xs[j] - xs[i]), the number of those pairs at different times, and the
    median of their Theil-Sen slopes (xs[j] - xs[i]) / float(t[j] - t[i]) as ``np.median`` takes it, bit for bit;
    NaN where there are none or it is zero (a zero's sign depends on which of equal values lands where:
    ``np.median`` itself decides it, on the slopes in their order).

    The same pairs' differences as :func:`_pairs_by_index`, gathered into this thread's buffers (:func:`_scratch`)
    and computed there in place. With no difference overflowing (the range of ``t`` within its type, that of ``xs``
    finite), t[j] - t[i] >= 0, so sign(dt) is 1 at different times and 0 at one time, and every dx is finite: S is
    the count of rising dx at different times less that of falling ones (the float sum of signs is exact: the same
    integer). Each slope is the same division (the int64 difference cast to float64 as ``astype`` casts it),
    finite; a pair at one time gets -inf, below them all, so the median is at a known rank of all the pairs. The
    upper middle comes from a partition at one kth (numpy selects a single kth with vectorized code, several with a
    scalar introselect: 4 times slower here), the lower middle is the largest value left of it, and their sum is
    halved as ``np.mean`` takes it (order statistics are values: any selection finds the same ones)."""
    if t.dtype.kind != "i" or int(t[-1]) - int(t[0]) > np.iinfo(t.dtype).max:
        return None
    with np.errstate(over="ignore", invalid="ignore"):  # a range that overflows, or NaN: the other path
        if not np.isfinite(xs.max() - xs.min()):
            return None
    i, j = _pairs(xs.size)
    t0, t1, x0, x1, moving, side = _scratch(i.size)
    t = t.astype(np.int64, copy=False)  # no difference overflows in t's own type: the same differences
    dt = np.subtract(np.take(t, j, out=t1, mode="clip"), np.take(t, i, out=t0, mode="clip"), out=t0)
    dx = np.subtract(np.take(xs, j, out=x1, mode="clip"), np.take(xs, i, out=x0, mode="clip"), out=x0)
    n_moving = int(np.count_nonzero(dt))
    at_one_time = n_moving < dt.size
    if at_one_time:
        np.not_equal(dt, 0, out=moving)
        rising = np.count_nonzero(np.logical_and(np.greater(dx, 0, out=side), moving, out=side))
        falling = np.count_nonzero(np.logical_and(np.less(dx, 0, out=side), moving, out=side))
    else:
        rising, falling = np.count_nonzero(np.greater(dx, 0, out=side)), np.count_nonzero(np.less(dx, 0, out=side))
    s_stat = float(rising - falling)
    if not n_moving:
        return s_stat, 0, NAN
    if at_one_time:
        np.divide(dx, dt, out=dx, where=moving)
        np.copyto(dx, -np.inf, where=np.logical_not(moving, out=side))
    else:
        np.divide(dx, dt, out=dx)
    k = dx.size - n_moving + n_moving // 2
    dx.partition(k)
    med = float(dx[k]) if n_moving % 2 else float((dx[:k].max() + dx[k]) / 2.0)
    return s_stat, n_moving, med if med != 0 else NAN


def _pairs_by_index(t: np.ndarray, xs: np.ndarray) -> tuple[float, np.ndarray]:
    """(S, slopes) of :func:`_later_pairs` for any ``t`` and ``xs``, through the pairs' indices: the slopes of the
    pairs at different times, in the pairs' order."""
    i, j = _pairs(xs.size)
    # Subtract before converting: int64 ns timestamps lose precision as float64, their differences do not.
    dt = (t[j] - t[i]).astype(np.float64)
    dx = xs[j] - xs[i]
    s_stat = float(np.sum(np.sign(dt) * np.sign(dx)))
    moving = dt != 0
    return s_stat, dx[moving] / dt[moving]


def trend(t_ns: ArrayLike, x: ArrayLike) -> tuple[float, float, float]:
    """(tau, p_value, rel_change): does x drift over time?

    Mann-Kendall test (Kendall tau-b of x against t, tie-corrected variance, normal approximation with
    continuity correction, two-sided p). rel_change is the Theil-Sen slope times the time span, relative to
    median(x): the fitted change over the whole window. Above 500 points an evenly spaced (in time order)
    subsample of 500 is used. n < 4 gives (nan, 1.0, nan); constant x gives tau NaN and p 1.0.
    """
    t_all = np.asarray(t_ns).ravel()
    x_all = _as_1d(x)
    if t_all.size != x_all.size:
        raise ValueError(f"t_ns and x differ in length: {t_all.size} != {x_all.size}")
    n = x_all.size
    if n < 4:
        return NAN, 1.0, NAN
    order = np.argsort(t_all, kind="stable")
    if n > _TREND_MAX_N:
        order = order[np.linspace(0, n - 1, _TREND_MAX_N).round().astype(np.int64)]
    t, xs = t_all[order], x_all[order]
    m = xs.size

    later = _later_pairs(t, xs)
    if later is not None:
        s_stat, n_moving, slope = later
    else:
        s_stat, slopes = _pairs_by_index(t, xs)
        n_moving, slope = slopes.size, NAN

    n0 = m * (m - 1) / 2.0
    n1, vt, t1, t2 = _tie_sums(t)
    n2, vu, u1, u2 = _tie_sums(xs)
    denom = math.sqrt((n0 - n1) * (n0 - n2))
    tau = s_stat / denom if denom > 0 else NAN
    var = ((m * (m - 1) * (2 * m + 5) - vt - vu) / 18.0 + t1 * u1 / (2.0 * m * (m - 1))
           + t2 * u2 / (9.0 * m * (m - 1) * (m - 2)))
    if var > 0 and s_stat != 0:
        z = (abs(s_stat) - 1.0) / math.sqrt(var)
        p = min(1.0, 2.0 * _norm_sf(z))
    else:
        p = 1.0

    med_x = sorted_median(np.sort(x_all))
    if not n_moving or med_x == 0:
        return tau, p, NAN
    if math.isnan(slope):  # no shortcut, or a zero median
        slope = float(np.median(slopes if later is None else _pairs_by_index(t, xs)[1]))
    span = float(t_all.max() - t_all.min())
    return tau, p, slope * span / med_x


def split_modes(x: ArrayLike, min_ratio: float) -> np.ndarray:
    """Integer mode labels 0..k-1 (by increasing value), in x's original order.

    Modes are separated wherever two consecutive sorted values differ by more than a factor ``min_ratio``
    (single-linkage on log(x)), so clusters of any count and width are found without choosing k.
    Non-positive (and NaN) values have no log and get -1.
    """
    if not min_ratio > 1.0:
        raise ValueError(f"min_ratio must be > 1, got {min_ratio!r}")
    a = _as_1d(x)
    labels = np.full(a.size, -1, dtype=np.int64)
    pos = np.flatnonzero(a > 0)
    if pos.size == 0:
        return labels
    lx = np.log(a[pos])
    order = np.argsort(lx, kind="stable")
    cuts = np.diff(lx[order]) > math.log(min_ratio)
    labels[pos[order]] = np.concatenate(([0], np.cumsum(cuts)))
    return labels


def relative_spread(x: ArrayLike, presorted: bool = False) -> float:
    """(q75 - q25) / median: a spread robust to the outliers kernel timings always have. NaN for n < 2.
    ``presorted``: ``x`` is a sorted float array."""
    a = x if presorted else _as_1d(x)
    if a.size < 2:
        return NAN
    q25, med, q75 = sorted_quantiles(a if presorted else np.sort(a), (0.25, 0.5, 0.75))
    if med == 0:
        return NAN
    return float((q75 - q25) / med)


def mean_ratio_ci(a: ArrayLike, b: ArrayLike, *, key: tuple, level: float = 0.95, n_boot: int = 2000,
                  max_n: int = 4000) -> tuple[float, float, float]:
    """(r, lo, hi) with r = mean(b) / mean(a) - 1 and its percentile-bootstrap CI (a and b resampled independently).

    The companion of :func:`slowdown_ci` for durations that are a mixture of different work (several modes), whose
    median jumps between modes while the mean follows the mix. Sides above ``max_n`` values are subsampled (seeded);
    bounds are NaN with fewer than 2 values on a side; all three are NaN if a side is empty or mean(a) <= 0.
    """
    _check_level(level)
    a0, a1 = np.sort(_as_1d(a)), np.sort(_as_1d(b))
    if a0.size == 0 or a1.size == 0 or not a0.mean() > 0:
        return NAN, NAN, NAN
    r = float(a1.mean() / a0.mean() - 1.0)
    if a0.size < 2 or a1.size < 2:
        return r, NAN, NAN
    b0, b1 = _boot_means(a0, a1, key=key, n_boot=n_boot, max_n=max_n)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(b0 > 0, b1 / b0 - 1.0, np.inf)
    lo, hi = np.quantile(ratios, [(1.0 - level) / 2.0, (1.0 + level) / 2.0], method="inverted_cdf")
    return r, float(lo), float(hi)


def mean_difference_ci(a: ArrayLike, b: ArrayLike, *, key: tuple, level: float = 0.95, n_boot: int = 2000,
                       max_n: int = 4000) -> tuple[float, float, float]:
    """(d, lo, hi) with d = mean(b) - mean(a) and its percentile-bootstrap CI; bounds NaN below 2 values a side."""
    _check_level(level)
    a0, a1 = np.sort(_as_1d(a)), np.sort(_as_1d(b))
    if a0.size == 0 or a1.size == 0:
        return NAN, NAN, NAN
    d = float(a1.mean() - a0.mean())
    if a0.size < 2 or a1.size < 2:
        return d, NAN, NAN
    b0, b1 = _boot_means(a0, a1, key=key, n_boot=n_boot, max_n=max_n)
    lo, hi = np.quantile(b1 - b0, [(1.0 - level) / 2.0, (1.0 + level) / 2.0], method="inverted_cdf")
    return d, float(lo), float(hi)


def _boot_means(a: np.ndarray, b: np.ndarray, *, key: tuple, n_boot: int, max_n: int) -> tuple[np.ndarray, np.ndarray]:
    if n_boot < 1 or max_n < 2:
        raise ValueError("n_boot must be >= 1 and max_n >= 2")
    sides = []
    for name, x in (("a", a), ("b", b)):
        if x.size > max_n:
            x = np.sort(np.random.default_rng(seed_for(*key, "subsample", name)).choice(x, size=max_n, replace=False))
        sides.append(x)
    rng = np.random.default_rng(seed_for(*key, "bootstrap"))
    return tuple(x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1) for x in sides)


def difference_interval(a: float, a_lo: float, a_hi: float, b: float, b_lo: float,
                        b_hi: float) -> tuple[float, float, float]:
    """(b - a, lo, hi): the interval of the difference of two independent estimates from their own intervals.

    MOVER (method of variance estimates recovery; Zou & Donner 2008): lo = d - sqrt((b - b_lo)^2 + (a_hi - a)^2),
    hi = d + sqrt((b_hi - b)^2 + (a - a_lo)^2). It works from any interval (bootstrap, order statistics), keeps their
    asymmetry, and reduces to the usual normal interval when both are symmetric normal intervals. NaN bounds when an
    input bound is missing.
    """
    d = b - a
    lo = d - math.sqrt((b - b_lo) ** 2 + (a_hi - a) ** 2)
    hi = d + math.sqrt((b_hi - b) ** 2 + (a - a_lo) ** 2)
    return d, (lo if math.isfinite(lo) else NAN), (hi if math.isfinite(hi) else NAN)


def _mann_whitney_cdf(m: int, n: int) -> np.ndarray:
    """P(U <= u) for u = 0..m*n, U the Mann-Whitney count of (i, j) with y_j < x_i under no difference, exactly: the
    coefficients of the Gaussian binomial [m+n choose m]_q = prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i), over C(m+n, m)."""
    m, n = min(m, n), max(m, n)
    poly = np.zeros(m * n + 1)
    poly[0] = 1.0
    for i in range(1, m + 1):
        shifted = np.zeros_like(poly)
        shifted[n + i:] = poly[:poly.size - n - i]
        poly = poly - shifted  # times (1 - q^(n+i))
        for r in range(i):  # divided by (1 - q^i): a running sum with stride i
            poly[r::i] = np.cumsum(poly[r::i])
    return np.cumsum(poly) / poly.sum()


def shift_ratio_ci(a: ArrayLike, b: ArrayLike, level: float = 0.95) -> tuple[float, float, float]:
    """(r, lo, hi): the change of b against a as a ratio - 1, for samples too small for a bootstrap.

    r is the Hodges-Lehmann estimate (the median of all pairwise ratios b_j / a_i) and [lo, hi] the exact
    distribution-free interval that inverts the Mann-Whitney test on log durations (order statistics of the pairwise
    log-ratios at ranks from U's exact null distribution). It exists once C(m+n, m) >= 2 / (1 - level): from 4 values a
    side at 95%; bounds are NaN below that, and all three NaN when a value is not positive.
    """
    _check_level(level)
    x, y = _as_1d(a), _as_1d(b)
    if x.size == 0 or y.size == 0 or (x <= 0).any() or (y <= 0).any():
        return NAN, NAN, NAN
    d = np.sort((np.log(y)[None, :] - np.log(x)[:, None]).ravel())
    r = float(np.exp(np.median(d)) - 1.0)
    cdf = _mann_whitney_cdf(x.size, y.size)
    alpha_half = (1.0 - level) / 2.0
    k = int(np.searchsorted(cdf, alpha_half, side="right"))  # P(U <= k - 1) <= alpha/2: ranks k+1 .. mn-k
    if k < 1:
        return r, NAN, NAN
    return r, float(np.exp(d[k - 1]) - 1.0), float(np.exp(d[d.size - k]) - 1.0)
