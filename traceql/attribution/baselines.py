"""Like-for-like baselines and their uncertainty, per instance and per (sub-)signature.

Reads ``instance_facts`` (one row per GPU activity) and writes two tables the SQL views read:

* ``_instance_baselines``: per activity, the group it is compared within (signature, split into duration modes by
  launch context where the signature's isolated durations are a mixture), the baseline duration ``t0_ns`` it is compared
  with and where that comes from;
* ``_signature_stats``: per group, t0 and t1 (medians) with distribution-free intervals, the slowdown with a
  bootstrap interval, significance, baseline drift over time, whether the group is a mixture that could not
  be split (excluded from aggregate slowdowns), and the medians of the per-instance rates that ``kernel_signatures``
  and ``instance_predictions`` report (over the isolated instances of its pool, and over its overlapped instances),
  taken here because here a pool's instances are together: SQL would hold every instance's values at once.

The constants that decide a class are calibrated on measured traces; ``docs/attribution.md`` says on which.
Everything is deterministic: groups are processed in sorted order and every random draw is seeded by its group.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import duck, stats

# Calibrated with benchmarks/calibrate_baselines.py on the bundled real traces (H100 and H200 known-cause traces, the
# H200 contention, overlap and DDP traces); docs/attribution.md has the figures. Within one case range (the same work
# by construction) consecutive sorted isolated durations are at most 1.05x apart and the relative spread is at most
# 0.07 (durations spread wider than MODE_MIN_GAP_NS); different work under one signature (GEMMs over another K, a
# DDP step's GEMMs) is 1.75x apart and more. MODE_RATIO sits between, MAX_SPREAD well above the noise.
MODE_RATIO = 1.25
# Short activities jitter by hundreds of ns (memsets: IQR up to 456 ns): modes or spreads closer than this are noise.
MODE_MIN_GAP_NS = 2_000
MAX_SPREAD = 0.25
# Significance: the slowdown interval excludes 0 and the slowdown is at least this large (a practical floor).
PRACTICAL_FLOOR = 0.01
# Baseline drift: Mann-Kendall p-value below this and a change over the isolated instances' span of at least
# PRACTICAL_FLOOR; then each overlapped instance is compared with its nearest isolated instances in time.
DRIFT_P = 0.01
NEAREST_K = 5
LEVEL = 0.95
# bootstrap resamples, and the most values per side it resamples from (a seeded subsample beyond): against 2000
# resamples of up to 4000 values, no bound of the H100 known-cause trace moves by more than 17% of its interval's width
N_BOOT = 500
MAX_N = 400

# per-instance rates whose medians each group reports: over the isolated instances of its pool (its baseline's
# witnesses, whatever their NVTX group), and over its own overlapped instances (kernel_signatures' *_iso, *_ovl)
ISO_MEDIANS = ("dram_pct", "gpc_clock_mhz", "cycles", "sm_active_pct", "power_w", "sm_issue_pct")
OVL_MEDIANS = ("dram_pct", "gpc_clock_mhz", "cycles", "sm_active_pct", "nvlink_pct", "pcie_pct", "power_w")
RATES = tuple(dict.fromkeys(ISO_MEDIANS + OVL_MEDIANS))

INSTANCE_SCHEMA = pa.schema([
    ("run_id", pa.string()), ("activity_id", pa.int64()), ("group_id", pa.int64()), ("pool_id", pa.int64()),
    ("t0_ns", pa.float64()),
    ("baseline", pa.string()),
    ("clock0_mhz", pa.float64()),
])
STATS_SCHEMA = pa.schema([
    ("group_id", pa.int64()), ("run_id", pa.string()), ("device_id", pa.int32()), ("nvtx", pa.string()),
    ("sig", pa.uint64()), ("mode", pa.int64()), ("split", pa.string()), ("n", pa.int64()),
    ("n_overlapped", pa.int64()), ("n_isolated", pa.int64()), ("t0_ns", pa.float64()), ("t0_lo_ns", pa.float64()),
    ("t0_hi_ns", pa.float64()), ("t0_spread", pa.float64()), ("t1_ns", pa.float64()), ("t1_lo_ns", pa.float64()),
    ("t1_hi_ns", pa.float64()), ("slowdown", pa.float64()), ("slowdown_lo", pa.float64()),
    ("slowdown_hi", pa.float64()), ("significant", pa.bool_()), ("baseline", pa.string()),
    ("drift_tau", pa.float64()), ("drift_p", pa.float64()), ("drift", pa.float64()), ("baseline_drift", pa.bool_()),
    ("conflated", pa.bool_()), ("note", pa.string()),
    *((f"{m}_iso", pa.float64()) for m in ISO_MEDIANS), *((f"{m}_ovl", pa.float64()) for m in OVL_MEDIANS),
])

FACT_COLUMNS = ("run_id, device_id, nvtx, sig, step_text, step_start_ns, occurrence, activity_id, start_ns, dur_ns, "
                "overlap_ns, " + ", ".join(RATES))


@dataclass
class External:
    """Isolated durations from elsewhere, per (GPU name, signature): (source, durations). ``replace``: they are the
    baseline of every signature they cover (a baseline run); otherwise only of signatures never isolated here.
    ``facts``: per key, where the source has them (a baseline run), the facts of each of those isolated instances:
    its launch context (``text``: its innermost NVTX range's text, None outside one; ``occ``: its occurrence there,
    -1 outside one) and its GPU metrics (each of ``ISO_MEDIANS``, NaN where not sampled). A signature whose
    durations there are a mixture is split by the contexts as a mixture of this trace's own isolated instances would
    be, and each pool's isolated behaviour (``*_iso``) is that of its instances there. ``fallback``: durations from a
    second source (Nsight Compute's beside a baseline run), per key, for signatures ``durations`` lacks; like those
    of a source that does not replace, they serve only signatures never isolated here."""

    durations: dict[tuple[str, int], tuple[str, np.ndarray]]
    replace: bool = False
    facts: dict[tuple[str, int], dict[str, list | np.ndarray]] = field(default_factory=dict)
    fallback: dict[tuple[str, int], tuple[str, np.ndarray]] = field(default_factory=dict)


def is_mixture(iso: np.ndarray) -> bool:
    """Isolated durations that are more than one kind of work: separated modes, or a spread far beyond noise."""
    if len(iso) < 2:
        return False
    if _modes(iso).max() > 0:
        return True
    if len(iso) < 4:
        return False
    q25, q75 = stats.sorted_quantiles(np.sort(iso), (0.25, 0.75))
    return stats.relative_spread(iso) > MAX_SPREAD and q75 - q25 > MODE_MIN_GAP_NS


def _modes(x: np.ndarray) -> np.ndarray:
    labels = stats.split_modes(x, MODE_RATIO)
    if labels.max() <= 0:
        return labels
    # merge modes whose facing ends are closer than the timer's jitter
    order = np.unique(labels[labels >= 0])
    merged, current = {}, 0
    for prev, nxt in zip(order[:-1], order[1:], strict=True):
        merged.setdefault(prev, current)
        if x[labels == nxt].min() - x[labels == prev].max() > MODE_MIN_GAP_NS:
            current += 1
        merged[nxt] = current
    return np.array([merged.get(v, -1) for v in labels])


# the pools a signature becomes, each with its groups' rows of _signature_stats and their instances
_Pools = list[tuple[np.ndarray, list[tuple[dict, np.ndarray]]]]

FACT_BATCH_ROWS = 1 << 20  # facts read from DuckDB per batch: the memory of the read, whatever the store's size


def compute(con: duckdb.DuckDBPyConnection, external: External | None = None,
            gpu_names: dict[tuple[str, int], str] | None = None, ordered: bool = False) -> tuple[pa.Table, pa.Table]:
    """Both tables for every activity of ``con``'s ``instance_facts`` (:func:`instances`, gathered)."""
    rows: list[dict] = []
    pieces = list(instances(con, external, gpu_names, rows, ordered=ordered))
    inst = pa.concat_tables([p.cast(INSTANCE_SCHEMA) for p in pieces]) if pieces else INSTANCE_SCHEMA.empty_table()
    return inst, pa.Table.from_pylist(rows, schema=STATS_SCHEMA)


def instances(con: duckdb.DuckDBPyConnection, external: External | None, gpu_names: dict[tuple[str, int], str] | None,
              rows: list[dict], piece_rows: int | None = None, ordered: bool = False) -> Iterator[pa.Table]:
    """The ``_instance_baselines`` table in pieces of about ``piece_rows`` rows (default: ``FACT_BATCH_ROWS``; run
    ids and baseline sources as dictionaries), as the signatures are computed; ``rows`` receives the rows of
    ``_signature_stats``.

    The baseline pool of an instance is its signature on its device (split into duration modes where it is a
    mixture); NVTX groups, when asked for, divide the overlapped instances of a pool into rows, never the pool.
    The facts are read in one ordered scan, streamed, and each signature is computed as soon as its rows are in
    (signatures in parallel threads, a few waiting at most), so memory holds a few batches and a piece, not the
    whole store. ``ordered``: ``_instance_facts`` reads a table kept in the order of the activities (by run and
    activity: each device's rows together, in time order), so the scan is not sorted; each device's rows are put in
    signature order by a stable sort instead, which keeps a signature's rows in time order: the same order.
    """
    text = _Texts(_waits(con))
    if ordered:
        facts = _by_signature(_cut(con.sql(f"SELECT {FACT_COLUMNS} FROM _instance_facts")
                                   .to_arrow_reader(FACT_BATCH_ROWS), ("run", "dev"), text))
    else:
        facts = ((f, None) for f in _cut(con.sql(f"SELECT {FACT_COLUMNS} FROM _instance_facts "
                                                 "ORDER BY run_id, device_id, sig, start_ns, activity_id")
                                         .to_arrow_reader(FACT_BATCH_ROWS), ("run", "dev", "sig"), text))

    # a baseline run's instances' facts, their texts as this scan's codes (taken here: the workers only read them)
    ext_facts = {key: {**facts, "text": text.codes(pa.array(facts["text"], pa.string())),
                       **{f"has_{m}": np.isfinite(facts[m]) for m in ISO_MEDIANS}}
                 for key, facts in (external.facts.items() if external is not None else ())}

    def signature(f: dict, rows: np.ndarray | None) -> tuple[dict, _Pools]:
        """The pools one signature becomes, each with its rows (group ids are given afterwards, in order); the
        signature's facts are ``f``, or its ``rows`` of them (taken here, in the worker thread)."""
        if rows is not None:
            f = _Taken(f, rows)
        run, dev, sig = text.names[_first(f, "run")], _first(f, "dev"), _first(f, "sig")
        ext = ef = None
        replaces = False
        if external is not None and gpu_names is not None:
            key = (gpu_names.get((run, int(dev)), ""), int(sig))
            ext, ef = external.durations.get(key), ext_facts.get(key)
            # a source that replaces does so where it has the signature; its fallback never replaces
            replaces = external.replace and ext is not None
            if ext is None:
                ext = external.fallback.get(key)
        if ext is not None and replaces and ef is not None:
            splits = _split_by_external(f, ext, ef)
        else:
            splits = ((*s, ext, None) for s in _split(np.arange(len(f["ovl"])), f))
        pools = []
        for sub, pool, split, conflated, pool_ext, ext_rows in splits:
            base = _baseline(pool, f, pool_ext, replaces, conflated)
            # its isolated behaviour: that of the instances its baseline durations come from
            isolated = (_medians(f, pool[(f["ovl"][pool] == 0) & (f["dur"][pool] > 0)], ISO_MEDIANS, "_iso")
                        if ext_rows is None else _medians(ef, ext_rows, ISO_MEDIANS, "_iso"))
            nv = f["nvtx"][pool]
            pool_rows = []
            # NULL (code -1) first, then by text
            groups = sorted(set(nv.tolist()), key=lambda c: (c >= 0, text.names[c] if c >= 0 else ""))
            for group in groups:
                idx = pool if len(groups) == 1 else pool[nv == group]
                key = (run, int(dev), text.names[group] if group >= 0 else None, int(sig), sub)
                row = _row(-1, key, split, conflated, idx, f, base)
                row.update(isolated, **_medians(f, idx[f["ovl"][idx] > 0], OVL_MEDIANS, "_ovl"))
                pool_rows.append((row, idx))
            pools.append((pool, pool_rows))
        return f, pools

    parts: list[dict] = []  # per signature, its instances' columns (run and baseline source as codes)
    in_parts = 0  # their rows
    runs: dict[str, int] = {}
    sources: dict[str, int] = {}
    pool_id = 0

    def collect(f: dict, pools) -> None:
        nonlocal pool_id, in_parts
        n = len(f["activity_id"])
        inst = {"run_id": np.full(n, runs.setdefault(text.names[_first(f, "run")], len(runs)), dtype=np.int32),
                "activity_id": f["activity_id"], "group_id": np.full(n, -1, dtype=np.int64),
                "pool_id": np.full(n, -1, dtype=np.int64), "t0_ns": np.full(n, np.nan),
                "baseline": np.full(n, -1, dtype=np.int32), "clock0_mhz": np.full(n, np.nan)}
        for pool, pool_rows in pools:
            inst["pool_id"][pool] = pool_id
            pool_id += 1
            for row, idx in pool_rows:
                row["group_id"] = len(rows)
                inst["group_id"][idx] = row["group_id"]
                t0_each, source, clock0 = row.pop("_t0_each"), row.pop("_source"), row.pop("_clock0_each")
                if clock0 is not None:
                    inst["clock0_mhz"][idx] = clock0
                if t0_each is not None:
                    inst["t0_ns"][idx] = t0_each
                    inst["baseline"][idx] = -1 if source is None else sources.setdefault(source, len(sources))
                rows.append(row)
        parts.append(inst)
        in_parts += n

    # signatures are independent: numpy's sorts and medians run in parallel threads, in order of the scan
    workers = max(1, duck.usable_cpus())
    pending: list = []
    with ThreadPoolExecutor(workers) as threads:
        for f, rows_of in facts:
            pending.append(threads.submit(signature, f, rows_of))
            while len(pending) > 2 * workers:
                collect(*pending.pop(0).result())
            if in_parts >= (piece_rows or FACT_BATCH_ROWS):
                yield _instances_table(parts, list(runs), list(sources))
                parts, in_parts = [], 0
        for future in pending:
            collect(*future.result())
    if parts:
        yield _instances_table(parts, list(runs), list(sources))


def _cut(reader: pa.RecordBatchReader, keys: tuple[str, ...], text: _Texts):
    """The facts of each run of equal ``keys`` (of ``run``, ``dev``, ``sig``), as the columns ``_split``,
    ``_baseline`` and ``_row`` read, cut from the ordered batches of ``reader`` (a group's rows may span batches)."""
    carry: list[dict] | None = None  # the group the previous batch ended with
    for batch in reader:
        n = batch.num_rows
        if n == 0:
            continue
        f = _fact_columns(batch, text)
        cut = np.ones(n, dtype=bool)
        cut[1:] = np.logical_or.reduce([f[k][1:] != f[k][:-1] for k in keys])
        starts = np.flatnonzero(cut).tolist()
        for a, b in zip(starts, [*starts[1:], n], strict=True):
            piece = {k: v[a:b] for k, v in f.items()}
            if a == 0 and carry is not None:
                last = carry[-1]
                if all(last[k][-1] == piece[k][0] for k in keys):
                    piece = _joined([*carry, piece])
                else:
                    yield _joined(carry)
                carry = None
            if b == n:
                carry = [piece]
            else:
                yield piece
    if carry is not None:
        yield _joined(carry)


def _by_signature(devices):
    """Each device's facts (from a scan in the kept order of the activities) with the rows of each of its signatures,
    in signature order, each signature's rows in the order they came (a stable sort). The rows are taken by whoever
    computes the signature: in the worker threads, side by side, not on the thread that reads."""
    seen = set()
    for f in devices:
        key = (f["run"][0], f["dev"][0])
        if key in seen:
            raise RuntimeError("the instance facts are not in the order they were kept in")
        seen.add(key)
        _, order, starts = stats.grouped(f["sig"])
        for a, b in zip(starts.tolist(), [*starts[1:].tolist(), len(order)], strict=True):
            yield f, order[a:b]


class _Taken(dict):
    """A signature's facts: its ``rows`` of a device's facts ``f``, each column taken when first read (in the thread
    that computes the signature), and the rates only at the instances their medians read (:func:`_at`)."""

    def __init__(self, f: dict, rows: np.ndarray):
        super().__init__()
        self.f, self.rows = f, rows

    def __missing__(self, column: str) -> np.ndarray:
        taken = self[column] = self.f[column][self.rows]
        return taken


def _at(f: dict, column: str, idx: np.ndarray) -> np.ndarray:
    """``f[column][idx]``, without taking the whole column of a :class:`_Taken`."""
    if isinstance(f, _Taken) and column not in f:
        return f.f[column][f.rows[idx]]
    return f[column][idx]


def _first(f: dict, column: str):
    """``f[column][0]``."""
    return _at(f, column, np.zeros(1, dtype=np.int64))[0]


def _joined(parts: list[dict]) -> dict:
    return parts[0] if len(parts) == 1 else {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _waits(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per run, the collectives that waited for another rank (``_collective_arrivals``): their activity ids, sorted,
    and the wait each is compared without (duration - work_ns)."""
    rows = con.sql("SELECT run_id, list(activity_id ORDER BY activity_id), list(dur_ns - work_ns ORDER BY activity_id) "
                   "FROM _collective_arrivals WHERE work_ns < dur_ns GROUP BY run_id").fetchall()
    return {run: (np.array(ids, dtype=np.int64), np.array(waits, dtype=np.float64)) for run, ids, waits in rows}


class _Texts:
    """Text columns (run ids, NVTX texts) as codes into one list of names, the same across batches: a code is
    taken and compared as an integer, and a name made a Python string once; -1 is NULL. ``waits``: per run, the
    collectives' waits for other ranks (:func:`_waits`), which their facts' durations are read without."""

    def __init__(self, waits: dict[str, tuple[np.ndarray, np.ndarray]] | None = None):
        self.names: list[str] = []
        self._codes: dict[str, int] = {}
        self.waits = waits or {}

    def codes(self, column: pa.ChunkedArray | pa.Array) -> np.ndarray:
        enc = pc.dictionary_encode(column)
        if isinstance(enc, pa.ChunkedArray):
            enc = enc.combine_chunks() if enc.num_chunks != 1 else enc.chunk(0)
        names = enc.dictionary.to_pylist()
        table = np.empty(len(names) + 1, dtype=np.int32)
        table[-1] = -1  # NULL
        for i, name in enumerate(names):
            if (code := self._codes.get(name)) is None:
                code = self._codes[name] = len(self.names)
                self.names.append(name)
            table[i] = code
        return table[pc.fill_null(enc.indices, len(names)).to_numpy(zero_copy_only=False)]


def _fact_columns(batch: pa.RecordBatch, text: _Texts) -> dict:
    facts = {name: batch.column(name) for name in batch.schema.names}

    def numbers(name: str, fill: int, dtype) -> np.ndarray:
        return np.asarray(pc.fill_null(facts[name], fill).to_numpy(zero_copy_only=False), dtype=dtype)

    f = {
        "run": text.codes(facts["run_id"]), "dev": numbers("device_id", 0, np.int64),
        "nvtx": text.codes(facts["nvtx"]), "sig": numbers("sig", 0, np.uint64),
        "occ": numbers("occurrence", -1, np.int64), "text": text.codes(facts["step_text"]),
        "step": numbers("step_start_ns", -1, np.int64),
        "start": numbers("start_ns", 0, np.int64), "dur": numbers("dur_ns", 0, np.float64),
        "ovl": numbers("overlap_ns", 0, np.int64), "activity_id": numbers("activity_id", 0, np.int64),
        # each rate, and where it is present: NULL (no sample) is absent, as SQL's median skips it
        **{m: numbers(m, np.nan, np.float64) for m in RATES},
        **{f"has_{m}": pc.is_valid(facts[m]).to_numpy(zero_copy_only=False) for m in RATES},
    }
    if text.waits:
        _less_waits(f, text)
    return f


def _less_waits(f: dict, text: _Texts) -> None:
    """A collective that waited for another rank is compared on its transfer: its duration less that wait."""
    for code in np.unique(f["run"]).tolist():
        if code < 0 or (found := text.waits.get(text.names[code])) is None:
            continue
        ids, waits = found
        rows = np.flatnonzero(f["run"] == code)
        at = np.minimum(np.searchsorted(ids, f["activity_id"][rows]), len(ids) - 1)
        hit = ids[at] == f["activity_id"][rows]
        f["dur"][rows[hit]] -= waits[at[hit]]


def _medians(f: dict, idx: np.ndarray, rates: tuple[str, ...], suffix: str) -> dict:
    """SQL's ``median`` of each of ``rates`` over the instances ``idx`` (NULLs skipped), as ``{rate}{suffix}``."""
    out = {}
    for m in rates:
        out[m + suffix] = stats.sql_median(_at(f, m, idx[_at(f, f"has_{m}", idx)]))
    return out


# Launch contexts that say which kind of work an instance of a mixed signature is, most specific first: the same
# NVTX range text and occurrence in it (the 3rd launch of this GEMM in "step"), the range text, the occurrence.
CONTEXTS = (("range and occurrence", ("text", "occ")), ("range", ("text",)), ("occurrence", ("occ",)))


def _split(idx: np.ndarray, f: dict):
    """(mode or None, indices, split, conflated) for each pool a signature becomes.

    A signature whose isolated durations are one kind of work is one pool. Otherwise its isolated instances are cut
    into duration modes, and every other instance joins the mode of the isolated instances that share its launch
    context (CONTEXTS, most specific first); an instance whose first context with isolated instances spans several
    modes, or that shares no context with any, cannot be told apart: it is left out as conflated.
    """
    dur, ovl = f["dur"], f["ovl"]
    iso = idx[(ovl[idx] == 0) & (dur[idx] > 0)]
    if not is_mixture(dur[iso]):
        yield None, idx, None, False
        return
    labels = _modes(dur[iso])
    if labels.max() <= 0:  # a continuum of sizes: no duration mode to join, but the launch context may tell
        yield from _by_context(idx, iso, f)
        return
    mode = dict(zip(iso.tolist(), labels.tolist(), strict=True))
    seen = {}
    for name, cols in CONTEXTS:
        table: dict = {}
        for i in iso.tolist():
            key = tuple(f[c][i] for c in cols)
            if -1 not in key:  # a NULL text or occurrence
                table.setdefault(key, set()).add(mode[i])
        seen[name] = table
    assigned = np.full(len(idx), -1)
    among: list[set | None] = [None] * len(idx)  # the modes an unresolved instance's first context spans
    for pos, i in enumerate(idx.tolist()):
        if i in mode:
            assigned[pos] = mode[i]
            continue
        for name, cols in CONTEXTS:
            modes = seen[name].get(tuple(f[c][i] for c in cols))
            if modes:
                if len(modes) == 1:
                    assigned[pos] = next(iter(modes))
                else:
                    among[pos] = modes
                break
    _join_siblings(idx, assigned, f)
    _by_duration(idx, assigned, among, dur, dur[iso], labels)
    for m in sorted(set(assigned.tolist()) - {-1}):
        yield m, idx[assigned == m], "duration mode", False
    if (assigned == -1).any():
        yield None, idx[assigned == -1], "duration mode", True


def _by_context(idx: np.ndarray, iso: np.ndarray, f: dict):
    """A mixture whose isolated durations are a continuum of sizes (no separate duration modes), split by the most
    specific launch context instead (NVTX range text and occurrence in it: the k-th launch of a GEMM in a backward
    pass is the same work in every step): each context with at least two isolated instances that are one kind of
    work (not a mixture, by :func:`is_mixture`'s rule) is a pool (numbered by median duration, 0 the shortest) that
    the instances of that context join. Instances of any other context are conflated; so is the whole signature when
    fewer than two contexts qualify. Vectorized over the contexts: a signature may have hundreds of thousands."""
    dur, text, occ = f["dur"], f["text"], f["occ"]

    def keys(rows: np.ndarray) -> np.ndarray:  # (text, occurrence) as one integer; -1 where either is NULL
        t, o = text[rows].astype(np.int64), occ[rows].astype(np.int64)
        return np.where((t >= 0) & (o >= 0), (t << 32) | (o & 0xFFFFFFFF), -1)

    k_iso = keys(iso)
    known = k_iso >= 0
    k, d = k_iso[known], dur[iso][known].astype(np.float64)
    order = np.lexsort((d, k))
    k, d = k[order], d[order]
    first = np.flatnonzero(np.r_[True, k[1:] != k[:-1]]) if len(k) else np.zeros(0, dtype=np.int64)
    n = np.diff(np.r_[first, len(k)])
    # is_mixture per context: two consecutive sorted durations more than MODE_RATIO and MODE_MIN_GAP_NS apart, or
    # (with 4 or more) an interquartile range beyond MAX_SPREAD of the median and MODE_MIN_GAP_NS
    gap = (d[1:] > d[:-1] * MODE_RATIO) & (d[1:] - d[:-1] > MODE_MIN_GAP_NS) & (k[1:] == k[:-1])
    split = np.add.reduceat(np.r_[gap, False].astype(np.int64), first) > 0 if len(k) else np.zeros(0, dtype=bool)

    def quantile(q: float) -> np.ndarray:  # numpy's linear quantile within each context's sorted durations
        pos = q * (n - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, n - 1)
        return d[first + lo] + (d[first + hi] - d[first + lo]) * (pos - lo)

    q25, med, q75 = quantile(0.25), quantile(0.5), quantile(0.75)
    with np.errstate(divide="ignore", invalid="ignore"):
        spread = (n >= 4) & ((q75 - q25) / med > MAX_SPREAD) & (q75 - q25 > MODE_MIN_GAP_NS)
    pure = (n >= 2) & ~split & ~spread
    if pure.sum() < 2:
        yield None, idx, None, True
        return
    pure_keys = k[first][pure]
    rank = np.empty(len(pure_keys), dtype=np.int64)
    rank[np.lexsort((pure_keys, med[pure]))] = np.arange(len(pure_keys))
    k_all = keys(idx)
    pos = np.clip(np.searchsorted(pure_keys, k_all), 0, len(pure_keys) - 1)
    assigned = np.where((k_all >= 0) & (pure_keys[pos] == k_all), rank[pos], -1)
    for m in np.unique(assigned[assigned >= 0]).tolist():
        yield m, idx[assigned == m], "launch context", False
    if (assigned == -1).any():
        yield None, idx[assigned == -1], "launch context", True


def _by_duration(idx: np.ndarray, assigned: np.ndarray, among: list, dur: np.ndarray, iso_dur: np.ndarray,
                 labels: np.ndarray) -> None:
    """Last of all, for instances still unresolved: work does not run much faster beside other work than alone, so
    a mode whose isolated median is more than MODE_RATIO times the instance's duration cannot be its work. Where one
    of the modes its first context spans (every mode, without a context) remains, the instance joins it; a longer
    instance that more than one mode could be stays unresolved."""
    medians = {m: float(np.median(iso_dur[labels == m])) for m in set(labels.tolist()) if m >= 0}
    for pos in np.flatnonzero(assigned == -1).tolist():
        fit = [m for m in (among[pos] if among[pos] is not None else medians)
               if medians[m] <= dur[idx[pos]] * MODE_RATIO]
        if len(fit) == 1:
            assigned[pos] = fit[0]


def _split_by_external(f: dict, ext: tuple[str, np.ndarray], ef: dict):
    """(mode or None, indices, split, conflated, the pool's external durations, their rows of ``ef``) for each pool
    a signature becomes when a baseline run replaces its isolated instances: the baseline run's isolated instances
    are cut into modes (:func:`_split`'s rule, with their launch contexts, ``ef``'s ``text`` and ``occ``) and every
    instance here, isolated or not, joins the mode of those that share its launch context; its pool's baseline is
    that mode's."""
    source, durations = ext
    n_ext, n = len(durations), len(f["ovl"])
    both = {"dur": np.concatenate([durations, f["dur"]]),
            "ovl": np.r_[np.zeros(n_ext, dtype=np.int64), np.ones(n, dtype=np.int64)],
            "text": np.r_[ef["text"], f["text"]], "occ": np.r_[ef["occ"], f["occ"]],
            "step": np.r_[np.full(n_ext, -1, dtype=np.int64), f["step"]]}
    for sub, members, split, conflated in _split(np.arange(n_ext + n), both):
        own, theirs = members[members >= n_ext] - n_ext, members[members < n_ext]
        if len(own):
            yield sub, own, split, conflated, (source, durations[theirs]) if len(theirs) else None, theirs


def _join_siblings(idx: np.ndarray, assigned: np.ndarray, f: dict) -> None:
    """Last resort for instances no context resolves: the mode every other launch of the signature in the same NVTX
    range instance joined (the first GEMM of a loop whose other iterations are all one kind of work)."""
    step = f["step"][idx]
    for pos in np.flatnonzero(assigned == -1):
        if step[pos] < 0:
            continue
        siblings = assigned[(step == step[pos]) & (np.arange(len(idx)) != pos)]
        if len(siblings) and (siblings >= 0).all() and len(set(siblings.tolist())) == 1:
            assigned[pos] = siblings[0]


@dataclass
class _Base:
    source: str | None = None
    t0s: np.ndarray | None = None
    n_isolated: int = 0
    per_instance: dict | None = None  # instance index -> its own t0 (drifting baseline)
    clock_each: dict | None = None  # instance index -> the GPC clock of the isolated instances that gave its t0
    drift: tuple = (None, None, None)
    note: str | None = None
    _sorted: tuple | None = None  # t0s sorted as given, and as float64 (taken once for every group of the pool)

    def t0s_sorted(self) -> tuple[np.ndarray, np.ndarray]:
        """(t0s sorted in their own type, the same as float64): the sorts that every group of the pool reads."""
        if self._sorted is None:
            raw = np.sort(self.t0s)
            self._sorted = (raw, raw if raw.dtype == np.float64 else raw.astype(np.float64))
        return self._sorted


def _baseline(pool: np.ndarray, f: dict, ext, ext_replaces: bool, conflated: bool) -> _Base:
    dur, ovl, start = f["dur"], f["ovl"], f["start"]
    iso = pool[(ovl[pool] == 0) & (dur[pool] > 0)]
    base = _Base(n_isolated=len(iso))
    if conflated:
        base.note = ("isolated durations of this signature are a mixture of different work, and no launch context "
                     "(NVTX range, occurrence in it) tells which these instances are: left out of aggregate slowdowns")
        return base
    if ext is not None and ext_replaces:
        base.source, base.t0s = ext
    elif len(iso):
        base.source, base.t0s = "isolated", dur[iso]
        tau, p, rel = stats.trend(start[iso], dur[iso]) if len(iso) >= 4 else (np.nan, 1.0, np.nan)
        base.drift = (_f(tau), _f(p), _f(rel))
        if p < DRIFT_P and abs(rel) >= PRACTICAL_FLOOR:
            base.source = "isolated nearest in time"
            t0_near, clock_near = _nearest(start[pool], start[iso], dur[iso], _at(f, "gpc_clock_mhz", iso))
            base.per_instance = dict(zip(pool.tolist(), t0_near, strict=True))
            base.clock_each = dict(zip(pool.tolist(), clock_near, strict=True))
    elif ext is not None:
        base.source, base.t0s = ext
    else:
        base.note = "no isolated instance to compare with (give --baseline or --ncu)"
    return base


def _row(gid: int, key: tuple, split, conflated: bool, idx: np.ndarray, f: dict, base: _Base) -> dict:
    """The group's row of ``_signature_stats``; its instances' baseline (``_t0_each``, ``_source``) rides along."""
    run_id, device_id, nvtx, sig, sub = key
    dur = f["dur"]
    is_ovl = f["ovl"][idx] > 0
    t1s = dur[idx[is_ovl]]
    tau, p, rel = base.drift
    row = dict(group_id=gid, run_id=run_id, device_id=device_id, nvtx=nvtx, sig=sig, mode=sub, split=split,
               n=len(idx), n_overlapped=int(is_ovl.sum()), n_isolated=base.n_isolated, conflated=conflated,
               t1_ns=None, t1_lo_ns=None, t1_hi_ns=None, t0_ns=None, t0_lo_ns=None, t0_hi_ns=None, t0_spread=None,
               slowdown=None, slowdown_lo=None, slowdown_hi=None, significant=False, baseline=base.source,
               drift_tau=tau, drift_p=p, drift=rel, baseline_drift=base.per_instance is not None, note=base.note,
               _t0_each=None, _source=None, _clock0_each=None)
    # each side sorted once (float64, as the statistics take them), and read sorted by every statistic below
    t1_sorted = np.sort(np.asarray(t1s, dtype=np.float64))
    if len(t1s):
        row["t1_ns"], row["t1_lo_ns"], row["t1_hi_ns"] = _nan_none(stats.median_ci(t1_sorted, LEVEL, presorted=True))
    if base.t0s is None:
        return row
    t0_raw, t0_sorted = base.t0s_sorted()
    row["t0_ns"], row["t0_lo_ns"], row["t0_hi_ns"] = _nan_none(stats.median_ci(t0_sorted, LEVEL, presorted=True))
    row["t0_spread"] = _f(stats.relative_spread(t0_sorted, presorted=True))
    if base.per_instance is not None:
        t0_each = np.array([base.per_instance[i] for i in idx.tolist()])
        row["_clock0_each"] = np.array([base.clock_each[i] for i in idx.tolist()])
    else:
        t0_each = np.full(len(idx), stats.sorted_median(t0_raw))
    row["_t0_each"], row["_source"] = t0_each, base.source
    if len(t1s):
        # seeded by the data, not the name: the same durations give the same interval whatever the kernel is called
        t1_raw = t1_sorted if t1s.dtype == np.float64 else np.sort(t1s)
        seed_key = (nvtx, sub, hashlib.blake2b(t0_raw.tobytes() + t1_raw.tobytes(), digest_size=8).hexdigest())
        if base.per_instance is not None:
            s, lo, hi = stats.ratio_ci(t1s / t0_each[is_ovl], key=seed_key, level=LEVEL)
        elif len(t1s) == 1 and len(base.t0s) >= 2:
            # one overlapped instance: where it falls against the spread of the isolated ones (a prediction interval)
            q_lo, q_hi = stats.sorted_quantiles(t0_raw, ((1 - LEVEL) / 2, (1 + LEVEL) / 2), "inverted_cdf")
            s, lo, hi = t1s[0] / stats.sorted_median(t0_raw) - 1, t1s[0] / q_hi - 1, t1s[0] / q_lo - 1
        else:
            s, lo, hi = stats.slowdown_ci(t0_sorted, t1_sorted, key=seed_key, level=LEVEL, n_boot=N_BOOT,
                                          max_n=MAX_N, presorted=True)
        row.update(slowdown=_f(s), slowdown_lo=_f(lo), slowdown_hi=_f(hi))
        row["significant"] = bool(np.isfinite(lo) and np.isfinite(hi) and (lo > 0 or hi < 0)
                                  and abs(s) >= PRACTICAL_FLOOR)
    return row


def _nearest(t: np.ndarray, t_iso: np.ndarray, d_iso: np.ndarray,
             c_iso: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per instance of ``t``, the median duration (``d_iso``) of the NEAREST_K isolated instances nearest in time to
    it, and the median GPC clock (``c_iso``, NaN where not sampled) of the same instances: the clock its baseline
    ran at (NaN when none of them was sampled)."""
    order = np.argsort(t_iso, kind="stable")
    t_iso, d_iso, c_iso = t_iso[order], d_iso[order], c_iso[order]
    k = min(NEAREST_K, len(t_iso))
    pos = np.searchsorted(t_iso, t)
    out, clock = np.empty(len(t)), np.full(len(t), np.nan)
    for i, (ti, p) in enumerate(zip(t, pos, strict=True)):
        lo, hi = max(0, p - k), min(len(t_iso), p + k)
        window = np.arange(lo, hi)
        near = window[np.argsort(np.abs(t_iso[window] - ti), kind="stable")[:k]]
        out[i] = stats.sorted_median(np.sort(d_iso[near]))
        sampled = c_iso[near][np.isfinite(c_iso[near])]
        if len(sampled):
            clock[i] = stats.sorted_median(np.sort(sampled))
    return out, clock


def _instances_table(parts: list[dict], runs: list[str], sources: list[str]) -> pa.Table:
    """One table of the instances' columns; run ids and baseline sources come as codes into ``runs``/``sources``
    and stay dictionaries."""
    inst = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    cols = {k: pa.array(v, type=INSTANCE_SCHEMA.field(k).type) for k, v in inst.items()
            if k not in ("run_id", "baseline", "t0_ns", "clock0_mhz")}
    cols["run_id"] = pa.DictionaryArray.from_arrays(pa.array(inst["run_id"]), pa.array(runs, pa.string()))
    code = inst["baseline"]
    cols["baseline"] = pa.DictionaryArray.from_arrays(pa.array(code, mask=code < 0), pa.array(sources, pa.string()))
    for k in ("t0_ns", "clock0_mhz"):
        cols[k] = pa.array(inst[k], mask=np.isnan(inst[k]), type=pa.float64())
    return pa.table(cols).select(INSTANCE_SCHEMA.names)


def _f(v) -> float | None:
    v = float(v)
    return None if np.isnan(v) else v


def _nan_none(t):
    return tuple(_f(v) for v in t)


def register(con: duckdb.DuckDBPyConnection, external: External | None = None, ordered: bool = False) -> None:
    """Compute both tables and put them where the views ``_instance_baselines``/``_signature_stats`` read
    (``ordered``: see :func:`instances`)."""
    gpu_names = {(r[0], int(r[1])): r[2] for r in con.sql("SELECT run_id, device_id, name FROM devices").fetchall()}
    rows: list[dict] = []
    kept_inst = duck.keep_pieces(con, "_instance_baselines_data", INSTANCE_SCHEMA.empty_table(),
                                 instances(con, external, gpu_names, rows, ordered=ordered))
    kept_stats = duck.keep(con, "_signature_stats_data", "SELECT * FROM _input",
                           pa.Table.from_pylist(rows, schema=STATS_SCHEMA))
    con.execute(f"CREATE OR REPLACE VIEW _instance_baselines AS SELECT * FROM {kept_inst}")
    con.execute(f"CREATE OR REPLACE VIEW _signature_stats AS SELECT * FROM {kept_stats}")
