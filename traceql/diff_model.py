"""What ``traceql diff`` returns (:class:`Diff`, the JSON contract) and what it compares (:class:`Side`), with the
constants of the comparison: the tables, the metrics and their units, the noise floors and the bootstrap's size.
:mod:`traceql.diff` builds the sides, :mod:`traceql.diff_match` compares them."""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from .attribution.result import Attribution
from .attribution.verdict import CAUSES
from .output import json_safe, replacing, unwritable

JSON_SCHEMA_VERSION = 1
LEVEL = 0.95
N_BOOT = 1000
MAX_N = 1000
# the fewest values a side needs for an interval: below 6, no distribution-free 95% interval of a median exists
# (stats.median_ci), and a percentile bootstrap of so few values is too narrow
MIN_N = 6
# Run-to-run noise, calibrated with benchmarks/calibrate_diff.py on the same work measured in different runs on one GPU
# model (docs/diff.md has the figures). Each interval is widened on both sides by it.
# RUN_NOISE, of a signature's duration: the repeated DDP training pair on 2 x H200 (tests/data/h200x2, both GPUs at
# their 700 W limit, the clock between 1065 and 1950 MHz) needs 3.1% beyond the bootstrap interval over the whole
# run (an NCCL all-reduce) and 8.8% within one step (the optimizer's multi_tensor_apply_kernel); identical isolated
# work in other pairs moved by at most 0.9%. ABS_NOISE_NS for short activities: twice the largest shift seen (32 ns
# on a 768 ns kernel), as there were few of them.
RUN_NOISE = 0.10
ABS_NOISE_NS = 64.0
# STEP_NOISE, of a GPU's time measures as a share of the step (of themselves for energy and power): the repeated pair's
# largest shift was 1.1% of the run (communication time, one measurement per run), its step time moved by 0.7%.
STEP_NOISE = 0.02
# FRACTION_NOISE, in the units of a fraction (hidden communication, overlap fraction, compute slowdown): the repeated
# pair's hidden communication fraction moved by 0.074.
FRACTION_NOISE = 0.10
# A signature's change counts (as significant, and toward a device's "changed") only when it moves at least this share
# of the step's time (of the GPU span, ungrouped), whatever its statistics: a sub-microsecond memset 50% slower in one
# step of half a second is real, and no change worth a word (practical significance, as attribution's 1% floor).
PRACTICAL_SHARE = 0.001

# the parts of a summary metric (traceql.gates reads the same names)
SIDE_METRICS = {  # name -> (unit, description)
    "step_ms": ("ms", "mean step time: NVTX ranges matching --group-by-nvtx projected onto the GPU (NULL without)"),
    "steps": ("", "steps: matching NVTX ranges that launched work on the device"),
    "span_ms": ("ms", "first activity start to last activity end on the device, whole run"),
    "compute_ms": ("ms", "time with a non-communication kernel running, per step (per run without steps)"),
    "comm_ms": ("ms", "time with communication running, per step"),
    "overlap_ms": ("ms", "time with both running, per step"),
    "exposed_comm_ms": ("ms", "communication with no compute beside it, per step"),
    "other_ms": ("ms", "neither (idle, copies and sets alone), per step"),
    "hidden_comm_fraction": ("", "overlap_ms / comm_ms"),
    "compute_lost_ms": ("ms", "compute time lost to overlap (attribution), per step"),
    "compute_slowdown": ("", "sum t1 / sum t0 - 1 over overlapped compute kernels (device_summary), whole run"),
    "overlap_fraction": ("", "communication-overlapped share of compute kernel time (device_summary), whole run"),
    "energy_j": ("J", "energy from NVML's counter, per step (first step start to last step end / steps)"),
    "mean_power_w": ("W", "that energy / that time"),
}
DIFF_METRICS = {
    "matched_signatures": "signatures on both sides",
    "slower_signatures": "matched signatures significantly slower in B",
    "faster_signatures": "matched signatures significantly faster in B",
    "new_signatures": "signatures only in B",
    "vanished_signatures": "signatures only in A",
    "shape_changes": "signatures matched by name whose launch shape changed",
    "class_changes": "matched signatures whose attribution class changed",
}
# the tables of a diff, by the names a diff recipe's queries read them
DIFF_TABLES = ("diff_summary", "diff_metrics", "diff_kernels", "diff_steps", "diff_waterfall")
# the files Diff.write puts in its folder
OUT_FILES = ("diff.json", *(f"{t.removeprefix('diff_')}.parquet" for t in DIFF_TABLES))
GATE_COLUMNS = {**dict.fromkeys(SIDE_METRICS, True), **dict.fromkeys(DIFF_METRICS, False)}
PARTS = ("a", "b", "delta", "rel", "lo", "hi", "significant")
ATTR_FIELDS = ("n_overlapped", "t0_ns", "t1_ns", "slowdown", "slowdown_lo", "slowdown_hi", "class", *CAUSES,
               "residual")
WATERFALL = ("compute work", *(f"lost: {c}" for c in (*CAUSES, "unexplained")), "exposed communication", "other")


@dataclass
class Diff:
    """What :func:`diff` returns: Arrow tables (``kernels``, ``summary``, ``metrics``, ``steps``, ``waterfall``),
    the runs of each side, the labels that differ, verdicts per device and notes; :meth:`to_json` is the contract."""

    a: dict
    b: dict
    kernels: pa.Table
    summary: pa.Table
    metrics: pa.Table
    steps: pa.Table
    waterfall: pa.Table
    label_changes: list[dict] = field(default_factory=list)
    verdicts: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    group_by_nvtx: str | None = None

    @property
    def changed(self) -> bool:
        return any(v["changed"] for v in self.verdicts)

    def tables(self) -> dict[str, pa.Table]:
        return {name: getattr(self, name.removeprefix("diff_")) for name in DIFF_TABLES}

    def to_json(self) -> dict:
        return {"schema_version": JSON_SCHEMA_VERSION, "a": self.a, "b": self.b, "group_by_nvtx": self.group_by_nvtx,
                "changed": self.changed, "label_changes": self.label_changes, "verdicts": json_safe(self.verdicts),
                **{k: json_safe(self.__getattribute__(k).to_pylist()) for k in ("summary", "kernels", "steps",
                                                                              "waterfall")},
                "notes": self.notes}

    def write(self, out_dir: str | Path) -> None:
        """diff.json (the contract) and one Parquet file per table in ``out_dir``."""
        import pyarrow.parquet as pq

        out = Path(out_dir)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise unwritable(out, exc) from exc
        # each file written beside its target and renamed over it once all are written: all new, or all as they were
        with contextlib.ExitStack() as stack:
            tmp = {n: stack.enter_context(replacing(out / n)) for n in OUT_FILES}
            tmp["diff.json"].write_text(json.dumps(self.to_json(), indent=1, default=str))
            for name, table in self.tables().items():
                pq.write_table(table, tmp[f"{name.removeprefix('diff_')}.parquet"])


@dataclass
class Side:
    """One side, attributed: its runs, devices, per-signature durations and step windows (plain data, no files)."""

    which: str
    spec: str
    runs: list[dict]
    devices: dict[tuple[str, int], str]
    attribution: Attribution
    signatures: list[dict]
    windows: list[dict]
    spans: list[dict]
    energy: dict[tuple[str, int], tuple[float, float, float, int]]
    notes: list[str] = field(default_factory=list)
    cache: dict = field(default_factory=dict, repr=False)

    def describe(self) -> dict:
        kernels: dict[str, int] = {}
        for sig in self.signatures:
            if sig["activity"] == "kernel":
                kernels[sig["run_id"]] = kernels.get(sig["run_id"], 0) + sig["n"]
        return {"spec": self.spec, "runs": [{**{k: r[k] for k in ("run_id", "name", "source_path", "format",
                                                                  "gpu_names", "labels")},
                                             "kernels": kernels.get(r["run_id"], 0)} for r in self.runs]}


def data_key(*arrays: np.ndarray) -> str:
    """A seed key from the data itself: the same durations give the same interval whatever the kernel is called."""
    h = hashlib.blake2b(digest_size=8)
    for a in arrays:
        h.update(np.sort(np.asarray(a, dtype=np.float64)).tobytes())
        h.update(b"|")
    return h.hexdigest()
