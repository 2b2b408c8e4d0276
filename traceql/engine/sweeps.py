"""Exact interval sweeps over one device's activities, in integer numpy.

Every activity is a closed-open interval [start, end) in int64 ns with a class (``COMM``, ``COMPUTE``, ``COPY``)
and the SMs it holds. The step functions of concurrency change only at activity boundaries, so the sweep sorts
the distinct boundaries once, turns starts and ends into per-boundary deltas (``np.bincount``), and integrates each
indicator up to every boundary with one cumulative sum. The integral over an activity is then the difference of
two prefix values, found by the activity's boundary indices: O(n log n) for the sort, O(n) for everything else.
No floating point enters the time and SM·ns integrals.

These are the definitions of ``queries/_activity_steps.sql`` and ``queries/_instance_overlap.sql`` (kept as the
reference SQL); ``tests/test_engine.py`` checks both against each other and against a brute-force count.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

COMM, COMPUTE, COPY = 0, 1, 2
CLASS_CODES = {"comm": COMM, "compute": COMPUTE, "copy": COPY}


@dataclass(frozen=True)
class Boundaries:
    """The distinct boundaries of a set of intervals and each interval's index into them."""
    t: np.ndarray  # sorted distinct boundary times (int64)
    i_start: np.ndarray  # index of each interval's start in t
    i_end: np.ndarray  # index of each interval's end in t

    @classmethod
    def of(cls, start: np.ndarray, end: np.ndarray) -> Boundaries:
        n = len(start)
        if n < 2 or np.any(start[1:] < start[:-1]):
            t, inverse = np.unique(np.concatenate([start, end]), return_inverse=True)
            return cls(t, inverse[:n], inverse[n:])
        # starts in time order (a device's activities as the engine reads them): the ends sorted on their own (nearly
        # in order already), then the two sorted runs merged (a stable sort of two runs is one merge), where a sort
        # of all the times took twice as long (1.25 M activities: 0.06 against 0.11-0.14 s)
        by_end = np.argsort(end, kind="stable")
        both = np.concatenate([start, end[by_end]])
        order = np.argsort(both, kind="stable")
        times = both[order]
        first = np.empty(len(times), dtype=bool)
        first[0] = True
        np.not_equal(times[1:], times[:-1], out=first[1:])
        inverse = np.empty(len(times), dtype=np.int64)
        inverse[order] = np.cumsum(first) - 1
        i_end = np.empty(n, dtype=np.int64)
        i_end[by_end] = inverse[n:]
        return cls(times[first], inverse[:n], i_end)

    @cached_property
    def seg(self) -> np.ndarray:
        """Length of the segment that starts at each boundary (the last one has length 0)."""
        out = np.zeros(len(self.t), dtype=np.int64)
        out[:-1] = np.diff(self.t)
        return out

    def level(self, weight: np.ndarray | None = None, mask: np.ndarray | None = None) -> np.ndarray:
        """The step function sum(weight of intervals active) on each segment [t[k], t[k+1])."""
        i_s, i_e = self.i_start, self.i_end
        w = weight
        if mask is not None:
            i_s, i_e = i_s[mask], i_e[mask]
            w = None if weight is None else weight[mask]
        m = len(self.t)
        if w is None:
            delta = np.bincount(i_s, minlength=m).astype(np.int64) - np.bincount(i_e, minlength=m)
        else:
            delta = np.bincount(i_s, weights=w, minlength=m) - np.bincount(i_e, weights=w, minlength=m)
            if w.dtype.kind in "iu":
                # integer weights (SMs): bincount sums them in float64, exact below 2**53
                delta = np.rint(delta).astype(np.int64)
        return np.cumsum(delta)

    def prefix(self, integrand: np.ndarray) -> np.ndarray:
        """P[k] = integral of a step function (one value per segment) from t[0] to t[k]."""
        out = np.zeros(len(self.t), dtype=np.result_type(integrand, np.int64))
        np.cumsum((integrand * self.seg)[:-1], out=out[1:])
        return out

    def over(self, prefix: np.ndarray) -> np.ndarray:
        """Each interval's integral of the step function whose prefix is ``prefix``."""
        return prefix[self.i_end] - prefix[self.i_start]

    def integral(self, weight: np.ndarray | None = None, mask: np.ndarray | None = None) -> np.ndarray:
        """Each interval's integral of :meth:`level` (the summed weight of the intervals active, itself included)."""
        return self.over(self.prefix(self.level(weight, mask)))


def unions(start: np.ndarray, end: np.ndarray, cls: np.ndarray) -> dict[str, int]:
    """A device's unions alone (``overlap``'s totals, without the per-activity integrals): time with compute
    running, with communication running, and with both (ns)."""
    b = Boundaries.of(start, end)
    return _totals(b, b.level(mask=cls == COMM) > 0, b.level(mask=cls == COMPUTE) > 0)


@dataclass(frozen=True)
class DeviceOverlap:
    per_activity: dict[str, np.ndarray]  # in input order
    totals: dict[str, int]  # device-wide unions (ns)
    boundaries: Boundaries  # the device's, for further integrals


def overlap(start: np.ndarray, end: np.ndarray, cls: np.ndarray, sm_held: np.ndarray,
            sm_count: int | None, span: tuple[int, int | None] | None,
            fit: Fit) -> DeviceOverlap:
    """Per activity: time overlapped by each other class, by anything else, the SM·ns co-runners held, and of those
    the SM·ns they took from it, over it and from those already running as it started (:func:`taken`, with what
    each needs of an SM and leaves on it: ``fit``).

    An activity is active over its own interval, so "another of my class" is "two or more of my class" there and
    "anything else" is "two or more in all". Communication SMs are capped at the SM count as a whole.

    ``span`` (lo, hi; hi None for no end): the totals are the unions within [lo, hi) only, for a device swept in
    windows of time (the intervals given must then include every one running in that span).
    """
    b = Boundaries.of(start, end)
    n = {c: b.level(mask=cls == c) for c in (COMM, COMPUTE, COPY)}
    total = n[COMM] + n[COMPUTE] + n[COPY]
    p1 = {c: b.prefix(n[c] > 0) for c in n}
    p2 = {c: b.prefix(n[c] > 1) for c in n}

    def by_own_class(c: int) -> np.ndarray:
        return np.where(cls == c, b.over(p2[c]), b.over(p1[c]))

    sm = sm_held.astype(np.int64)
    sm_comm = b.level(sm, mask=cls == COMM)
    if sm_count is not None:
        sm_comm = np.minimum(sm_comm, sm_count)
    sm_comp = b.level(sm, mask=cls == COMPUTE)
    comm_sm = b.over(b.prefix(sm_comm))
    own_sm = sm * (end - start)
    per = {
        "comm_overlap_ns": by_own_class(COMM),
        "compute_overlap_ns": by_own_class(COMPUTE),
        "copy_overlap_ns": by_own_class(COPY),
        "overlap_ns": b.over(b.prefix(total > 1)),
        "corunner_sm_ns": np.maximum(0, comm_sm + b.over(b.prefix(sm_comp)) - own_sm),
        "comm_sm_ns": np.maximum(0, comm_sm - np.where(cls == COMM, own_sm, 0)),
    }
    per.update(taken(start, end, sm, fit))
    return DeviceOverlap(per, _totals(b, n[COMM] > 0, n[COMPUTE] > 0, span), b)


# an SM's limits when the device does not say (an H100's and an H200's): CTAs, warps, registers, shared memory bytes
SM_LIMITS = (32, 64, 65536, 233472)


@dataclass(frozen=True, eq=False)
class Fit:
    """What each activity needs of an SM and leaves on it, a row per resource. ``need``: per CTA as a victim (warps,
    registers, shared memory bytes; 0 for what it does not use or the export does not say); ``occ``: its CTAs per SM
    (0: not a kernel; copy engines take no SM and lose none); ``room``: what its resident CTAs leave on each SM it
    holds (CTA slots, warps, registers, shared memory bytes)."""
    need: np.ndarray  # (3, n) int64
    occ: np.ndarray  # (n,) int64
    room: np.ndarray  # (4, n) int64

    @classmethod
    def of(cls, ctas, threads, regs, smem, occ, sm_count: int | None, limits=SM_LIMITS) -> Fit:
        """From the launch configuration (masked where unknown: no need of it; ``occ`` masked or 0: not a kernel)
        and the device's limits (``queries/_instance_overlap.sql`` computes the same): a co-runner's CTAs are resident
        up to its occupancy, spread one per SM first (min(occupancy, ceil(CTAs / SMs)) on each SM it holds)."""
        ctas, threads, regs, smem, occ = (np.ma.filled(np.ma.asarray(x), 0).astype(np.int64)
                                          for x in (ctas, threads, regs, smem, occ))
        warps = -(-threads // 32)
        need = np.stack([warps, regs * 32 * warps, smem])
        per_sm = np.maximum(ctas, 1) if sm_count is None else max(sm_count, 1)  # no SM count: one per SM
        resident = np.minimum(occ, -(-ctas // per_sm))
        room = np.array(limits, dtype=np.int64)[:, None] - resident[None, :] * np.vstack([np.ones_like(resident), need])
        return cls(need, np.maximum(occ, 0), room)

    @cached_property
    def _need_f(self) -> np.ndarray:
        return np.where(self.need > 0, self.need, np.nan)  # NaN: not needed, no limit

    def lost(self, v: np.ndarray, c: np.ndarray) -> np.ndarray:
        """Victim v's CTA slots per SM lost beside co-runner c's resident CTAs: its occupancy less the CTAs of it that
        still fit (the tightest of c's room for CTAs, warps, registers and shared memory over what one of v's CTAs
        needs), within [0, occupancy]. (Floating division, exact here: the floor of a quotient of integers under
        2**31.)"""
        fits = self.room[0][c].astype(np.float64)
        for r in range(3):
            fits = np.fmin(fits, self.room[r + 1][c] / self._need_f[r][v])  # fmin: NaN (no limit) ignored
        occ = self.occ[v]
        return occ - np.clip(np.floor(fits), 0, occ).astype(np.int64)


PAIR_CHUNK = 1 << 20  # overlapping (activity, activity) pairs of taken() held at once


def taken(start: np.ndarray, end: np.ndarray, held: np.ndarray, fit: Fit) -> dict[str, np.ndarray]:
    """Per activity v, the SM·ns the kernels overlapping it took from it, two ways:

    - ``exclusive_sm_ns``: the SMs of each co-runner c beside whose resident CTAs not one CTA of v fits (v loses all
      its CTA slots there), times the time they overlap;
    - ``slots_sm_ns``: of each SM c holds, the share of v's CTA slots lost there, lost / occ_v, times the time they
      overlap (exact in integers: the numerators summed, then divided by occ_v, floor);

    and each of the co-runners already running at v's start (started at the same time included), each up to its end
    or v's (``exclusive_start_sm_ns``, ``slots_start_sm_ns``).

    The overlapping pairs are enumerated once: in start order, each interval i with every j that starts in
    [start_i, end_i) (j != i): i runs at j's start, and when i started first, j starts inside i. They are taken in
    pieces of about PAIR_CHUNK pairs, so that memory stays that of one piece."""
    n = len(start)
    out = {c: np.zeros(n, dtype=np.int64) for c in ("exclusive_sm_ns", "exclusive_start_sm_ns", "slots_sm_ns",
                                                    "slots_start_sm_ns")}
    kernels = np.flatnonzero((held > 0) | (fit.occ > 0))
    kernels = kernels[np.argsort(start[kernels], kind="stable")]
    s, e = start[kernels], end[kernels]
    lo = np.searchsorted(s, s, side="left")
    count = np.maximum(np.searchsorted(s, e, side="left") - lo, 0)
    cum = np.cumsum(count)

    def add(v, c, both, starting: bool):
        lost = fit.lost(v, c)
        w = held[c] * both
        whole = np.where((lost == fit.occ[v]) & (lost > 0), w, 0)
        share = lost * w
        np.add.at(out["exclusive_sm_ns"], v, whole)
        np.add.at(out["slots_sm_ns"], v, share)
        if starting:
            np.add.at(out["exclusive_start_sm_ns"], v, whole)
            np.add.at(out["slots_start_sm_ns"], v, share)

    a = 0
    while a < len(kernels):
        b = max(a + 1, int(np.searchsorted(cum, (cum[a - 1] if a else 0) + PAIR_CHUNK, side="right")))
        k = count[a:b]
        i = np.repeat(np.arange(a, b), k)
        j = np.arange(k.sum()) - np.repeat(np.cumsum(k) - k, k) + np.repeat(lo[a:b], k)
        i, j = i[i != j], j[i != j]
        both = np.minimum(e[i], e[j]) - s[j]  # j starts inside i: they overlap from j's start
        add(kernels[j], kernels[i], both, starting=True)  # i beside j, running at its start
        later = s[i] < s[j]
        add(kernels[i[later]], kernels[j[later]], both[later], starting=False)  # j beside i, started inside it
        a = b
    occ = np.maximum(fit.occ, 1)
    out["slots_sm_ns"] //= occ
    out["slots_start_sm_ns"] //= occ
    return out


def _totals(b: Boundaries, comm: np.ndarray, compute: np.ndarray, span: tuple[int, int | None] | None = None) \
        -> dict[str, int]:
    """Time with compute running, with communication running, and with both (ns), from whether each runs on each
    segment; within ``span`` only ([lo, hi), hi None: no end), if given."""
    seg = b.seg
    if span is not None:
        lo, hi = span
        if hi is not None:
            seg = np.clip(hi - b.t, 0, seg)  # the part of each segment before hi
        seg = np.where(b.t >= lo, seg, 0)
    return {"compute_ns": int(seg[compute].sum()), "comm_ns": int(seg[comm].sum()),
            "overlap_ns": int(seg[comm & compute].sum())}


def solo_samples(b: Boundaries, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The samples taken while one activity ran with nothing else on the device: sample k (of the sorted ``ts``)
    whose neighbours [ts[k-1], ts[k+1]] lie in one segment where exactly one interval is active, whatever part of the
    sampling period a sample stands for. Returns (sample indices, the index of that interval), in sample order."""
    if len(ts) < 3 or len(b.t) < 2:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    n = len(b.i_start)
    level = b.level()
    # on a segment of one interval, the sum of (index + 1) over the intervals active is that interval's index + 1
    who = b.level(weight=np.arange(1, n + 1, dtype=np.int64)) - 1
    k = np.arange(1, len(ts) - 1)
    seg = np.searchsorted(b.t, ts[k - 1], side="right") - 1  # t[seg] <= ts[k-1] < t[seg + 1]
    inside = (seg >= 0) & (seg < len(b.t) - 1)
    seg = np.clip(seg, 0, len(b.t) - 2)
    solo = inside & (level[seg] == 1) & (ts[k + 1] <= b.t[seg + 1])
    return k[solo], who[seg[solo]]


def sample_means(ts: np.ndarray, values: np.ndarray, start: np.ndarray, end: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Mean of the samples in (start, end] per interval, else the last sample at or before start (NaN if none).

    ``ts`` sorted; ``values`` NaN where the metric was not sampled: one value per sample, or a row of them per metric
    (then each result has a row per metric too). Returns (means, samples counted).
    """
    i0, i1 = np.searchsorted(ts, start, side="right"), np.searchsorted(ts, end, side="right")
    if values.ndim == 2:
        # a metric sampled at every sample counts i1 - i0 samples, and one never sampled none (NaN, as the general
        # rule gives: no sample, and none before): the general rule only for the others, the same values
        ok = ~np.isnan(values)
        full, none = ok.all(axis=1), ~ok.any(axis=1)
        means, k = np.full((len(values), len(start)), np.nan), np.zeros((len(values), len(start)), dtype=np.int64)
        if full.any():
            counted = i1 - i0
            k[full] = counted
            sampled = values[full]
            cum = np.zeros((len(sampled), len(ts) + 1))
            np.cumsum(sampled, axis=-1, out=cum[:, 1:])
            around = np.where(i0 > 0, sampled[:, np.maximum(i0 - 1, 0)], np.nan)
            with np.errstate(invalid="ignore", divide="ignore"):
                means[full] = np.where(counted > 0, (cum[:, i1] - cum[:, i0]) / counted, around)
        mixed = ~full & ~none
        if mixed.any():
            means[mixed], k[mixed] = _sample_means(values[mixed], i0, i1)
        return means, k
    return _sample_means(values, i0, i1)


def _sample_means(values: np.ndarray, i0: np.ndarray, i1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`sample_means` from each interval's sample indices (``i0``: the first after its start, ``i1``: the first
    after its end)."""
    ok = ~np.isnan(values)
    cum = np.zeros((*values.shape[:-1], values.shape[-1] + 1))
    np.cumsum(np.where(ok, values, 0.0), axis=-1, out=cum[..., 1:])
    cnt = np.zeros((*values.shape[:-1], values.shape[-1] + 1), dtype=np.int64)
    np.cumsum(ok, axis=-1, out=cnt[..., 1:])
    k = cnt[..., i1] - cnt[..., i0]
    around = np.where(i0 > 0, values[..., np.maximum(i0 - 1, 0)], np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(k > 0, (cum[..., i1] - cum[..., i0]) / k, around), k


def _firsts(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For rows sorted by (``a``, ``b``): whether each is the first of its (a, b)."""
    first = np.ones(len(a), dtype=bool)
    first[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    return first


def occurrence(key_a: np.ndarray, key_b: np.ndarray, t: np.ndarray, tiebreak: np.ndarray) -> np.ndarray:
    """For each row, how many rows with the same (``key_a``, ``key_b``) come before it in the order of (``t``,
    ``tiebreak``): SQL's ``row_number() OVER (PARTITION BY key_a, key_b ORDER BY t, tiebreak) - 1`` (the
    launches of a signature before each one in its NVTX range instance)."""
    return occurrence_and_counts(key_a, key_b, t, tiebreak)[0]


def occurrence_and_counts(key_a: np.ndarray, key_b: np.ndarray, t: np.ndarray, tiebreak: np.ndarray,
                          until: np.ndarray | None = None) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
    """:func:`occurrence`, and with ``until`` :func:`key_counts` (``key_a``, ``key_b``, ``until``) too, from the same
    sort. Rows already in the order of (``t``, ``tiebreak``) (a thread's launches as they are read) are sorted by the
    keys alone: a stable sort keeps each key's rows in that order, the same order as the sort by all four."""
    n = len(t)
    if n > 1 and bool(np.all((t[1:] > t[:-1]) | ((t[1:] == t[:-1]) & (tiebreak[1:] > tiebreak[:-1])))):
        order = np.lexsort((key_b, key_a))
    else:
        order = np.lexsort((tiebreak, t, key_b, key_a))
    a, b = key_a[order], key_b[order]
    first = _firsts(a, b)
    rank = np.arange(n) - np.maximum.accumulate(np.where(first, np.arange(n), 0))
    out = np.empty(n, dtype=np.int64)
    out[order] = rank
    if until is None:
        return out, None
    if not n:
        return out, (key_a, key_b, np.ones(0, dtype=np.int64), until)
    heads = np.flatnonzero(first)
    return out, (a[heads], b[heads], np.diff(np.r_[heads, n]), np.maximum.reduceat(until[order], heads))


def innermost(start: np.ndarray, end: np.ndarray, t: np.ndarray, back: np.ndarray | None = None) -> np.ndarray:
    """For each time of ``t``, the index of the last interval (in the given order) with start <= t <= end, or -1.

    ``start`` sorted (ties in the order the caller wants the last of them chosen): with NVTX ranges sorted by
    (start, text), the last one around t is the innermost, and ranges may nest or cross. For each t the candidates
    are the intervals before p (the first start past t); the answer is the last of them that ends at or after t,
    found by walking back from p - 1 along the chain of previous strictly greater ends (every interval skipped ends
    no later than the one it is skipped from, so before t). The walk takes as many steps as the ranges are deep.
    ``back``: ``previous_greater(end)``, if the caller has it already.
    """
    i = np.searchsorted(start, t, side="right") - 1
    if back is None:
        back = previous_greater(end)
    todo = np.flatnonzero(i >= 0)
    todo = todo[end[i[todo]] < t[todo]]
    while len(todo):
        i[todo] = back[i[todo]]
        todo = todo[i[todo] >= 0]
        todo = todo[end[i[todo]] < t[todo]]
    return i


def key_counts(key_a: np.ndarray, key_b: np.ndarray, until: np.ndarray) -> tuple[np.ndarray, ...]:
    """The distinct (``key_a``, ``key_b``), sorted, with the rows of each and the latest ``until`` of each."""
    return _summed(key_a, key_b, np.ones(len(key_a), dtype=np.int64), until)


def merge_counts(x: tuple[np.ndarray, ...], y: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """Two ``key_counts`` results as one: counts summed, the latest ``until`` kept."""
    return _summed(*(np.concatenate([p, q]) for p, q in zip(x, y, strict=True)))


def _summed(a: np.ndarray, b: np.ndarray, n: np.ndarray, until: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per distinct (``a``, ``b``), sorted: the sum of ``n`` and the latest ``until``."""
    if not len(a):
        return a, b, n, until
    order = np.lexsort((b, a))
    a, b, n, until = a[order], b[order], n[order], until[order]
    first = np.flatnonzero(_firsts(a, b))
    return a[first], b[first], np.add.reduceat(n, first), np.maximum.reduceat(until, first)


def counts_before(counted: tuple[np.ndarray, ...], key_a: np.ndarray, key_b: np.ndarray) -> np.ndarray:
    """For each row's (``key_a``, ``key_b``), its count in ``counted`` (``key_counts``' sorted keys and counts), or
    0."""
    c_a, c_b, c_n = counted[:3]
    m, n = len(c_a), len(key_a)
    if not m or not n:
        return np.zeros(n, dtype=np.int64)
    a, b = np.concatenate([c_a, key_a]), np.concatenate([c_b, key_b])
    row = np.r_[np.zeros(m, dtype=bool), np.ones(n, dtype=bool)]
    order = np.lexsort((row, b, a))  # a counted key before the rows of the same key
    first, row = _firsts(a[order], b[order]), row[order]
    group = np.cumsum(first) - 1
    head = order[first]  # the first of each group: its count if it is a counted key
    value = np.where(head < m, c_n[np.minimum(head, m - 1)], 0)
    out = np.zeros(n, dtype=np.int64)
    out[order[row] - m] = value[group[row]]
    return out


def previous_greater(v: np.ndarray) -> np.ndarray:
    """For each k, the largest j < k with v[j] > v[k], or -1, by pointer jumping: every element between a
    candidate j and k is at most v[k], so a candidate with v[j] <= v[k] can jump to its own candidate."""
    back = np.arange(len(v)) - 1
    todo = np.flatnonzero(back >= 0)
    todo = todo[v[back[todo]] <= v[todo]]
    while len(todo):
        back[todo] = back[back[todo]]
        todo = todo[back[todo] >= 0]
        todo = todo[v[back[todo]] <= v[todo]]
    return back
