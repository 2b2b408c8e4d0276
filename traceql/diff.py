"""``traceql diff``: compare two runs kernel by kernel and device by device, with significance against run-to-run noise.

Each side (a run directory, some runs of one, or raw traces: one run or many ranks) is attributed on its own with
:func:`traceql.attribute.attribute`, so each side's numbers are the ones ``traceql attribute`` prints. Then:

* runs are paired (one each, else by name, else in order) and their devices by device id; each pair must be the same
  GPU model;
* activity signatures are matched by name and launch shape (grid, block, dynamic shared memory; bytes for copies and
  sets), and NVTX group when grouping; what is left is matched by name alone, in order of first occurrence in the run
  (a kernel whose launch shape changed, such as NCCL's with another NCCL_MAX_CTAS); the rest is new or vanished;
* per signature: the change of its duration, B over A (ratio of medians; of means where the attribution split the
  signature into several kinds of work), with a bootstrap interval widened by the run-to-run noise; significant when
  that interval excludes 0; each side's attribution and the change of its slowdown (MOVER interval) and class;
* per device: compute, communication, overlap, exposed communication and other time (per step with
  ``group_by_nvtx``: the NVTX ranges it matches, projected onto the GPU), step time, energy, compute time lost to
  overlap by cause, and a waterfall of the step-time change by cause.

The tables and the gates that read them are documented in ``docs/diff.md``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import types
from collections.abc import Sequence
from pathlib import Path

import duckdb
import numpy as np

from . import duck, launch, store
from .attribute import attribute
from .diff_model import DIFF_TABLES, GATE_COLUMNS, Diff, Side  # noqa: F401  (this module's API too)
from .errors import BadInputError, MissingInputError, UsageError


def diff(a: str | Path, b: str | Path, *, group_by_nvtx: str | None = None,
         workdir: str | Path | None = None, nvtx_scope: str = "process", nvtx_domains: Sequence[str] = ()) -> Diff:
    """Compare B against A. Each is a run directory (``PATH@RUN[,RUN...]`` picks runs of it by id prefix, name label
    or file name), an nsys export or report; ``group_by_nvtx``: a glob naming the NVTX ranges that are steps, found
    around each launch by the launch rule of :mod:`traceql.launch` (``nvtx_scope``, ``nvtx_domains``)."""
    rule = launch.Rule(nvtx_scope, tuple(nvtx_domains))
    from .diff_match import compare

    if workdir is not None:
        Path(workdir).mkdir(parents=True, exist_ok=True)
    tmp = tempfile.TemporaryDirectory(prefix="traceql-diff-", dir=workdir)
    try:
        inputs = {w: side_inputs(str(spec), Path(tmp.name) / w) for w, spec in (("A", a), ("B", b))}
        preflight(str(a), inputs["A"], str(b), inputs["B"])
        side_a = load_side(str(a), "A", inputs["A"], Path(tmp.name) / "A", group_by_nvtx, rule)
        side_b = load_side(str(b), "B", inputs["B"], Path(tmp.name) / "B", group_by_nvtx, rule)
    finally:
        tmp.cleanup()
    return compare(side_a, side_b, group_by_nvtx)


# --- one side ---------------------------------------------------------------------------------------------------

def input_path(spec: str) -> Path:
    """The file or folder a side names: ``spec``, or the PATH of PATH@RUN."""
    path = Path(spec)
    head, sep, _ = spec.rpartition("@")
    return Path(head) if not path.exists() and sep and head else path


def _resolve(spec: str) -> tuple[Path, list[str]]:
    path = Path(spec)
    if path.exists():
        return path, []
    head, sep, sel = spec.rpartition("@")
    if sep and head and Path(head).exists():
        if not store.is_store(Path(head)):
            raise UsageError(f"{spec}: @RUN picks runs of a run directory, and {head} is not one")
        return Path(head), [s.strip() for s in sel.split(",") if s.strip()]
    raise MissingInputError(f"{spec}: no such run directory or trace (a run directory may be narrowed to some of "
                            "its runs with PATH@RUN, RUN an id prefix, a name label or a file name)")


def _run_name(entry: dict, run_id: str) -> str:
    labels = entry.get("labels") or {}
    return labels.get("name") or Path(entry.get("source_path") or run_id).name.split(".")[0] or run_id


def _select(path: Path, traced: dict[str, dict], selectors: list[str]) -> dict[str, dict]:
    if not traced:
        raise BadInputError(f"{path}: holds no Nsight Systems run (only Nsight Compute runs); ingest a trace into it")
    if not selectors:
        return traced
    chosen = {}
    for sel in selectors:
        hits = [rid for rid, e in traced.items()
                if rid.startswith(sel) or sel in (_run_name(e, rid), Path(e.get("source_path") or "").name)]
        if len(hits) != 1:
            names = ", ".join(f"{_run_name(e, rid)} ({rid})" for rid, e in sorted(traced.items()))
            what = "matches no run" if not hits else f"matches {len(hits)} runs"
            raise UsageError(f"{path}@{sel}: {what}; its runs: {names}")
        chosen[hits[0]] = traced[hits[0]]
    return chosen


def _narrowed_store(path: Path, selectors: list[str], dest: Path) -> Path:
    """A run directory at ``dest`` that links the chosen runs of ``path`` (and its Nsight Compute runs)."""
    from .ingest.ncu import FORMAT as NCU_FORMAT

    runs = store.read_manifest(path)["runs"]
    traced = {rid: e for rid, e in runs.items() if e.get("format") != NCU_FORMAT}
    chosen = _select(path, traced, selectors)
    keep = {**chosen, **{rid: e for rid, e in runs.items() if e.get("format") == NCU_FORMAT}}
    (dest / "runs").mkdir(parents=True)
    for rid in keep:
        store.run_dir(dest, rid).symlink_to(store.run_dir(path, rid).resolve(), target_is_directory=True)
    manifest = store.new_manifest()
    manifest["runs"] = keep
    (dest / store.MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return dest


# A collective's kernel lasts as long as the last rank takes to arrive, then as long as its transfer: what it waited
# is another rank's time (rank_waits reports it), so a matched collective is compared by its transfer time alone.
SIGNATURES_SQL = """
WITH own AS (
    SELECT f.*, f.dur_ns - coalesce(w.wait_ns, 0) AS own_ns
    FROM instance_facts f LEFT JOIN collective_waits w
      ON w.run_id = f.run_id AND w.device_id = f.device_id AND w.start_ns = f.start_ns AND f.kind = 'comm'
)
SELECT run_id, device_id, nvtx, activity, any_value(kind) AS kind, name, any_value(short_name) AS short_name, grid,
       block, dynamic_smem_bytes, bytes, count(*) AS n, list(own_ns ORDER BY own_ns) AS durs, min(start_ns) AS first_ns,
       median(gpc_clock_mhz)::DOUBLE AS clock_mhz, sum(own_ns)::BIGINT AS total_ns
FROM own GROUP BY run_id, device_id, nvtx, activity, name, grid, block, dynamic_smem_bytes, bytes
"""
# Steps: the NVTX ranges matching the glob that attribution grouped the activities by (the innermost matching range
# of the user's around each launch, open on any thread of the launching process or, with --nvtx-scope thread, on the
# launching thread: traceql.launch), each range instance projected onto every GPU it launched work on: from the first
# start of its activities to the later of the range's end and their last end. With the process scope, the backward
# pass that autograd threads launch belongs to the step that the training loop's thread holds open.
STEP_WINDOWS_SQL = """
SELECT f.run_id, f.device_id, g.nvtx AS text, min(f.start_ns) AS start_ns,
       greatest(max(f.end_ns), any_value(g.nvtx_end_ns)) AS end_ns
FROM instance_facts f JOIN _activity_groups g USING (run_id, activity_id)
GROUP BY f.run_id, f.device_id, g.nvtx, g.nvtx_start_ns
"""
SPAN_SQL = """SELECT run_id, device_id, NULL::VARCHAR AS text, min(start_ns) AS start_ns, max(end_ns) AS end_ns
FROM instance_facts GROUP BY ALL"""
# each window's time split by what ran: compute alone, both, communication alone (timeline_segments); the rest is other
PARTITION_SQL = """
SELECT w.run_id, w.device_id, w.text, w.start_ns, w.end_ns,
       coalesce(sum(least(s.end_ns, w.end_ns) - greatest(s.start_ns, w.start_ns)) FILTER (s.state = 'compute'), 0)
           AS compute_alone_ns,
       coalesce(sum(least(s.end_ns, w.end_ns) - greatest(s.start_ns, w.start_ns)) FILTER (s.state = 'overlap'), 0)
           AS overlap_ns,
       coalesce(sum(least(s.end_ns, w.end_ns) - greatest(s.start_ns, w.start_ns)) FILTER (s.state = 'comm'), 0)
           AS exposed_ns
FROM _diff_windows w LEFT JOIN _diff_segments s
  ON s.run_id = w.run_id AND s.device_id = w.device_id AND s.start_ns < w.end_ns AND s.end_ns > w.start_ns
GROUP BY ALL ORDER BY w.run_id, w.device_id, w.start_ns
"""


def side_inputs(spec: str, side_dir: Path) -> list[Path]:
    """The input of one side for ``attribute``: a trace as it is, a run directory narrowed to the runs asked for."""
    path, selectors = _resolve(spec)
    return [_narrowed_store(path, selectors, side_dir / "store") if store.is_store(path) else path]


def preflight(spec_a: str, inputs_a: list[Path], spec_b: str, inputs_b: list[Path]) -> None:
    """Before the attribution (which takes a while): refuse run directories of different GPU models, or with no
    activity name in common. Traces are checked after they are ingested, by the comparison itself."""
    if not all(store.is_store(p) for p in (*inputs_a, *inputs_b)):
        return
    seen = []
    for inputs in (inputs_a, inputs_b):
        con = store.connect(inputs, views=False)
        try:
            gpus = {r[0] for r in con.sql("SELECT DISTINCT name FROM devices WHERE name IS NOT NULL").fetchall()}
            names = {r[0] for r in con.sql("SELECT DISTINCT name FROM kernels UNION SELECT DISTINCT '[memcpy] ' || "
                                           "copy_kind FROM memcpy").fetchall()}
        finally:
            con.close()
        seen.append((gpus, names))
    (gpus_a, names_a), (gpus_b, names_b) = seen
    if gpus_a and gpus_b and not gpus_a & gpus_b:
        raise BadInputError(f"A ({spec_a}) ran on {', '.join(sorted(gpus_a))} and B ({spec_b}) on "
                            f"{', '.join(sorted(gpus_b))}: different GPU models; a diff compares runs of the same "
                            "program on the same GPU model")
    if names_a and names_b and not names_a & names_b:
        raise BadInputError(f"A ({spec_a}) and B ({spec_b}) have no kernel name in common: they are not runs of the "
                            "same program; compare runs of one program before and after a change")


def load_side(spec: str, which: str, inputs: list[Path], side_dir: Path, group_by_nvtx: str | None,
              rule: launch.Rule = launch.DEFAULT) -> Side:
    """Attribute one side and read what the comparison needs from it."""
    con = duck.connect()
    try:
        result = attribute(inputs, group_by_nvtx=group_by_nvtx, workdir=side_dir / "work", con=con,
                           nvtx_scope=rule.scope, nvtx_domains=rule.domains)
        runs = []
        for rid, src, fmt, gpus, labels in con.sql("SELECT run_id, source_path, format, gpu_names, labels_json "
                                                   "FROM runs WHERE format <> 'ncu-rep' ORDER BY run_id").fetchall():
            labels = json.loads(labels or "{}")
            runs.append(dict(run_id=rid, source_path=src, format=fmt, gpu_names=gpus, labels=labels,
                             name=_run_name({"labels": labels, "source_path": src}, rid)))
        devices = {(r, int(d)): n for r, d, n in con.sql("SELECT run_id, device_id, name FROM devices").fetchall()}
        signatures = con.sql(SIGNATURES_SQL).to_arrow_table().to_pylist()
        con.execute("CREATE TEMP TABLE _diff_segments AS SELECT * FROM timeline_segments")
        spans = _partition(con, SPAN_SQL, {})
        windows = _partition(con, STEP_WINDOWS_SQL, {}) if group_by_nvtx else spans
        power = con.sql("SELECT run_id, device_id, ts_ns, power_w, energy_j FROM power "
                        "ORDER BY run_id, device_id, ts_ns").fetchnumpy()
    finally:
        con.close()
    return Side(which, spec, runs, devices, result, signatures, windows, spans, energy(windows, power),
                list(result.notes))


def _partition(con: duckdb.DuckDBPyConnection, windows_sql: str, params: dict) -> list[dict]:
    con.execute(f"CREATE OR REPLACE TEMP TABLE _diff_windows AS {windows_sql}", params)
    return con.sql(PARTITION_SQL).to_arrow_table().to_pylist()


def energy(windows: list[dict], power: dict) -> dict[tuple[str, int], tuple[float, float, float, int]]:
    """Per device: (energy, lo, hi, extent_ns) over the extent of its windows (first start to last end), from NVML's
    energy counter (else the running integral of the power samples).

    NVML publishes a new value every ~100 ms, which is longer than many steps, so the energy at a time t is only known
    to lie between the value of the last sample at or before t and the first value published after t (a value first
    seen at a sample whose previous sample is at or after t); a window's energy is bracketed by those bounds at its
    two ends, narrowed to the least and most power sampled over the extent times its duration (so that the mean power,
    energy / extent_ns, lies within the samples), and its point is the middle of the bracket.
    """
    out: dict = {}
    if not len(power["ts_ns"]):
        return out
    run, dev = np.asarray(power["run_id"], dtype=object), np.asarray(power["device_id"])
    ts = np.asarray(power["ts_ns"], dtype=np.int64)
    counter = np.ma.filled(np.ma.asarray(power["energy_j"], dtype=float), np.nan)
    watts = np.ma.filled(np.ma.asarray(power["power_w"], dtype=float), np.nan)
    extents: dict = {}
    for w in windows:
        key = (w["run_id"], w["device_id"])
        lo, hi = extents.get(key, (w["start_ns"], w["end_ns"]))
        extents[key] = (min(lo, w["start_ns"]), max(hi, w["end_ns"]))
    for key, (start, end) in extents.items():
        sel = (run == key[0]) & (dev == key[1])
        t, e, p = ts[sel], counter[sel], watts[sel]
        if len(t) < 2:
            continue
        if np.isnan(e).any():
            if np.isnan(p).any():
                continue
            e = np.concatenate(([0.0], np.cumsum((p[1:] + p[:-1]) / 2 * np.diff(t) / 1e9)))
        bounds = [_bracket(t, e, x) for x in (start, end)]
        if None in bounds:
            continue
        (s_lo, s_hi), (e_lo, e_hi) = bounds
        lo, hi = max(0.0, e_lo - s_hi), e_hi - s_lo
        # The counter's bracket spans up to two publishing intervals more than the extent: over a short extent its
        # middle divided by the extent's duration is a mean power far above any sample (825 W from samples that peak
        # at 165 W). The power sampled from the last sample at or before the start to the first at or after the end
        # bounds the extent's energy too: the bracket is clipped to [least, most sampled power] x duration (where the
        # counter and the samples disagree, the samples win, so that the mean power never leaves them).
        first = max(int(np.searchsorted(t, start, side="right")) - 1, 0)
        last = min(int(np.searchsorted(t, end, side="left")), len(t) - 1)
        covering = p[first:last + 1]
        if len(covering) and not np.isnan(covering).all():
            seconds = (end - start) / 1e9
            least, most = float(np.nanmin(covering)) * seconds, float(np.nanmax(covering)) * seconds
            lo, hi = min(max(lo, least), most), min(max(hi, least), most)
        out[key] = ((lo + hi) / 2, lo, hi, int(end - start))
    return out


def _bracket(t: np.ndarray, e: np.ndarray, x: int) -> tuple[float, float] | None:
    """(at least, at most) the counter's value at time x; None outside the samples."""
    i = np.searchsorted(t, x, side="right") - 1  # last sample at or before x
    if i < 0:
        return None
    changed = np.flatnonzero(np.diff(e) != 0) + 1  # samples that show a newly published value
    later = changed[t[changed - 1] >= x]  # published after the previous sample, itself at or after x
    if not len(later):
        return None
    return float(e[i]), float(e[later[0]])


class _CallableModule(types.ModuleType):
    """This module, callable: ``traceql.diff(A, B, ...)`` is :func:`diff`, the twin of ``traceql diff``, while
    ``from traceql.diff import ...`` and ``traceql.diff.X`` keep working (as ``traceql.attribute`` does)."""

    def __call__(self, *args, **kwargs) -> Diff:
        return diff(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
