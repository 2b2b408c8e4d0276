"""Stage 5 of the attribution: the critical path of each step, and how much of each attributed loss reached the
step's time rather than being absorbed by slack.

A step is an NVTX group's range instance on one device (``--group-by-nvtx``); without NVTX groups there are no
steps and no rows. A step's time runs from the first start to the last end of its activities on the device.

Its critical path: going back from the activity that ended last, each activity's start was set by the latest of
what it waited for: its launch call (the host), the work before it on its stream, or the event records its stream was
made to wait for (``stream_waits``, recorded with CUDA event tracing; a record on a stream that only passed another
event on is followed to the work at its source). A launch made after a host call that waited for GPU work (a
synchronize, or a launch blocked on a full launch queue: the call returned as an activity of its process ended)
moves with that work, and the path goes on from it, the host's time between on the path. A collective matched
across ranks (``_collective_arrivals``) could not end before its last rank arrived, so where that rank arrived later
than this one the path goes on from that rank's arrival, on its device. The path stops at the step's start, at a
launch the host made late for no GPU work, or where nothing the activity waited for is known. The path's time is
told by kind (compute, communication, copies, gaps between activities, the host's, unknown) and by device.

What a loss cost the step: the step's window (every activity of the run that ran between the first start and the last
end of the step on the devices that ran it: its NVTX group's k-th instance on each device) is replayed, each
activity's start the latest of those constraints plus the gap it showed (the constraints before the window as they
were), its duration less its loss (its duration beyond its baseline, shared among the causes of its row's class as
the verdict shares it; only the step's own activities, its NVTX group's on any device, lose it), and each
collective's end its ranks' last arrival plus its transfer. The step ends earlier by what reached it; the rest of the
loss was absorbed by slack (other work that the step waited for anyway). Each cause is replayed alone, then
unexplained, then all losses together; and once with every collective ending its transfer after its own rank's
arrival (no rank waiting for another): what waiting for late ranks cost.
"""

from __future__ import annotations

import bisect

import numpy as np
import pyarrow as pa

from .classes import CAUSES, cause_shares

LOSSES = (*CAUSES, "unexplained", "all")  # the loss vectors the path carries: each cause, unexplained, and all together
NONE, HOST, PRED, SRC, SYNC = -1, 0, 1, 2, 3
RELEASE_NS = 20_000  # a host call returned as GPU work ended: within the timer skew between kernels (activity_delays)
SHIFT = 44  # a key's high bits: a dense code (thread, process); its low bits: a time (ns, < 2^44: 4.9 hours)
NEG = np.iinfo(np.int64).min // 4
TIME_KINDS = ("compute", "comm", "copy", "gap", "host", "unknown")

COLUMNS = [("run_id", pa.string()), ("device_id", pa.int32()), ("nvtx", pa.string()), ("steps", pa.int64()),
           ("step_ms", pa.float64()),
           *((f"path_{k}_ms", pa.float64()) for k in TIME_KINDS),
           ("path_other_devices_ms", pa.float64()), ("set_by_device_id", pa.int32()),
           *((f"lost_{c}_ms", pa.float64()) for c in LOSSES),
           *((f"reached_{c}_ms", pa.float64()) for c in LOSSES), ("reached_wait_ms", pa.float64())]
SCHEMA = pa.schema(COLUMNS)


def loss_shares(con) -> dict[int, np.ndarray]:
    """Per (sub-)signature group whose loss counts (significant, slowed, not conflated), how its loss is shared among
    CAUSES and unexplained: as the verdict shares it (``classes.cause_shares``)."""
    rows = con.sql("SELECT group_id, class, sm, dram_bw, cache, clock, link FROM kernel_attribution "
                   "WHERE significant AND slowdown > 0 AND NOT conflated AND group_id IS NOT NULL").fetchall()
    return {gid: np.array(list(cause_shares(cls, dict(zip(CAUSES, parts, strict=True))).values()))
            for gid, cls, *parts in rows}


def run_replays(con, shares: dict[int, np.ndarray] | None = None):
    """Per run of ``con`` (attribution views prepared), ``(run_id, activities, replayer)``: the run's activities in
    stream order (``_path_activities``) and what replays its steps (``.steps()``, ``.replay(...)``)."""
    waits = con.sql("SELECT run_id, global_pid, stream_id, correlation_id, record_stream_id, record_correlation_id "
                    "FROM stream_waits").to_arrow_table()
    calls = con.sql("SELECT run_id, global_pid, global_tid, start_ns, end_ns FROM runtime_api "
                    f"WHERE end_ns - start_ns > {2 * RELEASE_NS}").to_arrow_table()
    acts = con.sql("SELECT * FROM _path_activities").to_arrow_table()
    if acts.num_rows == 0:
        return
    run_col = acts.column("run_id").to_numpy(zero_copy_only=False)
    bounds = np.flatnonzero(np.r_[True, run_col[1:] != run_col[:-1], True])
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=False):
        run_id = run_col[lo]
        t = acts.slice(lo, hi - lo)
        yield run_id, t, _Run(t, _of_run(waits, run_id), shares or {}, _of_run(calls, run_id))


def critical_paths(con) -> pa.Table:
    """One row per (run, device, NVTX group) of steps and per (run, device) (nvtx NULL: its steps together): the
    steps' time, where their critical paths ran, and each cause's loss and the part of it that reached the steps'
    time. No rows without NVTX groups."""
    shares = loss_shares(con)
    rows: list[dict] = []
    for run_id, _, run in run_replays(con, shares):
        rows += run.rows(run_id)
    rows.sort(key=lambda r: (r["run_id"], r["device_id"], r["nvtx"] is not None, r["nvtx"] or ""))
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _of_run(table: pa.Table, run_id: str) -> pa.Table:
    import pyarrow.compute as pc

    return table.filter(pc.equal(table.column("run_id"), run_id)) if table.num_rows else table


def _np(table: pa.Table, name: str, fill=None) -> np.ndarray:
    col = table.column(name)
    if fill is not None:
        col = col.fill_null(fill)
    return col.to_numpy(zero_copy_only=False)


class _Run:
    """One run's activities in stream order, with what set each start and end."""

    def __init__(self, t: pa.Table, waits: pa.Table, shares: dict[int, np.ndarray], calls: pa.Table):
        n = self.n = t.num_rows
        aid = _np(t, "activity_id")
        self.dev = _np(t, "device_id")
        kind, activity = _np(t, "kind"), _np(t, "activity")
        # 0 compute, 1 comm, 2 copy (copy engines that move no collective's data)
        self.cat = np.where(kind == "comm", 1, np.where(activity == "kernel", 0, 2))
        pid, stream, corr = _np(t, "global_pid"), _np(t, "stream_id"), _np(t, "correlation_id")
        self.S, self.E = _np(t, "start_ns").astype(np.int64), _np(t, "end_ns").astype(np.int64)
        texts = t.column("nvtx").combine_chunks().dictionary_encode()
        self.texts = texts.dictionary.to_pylist()
        self.code = texts.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        self.nvtx_start = _np(t, "nvtx_start_ns", NEG)
        pos = np.full(int(aid.max()) + 1 if n else 0, -1, dtype=np.int64)
        pos[aid] = np.arange(n)
        same = self.same = np.zeros(n, dtype=bool)
        same[1:] = (pid[1:] == pid[:-1]) & (stream[1:] == stream[:-1])
        pred_end = np.where(same, np.r_[NEG, self.E[:-1]], NEG)
        launch = _np(t, "launch_ns", NEG).astype(np.int64)
        src_end = np.full(n, NEG, dtype=np.int64)
        self.src = np.full(n, -1, dtype=np.int64)
        self._event_sources(waits, pid, stream, corr, src_end)
        c = np.stack([launch, pred_end, src_end])
        which = np.argmax(c, axis=0)
        c1 = c.max(axis=0)
        self.which = np.where(c1 == NEG, NONE, which)
        self.released = np.full(n, -1, dtype=np.int64)
        self.launch, self.pred_end, self.src_end = launch, pred_end, src_end
        pinned = c1 == NEG  # nothing it waited for is known: its start stays where it was
        self.gap0 = np.where(pinned, 0, np.maximum(0, self.S - c1))
        self.pinned = pinned
        coll = t.column("collective").combine_chunks().dictionary_encode()
        self.coll = coll.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        self._host_pacing(calls, pid, _np(t, "launch_tid", -1).astype(np.int64), launch)
        late = _np(t, "late_activity_id", -1).astype(np.int64)
        self.peer = np.where(late >= 0, pos[np.maximum(late, 0)], -1)
        self.peer = np.where((self.peer >= 0) & (self.S[np.maximum(self.peer, 0)] > self.S), self.peer, -1)
        # a chain: from an end on down its stream, while each start was set by the end before it on the stream and
        # that end by its own start (not by a late rank)
        cont = np.zeros(n, dtype=bool)
        cont[1:] = (self.which[1:] == PRED) & (self.peer[:-1] < 0)
        self.head = np.maximum.accumulate(np.where(cont, 0, np.arange(n)))
        self.gap = np.where(cont, np.maximum(0, self.S - pred_end), 0)
        dur = self.E - self.S
        self.cum = {k: np.r_[0, np.cumsum(np.where(self.cat == i, dur, 0))] for i, k in enumerate(("compute", "comm",
                                                                                                      "copy"))}
        self.cum["gap"] = np.r_[0, np.cumsum(self.gap)]
        # each activity's loss (ns) per cause, unexplained, and all
        gid, t0 = _np(t, "group_id", -1), _np(t, "t0_ns", np.nan)
        work = _np(t, "work_ns").astype(np.float64)
        self.work = np.where(self.coll >= 0, work, self.E - self.S).astype(np.int64)
        self.by_start = np.argsort(self.S, kind="stable")
        self.S_sorted = self.S[self.by_start]
        self.longest = int((self.E - self.S).max()) if n else 0
        excess = np.where(np.isnan(t0), 0.0, np.maximum(0.0, work - np.nan_to_num(t0)))
        gid = gid.astype(np.int64)
        table = np.zeros((max(int(gid.max()), max(shares, default=0)) + 2, len(LOSSES) - 1))
        for g, share in shares.items():
            table[g] = share
        loss = np.zeros((n, len(LOSSES)))
        loss[:, :-1] = excess[:, None] * table[np.where(gid >= 0, gid, -1)]  # row -1: no share
        loss[:, -1] = loss[:, :-1].sum(axis=1)
        self.loss = loss

    def _event_sources(self, waits, pid, stream, corr, src_end) -> None:
        """Each stream wait (cudaStreamWaitEvent) holds the first work launched on its stream after it until its
        event's record completed: the record completes when the work launched before it on the recording stream
        ended and, on a stream that only passes an event on (no work of its own since), when the events that stream
        was made to wait for completed (followed to the work at their source). The latest such end per activity."""
        if waits.num_rows == 0:
            return
        blocks: dict[tuple, tuple[int, int]] = {}
        keys = np.flatnonzero(np.r_[True, (pid[1:] != pid[:-1]) | (stream[1:] != stream[:-1])])
        for a, b in zip(keys, np.r_[keys[1:], self.n], strict=False):
            blocks[(int(pid[a]), int(stream[a]))] = (int(a), int(b))
        rows = waits.to_pylist()
        by_stream: dict[tuple, list] = {}
        for w in rows:
            by_stream.setdefault((w["global_pid"], w["stream_id"]), []).append(w)
        for v in by_stream.values():
            v.sort(key=lambda w: w["correlation_id"])
        wait_corrs = {k: [w["correlation_id"] for w in v] for k, v in by_stream.items()}
        # per stream, the latest-ending source of its waits so far since its last work (filled as they resolve)
        best_since: dict[tuple, list] = {}
        memo: dict[tuple, int] = {}
        def last_work(p: int, s: int, c: int) -> int:
            blk = blocks.get((p, s))
            if blk is None:
                return -1
            k = blk[0] + int(np.searchsorted(corr[blk[0]:blk[1]], c, side="left")) - 1
            return k if k >= blk[0] else -1

        def waits_best(p: int, s: int, upto: int, depth: int) -> int:
            """The latest-ending source of the first ``upto`` waits on (p, s) that came after its last work."""
            ws, cs = by_stream[(p, s)], wait_corrs[(p, s)]
            done = best_since.setdefault((p, s), [])
            while len(done) < upto:
                i = len(done)
                w = ws[i]
                work = last_work(p, s, cs[i])
                q = source(p, w["record_stream_id"], w["record_correlation_id"], depth + 1)
                prev = done[i - 1] if i and last_work(p, s, cs[i - 1]) == work else -1
                done.append(q if prev < 0 or (q >= 0 and self.E[q] > self.E[prev]) else prev)
            return done[upto - 1] if upto else -1

        def source(p: int, s: int, c: int, depth: int = 0) -> int:
            """The activity whose end completes an event recorded on stream s of process p at correlation id c."""
            key = (p, s, c)
            if key in memo:
                return memo[key]
            best = last = last_work(p, s, c)
            if depth < 8 and (p, s) in by_stream:
                cs = wait_corrs[(p, s)]
                upto = bisect.bisect_left(cs, c)
                since = int(corr[last]) if last >= 0 else -1
                if upto and cs[upto - 1] > since:  # waits after its last work, before the record
                    q = waits_best(p, s, upto, depth)
                    if q >= 0 and (best < 0 or self.E[q] > self.E[best]):
                        best = q
            memo[key] = best
            return best

        for w in rows:
            dep = blocks.get((w["global_pid"], w["stream_id"]))
            if dep is None:
                continue
            q = dep[0] + int(np.searchsorted(corr[dep[0]:dep[1]], w["correlation_id"], side="right"))
            p = source(w["global_pid"], w["record_stream_id"], w["record_correlation_id"])
            if q >= dep[1] or p < 0 or self.E[p] <= src_end[q]:
                continue
            src_end[q] = self.E[p]
            self.src[q] = p

    def _host_pacing(self, calls: pa.Table, pid, tid, launch) -> None:
        """The host's launches after a call that waited for GPU work move with that work: a synchronize, or a launch
        that blocked on a full launch queue, returns as the work it waited for ends, and what the thread does after
        it follows. A call waited when an activity of its process ended while it ran, it returned within
        RELEASE_NS of that end, and it lasted longer than 2 x RELEASE_NS. Each launch after such a call on its thread
        is paced by the work that released the latest one: where the launch set a start, the path goes on from that
        work (the host's time between on the path), and in a replay the launch moves as that work does."""
        launched = np.flatnonzero(tid >= 0)
        if calls.num_rows == 0 or len(launched) == 0:
            return
        c_tid, c_pid = _np(calls, "global_tid").astype(np.int64), _np(calls, "global_pid").astype(np.int64)
        c_start, c_end = _np(calls, "start_ns").astype(np.int64), _np(calls, "end_ns").astype(np.int64)
        # the activity of the call's process that ended last by the call's return
        pids = np.unique(np.r_[pid, c_pid])
        e_key = (np.searchsorted(pids, pid) << SHIFT) + self.E
        by_end = np.argsort(e_key, kind="stable")
        e_key = e_key[by_end]
        j = np.searchsorted(e_key, (np.searchsorted(pids, c_pid) << SHIFT) + c_end, side="right") - 1
        a = by_end[np.maximum(j, 0)]
        waited = ((j >= 0) & (pid[a] == c_pid) & (self.E[a] >= c_start) & (c_end - self.E[a] <= RELEASE_NS)
                  & (c_end - c_start > 2 * RELEASE_NS))
        c_tid, c_end, a = c_tid[waited], c_end[waited], a[waited]
        if len(a) == 0:
            return
        tids = np.unique(np.r_[c_tid, tid[launched]])
        c_key = (np.searchsorted(tids, c_tid) << SHIFT) + c_end
        order = np.argsort(c_key, kind="stable")
        c_key, a = c_key[order], a[order]
        code = np.searchsorted(tids, tid[launched])
        k = np.searchsorted(c_key, (code << SHIFT) + launch[launched], side="right") - 1
        ok = (k >= 0) & ((c_key[np.maximum(k, 0)] >> SHIFT) == code)
        paced, k = launched[ok], k[ok]
        self.released[paced] = a[k]
        # where the launch set the start, the path goes on from the work that released the host
        self.which[paced[self.which[paced] == HOST]] = SYNC

    def rows(self, run_id: str) -> list[dict]:
        out: dict[tuple, dict] = {}
        for code, steps in self.steps():
            reached = self.replay([m for _, m in steps])
            for (dev, members), r in zip(steps, reached, strict=True):
                step = self.step(dev, members)
                step["reached"], step["wait"] = r[:-1], r[-1]
                for key in ((dev, self.texts[code]), (dev, None)):
                    _add(out.setdefault(key, _empty(run_id, *key)), step)
        return [_finish(r) for r in out.values()]

    def steps(self) -> list[tuple[int, list[tuple[int, np.ndarray]]]]:
        """The steps: per NVTX group (its text's code) and instance, (device, its activities) on every device that
        ran it (the k-th instance of the group's text on each), in order."""
        if not (self.code >= 0).any():
            return []
        named = np.flatnonzero(self.code >= 0)
        order = named[np.lexsort((named, self.nvtx_start[named], self.code[named], self.dev[named]))]
        keys = np.stack([self.dev[order], self.code[order], self.nvtx_start[order]])
        cuts = np.flatnonzero(np.r_[True, (keys[:, 1:] != keys[:, :-1]).any(axis=0), True])
        # one step on every device that ran it: the k-th instance of a group's text on each device, replayed
        # together (the ranks' steps span nearly the same time)
        together: dict[tuple, list] = {}
        seen: dict[tuple, int] = {}
        for a, b in zip(cuts[:-1], cuts[1:], strict=False):
            members = np.sort(order[a:b])
            dev, code = int(self.dev[members[0]]), int(self.code[members[0]])
            k = seen[(dev, code)] = seen.get((dev, code), -1) + 1
            together.setdefault((code, k), []).append((dev, members))
        return [(code, steps) for (code, _), steps in sorted(together.items())]

    def step(self, dev: int, members: np.ndarray) -> dict:
        """The critical path of one step: the activities ``members`` of device ``dev``."""
        S, E = self.S, self.E
        t0 = int(S[members].min())
        x = int(members[np.argmax(E[members])])
        times = dict.fromkeys(TIME_KINDS, 0)
        other: dict[int, int] = {}

        def spend(kind: str, d: int, ns: int) -> None:
            if ns <= 0:
                return
            if d == dev or kind in ("host", "unknown"):
                times[kind] += ns
            else:
                other[d] = other.get(d, 0) + ns

        i, guard = x, 2 * self.n + 2
        while guard > 0:
            guard -= 1
            q = self.peer[i]
            if q >= 0:  # its end was set by the rank that arrived last
                spend("comm", int(self.dev[i]), int(E[i] - max(S[q], t0)))
                if S[q] <= t0:
                    break
                j = int(q)
            else:
                k = int(self.head[i])
                if S[k] < t0:  # the chain crosses the step's start: from the first activity that ends after it
                    k = k + int(np.searchsorted(E[k:i + 1], t0, side="right"))
                    self._chain_times(k, i, t0, spend)
                    spend("gap", int(self.dev[k]), int(S[k] - t0))  # before it, its wait for the one before
                    break
                self._chain_times(k, i, t0, spend)
                j = k
            w = self.which[j]
            if w in (PRED, SRC, SYNC):
                p = j - 1 if w == PRED else int(self.src[j] if w == SRC else self.released[j])
                spend("host" if w == SYNC else "gap", int(self.dev[j]), int(S[j] - max(E[p], t0)))
                if E[p] <= t0:
                    break
                i = p
            else:
                spend("host" if w == HOST else "unknown", int(self.dev[j]), int(S[j] - t0))
                break
        return dict(steps=1, span=int(E[x] - t0), times=times, other=other, lost=self.loss[members].sum(axis=0))

    def replay(self, steps: list[np.ndarray], loss: np.ndarray | None = None, clip: bool = True) -> list[np.ndarray]:
        """How much earlier each of ``steps`` (one step's activities on each device that ran it) would end with each
        loss vector's losses of its own activities (its NVTX group's, on every device) removed, and without waits for
        other ranks: the activities running in the steps' window replayed with the same gaps, each start the latest
        of its launch (the host's time, or, after a call that waited for GPU work, that work's end moved as it
        moves), the end before it on its stream and the event records its stream waited for, a collective's end the
        latest arrival among its ranks plus its transfer. What ran before the window stays where it ran.
        ``loss``: other loss vectors (ns per activity and column, negative for a longer duration) in place of the
        attribution's; ``clip``: a step that would end later counts no gain (else a negative one)."""
        n = self.n
        t0 = min(int(self.S[m].min()) for m in steps)
        t1 = max(int(self.E[m].max()) for m in steps)
        lo = np.searchsorted(self.S_sorted, t0 - self.longest, side="left")
        hi = np.searchsorted(self.S_sorted, t1, side="left")
        W = np.sort(self.by_start[lo:hi][self.E[self.by_start[lo:hi]] > t0])
        m = len(W)
        loc = np.full(n, -1, dtype=np.int64)
        loc[W] = np.arange(m)
        own = (self.code[W] == self.code[steps[0][0]])
        losses = np.rint((self.loss if loss is None else loss)[W] * own[:, None]).astype(np.int64)
        # the columns replayed: as it ran, without each loss vector that has a loss here, without waits for ranks
        some = np.flatnonzero(losses.any(axis=0))
        K = len(some) + 2
        cut = np.zeros((m, K), dtype=np.int64)
        cut[:, 1:-1] = losses[:, some]
        d = np.maximum(0, self.work[W][:, None] - cut)  # its duration, or a collective's transfer
        coll = self.coll[W]
        is_coll = (coll >= 0)[:, None]
        gap = self.gap0[W][:, None]
        S0, E0 = self.S[W], self.E[W]
        first = ~self.same[W] | np.r_[True, np.diff(W) != 1]
        pred_fixed = np.where(first, np.where(self.same[W], self.pred_end[W], NEG), NEG)[:, None]
        src = self.src[W]
        src_loc = np.where(src >= 0, loc[np.maximum(src, 0)], -1)
        src_fixed = np.where((src >= 0) & (src_loc < 0), self.src_end[W], NEG)
        rel = self.released[W]
        rel_loc = np.where(rel >= 0, loc[np.maximum(rel, 0)], -1)
        launch = self.launch[W]
        pinned = self.pinned[W]
        seg = np.cumsum(first) - 1
        off = (seg << 46)[:, None]
        starts = np.flatnonzero(first)
        lens = np.diff(np.r_[starts, m])
        # the collectives' ranks: those outside the window arrived where they did
        codes, inv = np.unique(coll[coll >= 0], return_inverse=True)
        outside = {}
        if len(codes):
            members_all = np.flatnonzero(np.isin(self.coll, codes))
            out_all = members_all[loc[members_all] < 0]
            for code, s_out in zip(self.coll[out_all], self.S[out_all], strict=False):
                outside[code] = max(outside.get(code, NEG), int(s_out))
        fixed_arrival = np.array([outside.get(c, NEG) for c in codes], dtype=np.int64)
        S1 = np.repeat(S0[:, None], K, axis=1)
        E1 = np.repeat(E0[:, None], K, axis=1)
        for _ in range(m + 1):
            host = np.repeat(launch[:, None], K, axis=1)
            moved = rel_loc >= 0
            host[moved] = launch[moved][:, None] - (E0[rel_loc[moved]][:, None] - E1[rel_loc[moved]])
            srcv = np.where((src_loc >= 0)[:, None], E1[np.maximum(src_loc, 0)], src_fixed[:, None])
            ext = np.where(pinned[:, None], S0[:, None], np.maximum(host, srcv))
            a = ext + gap + d
            if len(codes):
                arrival = np.repeat(fixed_arrival[:, None], K, axis=1)
                np.maximum.at(arrival, inv, S1[coll >= 0])
                g = np.full((m, K), NEG, dtype=np.int64)
                g[coll >= 0] = arrival[inv]
                g[:, -1] = NEG  # the last column: every rank's collective ends its transfer after its own arrival
                a = np.where(is_coll, np.maximum(a, g + d), a)
            b = gap + d
            a[first] = np.maximum(a[first], pred_fixed[first] + b[first])
            c = np.cumsum(b, axis=0)
            c -= np.repeat(c[starts] - b[starts], lens, axis=0)
            E2 = c + np.maximum.accumulate(a - c + off, axis=0) - off
            before = np.vstack([np.full((1, K), NEG, dtype=np.int64), E2[:-1]])
            before[first] = np.maximum(pred_fixed[first], NEG)
            S2 = np.where(is_coll, np.maximum(ext, before) + gap, E2 - d)
            if (E2 == E1).all() and (S2 == S1).all():
                break
            S1, E1 = S2, E2
        result = []
        for members in steps:
            mine = loc[members]
            span = E1[mine].max(axis=0) - S1[mine].min(axis=0)
            gain = (span[0] - span[1:]).astype(np.float64)
            if clip:
                gain = np.clip(gain, 0, None)
            out = np.zeros(losses.shape[1] + 1)  # each loss vector's (none where it had no loss), then the waits'
            out[some] = gain[:-1]
            out[-1] = gain[-1]
            result.append(out)
        return result

    def _chain_times(self, k: int, i: int, t0: int, spend) -> None:
        """Spend the chain k..i of one stream (its activities' times by kind and the gaps between them), from t0."""
        d = int(self.dev[i])
        for kind in ("compute", "comm", "copy"):
            spend(kind, d, int(self.cum[kind][i + 1] - self.cum[kind][k + 1]))
        spend("gap", d, int(self.cum["gap"][i + 1] - self.cum["gap"][k + 1]))
        # the first activity: the part of it after t0
        spend(("compute", "comm", "copy")[self.cat[k]], d, int(self.E[k] - max(self.S[k], t0)))


def _empty(run_id: str, dev: int, nvtx: str | None) -> dict:
    return dict(run_id=run_id, device_id=dev, nvtx=nvtx, steps=0, span=0, times=dict.fromkeys(TIME_KINDS, 0),
                other={}, lost=np.zeros(len(LOSSES)), reached=np.zeros(len(LOSSES)), wait=0.0)


def _add(acc: dict, step: dict) -> None:
    acc["steps"] += step["steps"]
    acc["span"] += step["span"]
    for k, v in step["times"].items():
        acc["times"][k] += v
    for d, v in step["other"].items():
        acc["other"][d] = acc["other"].get(d, 0) + v
    acc["lost"] = acc["lost"] + step["lost"]
    acc["reached"] = acc["reached"] + step["reached"]
    acc["wait"] += step["wait"]


def _finish(acc: dict) -> dict:
    row = dict(run_id=acc["run_id"], device_id=acc["device_id"], nvtx=acc["nvtx"], steps=acc["steps"],
               step_ms=acc["span"] / 1e6)
    row.update({f"path_{k}_ms": v / 1e6 for k, v in acc["times"].items()})
    row["path_other_devices_ms"] = sum(acc["other"].values()) / 1e6
    row["set_by_device_id"] = max(acc["other"], key=lambda d: (acc["other"][d], -d)) if acc["other"] else None
    row.update({f"lost_{c}_ms": float(v) / 1e6 for c, v in zip(LOSSES, acc["lost"], strict=True)})
    row.update({f"reached_{c}_ms": float(v) / 1e6 for c, v in zip(LOSSES, acc["reached"], strict=True)})
    row["reached_wait_ms"] = float(acc["wait"]) / 1e6
    return row
