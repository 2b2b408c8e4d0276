#!/usr/bin/env python3
"""Attribution benchmark: ``traceql.attribute`` over a large synthetic run store, against time and memory targets.

    python benchmarks/attribute_bench.py [--kernels 10000000] [--devices 8] [--metrics-hz 10000] [--keep DIR]
                                         [--seed 0] [--views V1,V2 | --skip-views] [--timeout 1800]
                                         [--max-spill-gib 16] [--against REV]

The run store is written directly as Parquet with the real schema (``traceql.store.schema.TABLES``, through
``schema.writer``), one file per table under ``DIR/runs/run_id=<run_id>/`` and a ``manifest.json`` in
``traceql.store``'s format, so the benchmark measures attribution only, not ingest. One run, ``--devices`` GPUs
(132 SMs each, one process per GPU), ``--kernels`` kernels in all:

- per device a compute stream of back-to-back kernels (1-3 us launch gaps) drawn from about fifty signatures
  built on the real kernel names of ``tests/data/kernel_names_h200.txt`` (GEMMs with 132 CTAs, elementwise
  kernels with thousands of CTAs, norms, softmax, optimizer, ...), and a communication stream of NCCL kernels
  (kind ``comm``, 16-32 CTAs) that each span 4-12 compute kernels and cover about 30% of the time; compute kernels
  under communication run 5-25% longer, by signature;
- one ``runtime_api`` launch per kernel (same global_pid and correlation_id), a few NVTX push/pop ranges;
- GPU metrics (SMs Active, DRAM Read/Write Bandwidth, GPC Clock, NVLink TX User Data), stored wide as ingest stores
  them (a row per device and sample time), sampled at ``--metrics-hz`` per device over the trace span, with values
  that follow the running kernel and communication; "metric samples" counts a value of each metric at each sample,
  as nsys counts its rows.

Everything is generated with numpy/pyarrow, one device at a time and in chunks, so memory stays low.

Then ``traceql.attribute`` runs in a fresh child process: wall time, CPU time and peak RSS of that child
(``os.wait4``: its own rusage). Unless ``--skip-views``, each main view (``--views``) is also evaluated alone in a
fresh child (``SELECT max(COLUMNS(*))``, so that every column is computed) with DuckDB's JSON profiler on, and the
operators that took the most time are listed; a view that the plan reads several times shows its operators xN.
Each child runs in a folder of its own, where DuckDB spills (``./.tmp``); it is stopped past ``--timeout`` seconds
or once it has spilled more than ``--max-spill-gib``, so that a run which cannot finish does not fill the disk.
The child imports traceql from this checkout (whatever is installed elsewhere). ``--against REV`` attributes the same
store with traceql at git revision REV too (a temporary worktree), in the same way, and prints both side by side.
Targets, for the default 10 M kernels on 8 GPUs with GPU metrics: attribute under 15 s and under 2 GiB peak RSS
(stated for a 2-core machine). Exit status 0 when both are met, 2 when not.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from traceql.queries_loader import query_files

REPO = Path(__file__).resolve().parent.parent
NAMES_FILE = REPO / "tests" / "data" / "kernel_names_h200.txt"
GPU_NAME = "NVIDIA H100 80GB HBM3"
SM_COUNT = 132
CHUNK_ROWS = 1 << 19
COMM_TIME_FRACTION = 0.30
COMM_SPAN = (4, 12)  # compute kernels one NCCL kernel overlaps
T_ORIGIN_NS = 1_000_000_000
METRICS = ("SMs Active [Throughput %]", "DRAM Read Bandwidth [Throughput %]", "DRAM Write Bandwidth [Throughput %]",
           "GPC Clock Frequency [MHz]", "NVLink TX User Data [Throughput %]")
TARGET_WALL_S = 15.0  # issue #41: 10 M kernels on 8 GPUs under 15 s and 2 GiB on 2 cores
TARGET_RSS_MIB = 2048
MIB = 1 << 20
VIEWS = ("_activity_steps", "_metric_samples", "kernel_overlap", "kernel_metrics", "_activity_dram", "_corunner_dram",
         "kernel_instances", "kernel_signatures", "kernel_attribution", "device_summary")  # those that exist run
# an editable install maps traceql.queries to its own checkout's queries/ (a finder after sys.path's): without it, the
# package reads the queries/ beside the traceql/ it was imported from, so each checkout runs its own SQL
ATTRIBUTE_CODE = ("import sys; sys.path.insert(0, {src!r}); "
                  "sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, '__name__', '') != '_EditableFinder']; "
                  "import traceql.attribute as a; r = a.attribute([{dir!r}]); "
                  "print(r.kernels.num_rows, r.summary.num_rows)")
CHECKOUT = Path(__file__).resolve().parent.parent


# -- signatures -----------------------------------------------------------------------------------------------------

# family -> (t0 range us, relative launch weight, slowdown under comm range, SMs Active %, DRAM read %, DRAM write %)
FAMILY = {
    "gemm": ((20, 120), 4.0, (0.16, 0.24), 97, 22, 8),
    "attention": ((50, 200), 0.6, (0.10, 0.16), 95, 15, 5),
    "elementwise": ((2, 15), 6.0, (0.06, 0.12), 82, 55, 35),
    "copy": ((2, 12), 3.0, (0.06, 0.12), 70, 50, 45),
    "memset": ((1, 5), 1.0, (0.03, 0.06), 60, 0, 70),
}
OTHER_FAMILY = ((5, 40), 1.0, (0.05, 0.10), 85, 35, 15)


def signatures(rng: np.random.Generator) -> tuple[pa.Table, dict[str, np.ndarray], int]:
    """Kernel signatures: (per-signature columns of ``kernels``, numeric traits of compute signatures, n_compute).

    Rows [0, n_compute) are the compute-stream signatures (kind compute or memory), the rest NCCL kernels.
    """
    from traceql import classify

    names = [n for n in NAMES_FILE.read_text().splitlines() if n.strip()]
    classes = {r["name"]: r for r in classify.classify_names(names).to_pylist()}
    stream = [n for n in names if classes[n]["kind"] in ("compute", "memory")
              and classes[n]["family"] not in ("spin", "stream")]
    comm = [n for n in names if classes[n]["kind"] == "comm"]
    rows, traits = [], {k: [] for k in ("t0_ns", "weight", "slow", "sm_pct", "dram_r", "dram_w")}
    for name in stream + comm:
        c = classes[name]
        fam = c["family"]
        if c["kind"] == "comm":
            ctas = int(rng.integers(16, 33))
            grid, block, regs, smem = (ctas, 1, 1), (640, 1, 1), 96, 0
        elif fam == "gemm":
            grid, block, regs, smem = (SM_COUNT, 1, 1), (384, 1, 1), 168, 200_704
        elif fam == "attention":
            grid, block, regs, smem = (int(rng.choice([4, 8, 16])), 16, 8), (256, 1, 1), 255, 100_352
        elif fam in ("elementwise", "copy", "memset"):
            grid, block, regs, smem = (int(rng.choice([1024, 4096, 16384, 65536])), 1, 1), (128, 1, 1), 26, 0
        else:
            grid, block, regs, smem = (int(rng.choice([264, 528, 1056, 4096])), 1, 1), (512, 1, 1), 40, 4096
        rows.append({"name": name, "short_name": classify.short_name(name), "grid_x": grid[0], "grid_y": grid[1],
                     "grid_z": grid[2], "block_x": block[0], "block_y": block[1], "block_z": block[2],
                     "ctas": grid[0] * grid[1] * grid[2], "threads_per_block": block[0] * block[1] * block[2],
                     "static_smem_bytes": 0 if smem == 0 else 1024, "dynamic_smem_bytes": smem,
                     "regs_per_thread": regs, "kind": c["kind"], "family": fam,
                     **{k: c[k] for k in ("comm_op", "comm_algo", "comm_proto", "comm_dtype", "comm_redop")}})
        if c["kind"] != "comm":
            (lo, hi), weight, (s_lo, s_hi), sm, dr, dw = FAMILY.get(fam, OTHER_FAMILY)
            traits["t0_ns"].append(rng.uniform(lo, hi) * 1000)
            traits["weight"].append(weight)
            traits["slow"].append(rng.uniform(s_lo, s_hi))
            traits["sm_pct"].append(sm)
            traits["dram_r"].append(dr)
            traits["dram_w"].append(dw)
    out = {k: np.asarray(v, dtype=np.float64) for k, v in traits.items()}
    out["weight"] /= out["weight"].sum()
    return pa.Table.from_pylist(rows), out, len(stream)


# -- writing --------------------------------------------------------------------------------------------------------

def _table(table: str, n: int, cols: dict) -> pa.Table:
    """A table of the declared schema; columns not given (or added to the schema since) are null (the signature id
    too: :func:`traceql.store.schema.conform` derives it when the table is written, as ingest does)."""
    from traceql.store import schema

    target = schema.TABLES[table]
    arrays = []
    for f in target:
        v = cols.get(f.name)
        if v is None:
            arrays.append(pa.nulls(n, f.type))
        elif isinstance(v, pa.Array | pa.ChunkedArray):
            arrays.append(v.cast(f.type))
        elif isinstance(v, np.ndarray):
            arrays.append(pa.array(v, type=f.type))
        else:
            arrays.append(pa.repeat(pa.scalar(v, f.type), n))
    return pa.Table.from_arrays(arrays, schema=target)


class Writers:
    """One ``schema.writer`` per table under ``run_dir``; counts the rows written."""

    def __init__(self, run_dir: Path):
        from traceql.store import schema

        self.schema = schema
        self.writers = {t: schema.writer(t, run_dir / f"{t}.parquet", sorted(METRICS) if t == "gpu_metrics" else ())
                        for t in schema.TABLES}
        self.rows = dict.fromkeys(schema.TABLES, 0)

    def write(self, table: str, data: pa.Table) -> None:
        if data.num_rows:
            self.writers[table].write_table(self.schema.conform(table, data))
            self.rows[table] += data.num_rows

    def close(self) -> None:
        for w in self.writers.values():
            w.close()


def _device(w: Writers, run_id: str, dev: int, n_kernels: int, sigs: pa.Table, tr: dict[str, np.ndarray],
            n_stream_sigs: int, sample_ns: int, rng: np.random.Generator) -> None:
    """Kernels, launches, NVTX ranges and GPU metrics of one device (one process, one launching thread)."""
    pid = 4000 + dev
    global_pid = pid << 24
    global_tid = global_pid | pid
    n_comm = max(1, round(n_kernels * COMM_TIME_FRACTION / (sum(COMM_SPAN) / 2)))
    n_comm = min(n_comm, n_kernels // (COMM_SPAN[1] + 2))
    n_comp = n_kernels - n_comm

    # compute stream: back-to-back kernels; those under a communication kernel run longer
    sig = rng.choice(n_stream_sigs, size=n_comp, p=tr["weight"]).astype(np.int32)
    stride = n_comp // max(n_comm, 1)
    span = rng.integers(COMM_SPAN[0], min(COMM_SPAN[1], stride - 1) + 1, n_comm)
    first = np.arange(n_comm, dtype=np.int64) * stride + (rng.random(n_comm) * (stride - span)).astype(np.int64)
    last = first + span - 1
    mark = np.zeros(n_comp + 1, dtype=np.int32)
    np.add.at(mark, first, 1)
    np.add.at(mark, last + 1, -1)
    under_comm = np.cumsum(mark[:-1]) > 0
    del mark
    dur = tr["t0_ns"][sig] * rng.lognormal(0.0, 0.03, n_comp)
    dur = (dur * np.where(under_comm, 1.0 + tr["slow"][sig], 1.0)).astype(np.int64)
    end = T_ORIGIN_NS + dev * 1_000 + np.cumsum(dur + rng.integers(1_000, 3_000, n_comp))
    start = end - dur

    # communication stream: starts inside its first kernel, ends inside its last one
    c_start = start[first] + (rng.random(n_comm) * 0.4 * dur[first]).astype(np.int64)
    c_end = end[last] - (rng.random(n_comm) * 0.4 * dur[last]).astype(np.int64)
    c_end = np.maximum(c_end, c_start + 1_000)
    c_sig = (n_stream_sigs + rng.integers(0, sigs.num_rows - n_stream_sigs, n_comm)).astype(np.int32)

    # one row per kernel in start order (as ingest writes them); correlation ids in launch order
    k_start = np.concatenate([start, c_start])
    order = np.argsort(k_start, kind="stable")
    k_start = k_start[order]
    k_end = np.concatenate([end, c_end])[order]
    k_sig = np.concatenate([sig, c_sig])[order]
    is_comm = order >= n_comp
    del order
    n = n_kernels
    lead = 20_000 + rng.integers(0, 10_000, n)
    api_dur = 3_000 + rng.integers(0, 3_000, n)
    launch_names = pa.array(["cudaLaunchKernel_v7000", "cuLaunchKernelEx"])
    for lo in range(0, n, CHUNK_ROWS):
        sl = slice(lo, min(n, lo + CHUNK_ROWS))
        m = sl.stop - sl.start
        cols = {c: sigs.column(c).take(pa.array(k_sig[sl])) for c in sigs.column_names}
        corr = np.arange(sl.start, sl.stop, dtype=np.int64) + 1
        cols.update(run_id=run_id, global_pid=global_pid, device_id=dev, cuda_device=dev, context_id=1,
                    stream_id=np.where(is_comm[sl], 24, 7), correlation_id=corr, start_ns=k_start[sl],
                    end_ns=k_end[sl], dur_ns=k_end[sl] - k_start[sl])
        w.write("kernels", _table("kernels", m, cols))
        a_start = k_start[sl] - lead[sl]
        w.write("runtime_api", _table("runtime_api", m, {
            "run_id": run_id, "global_pid": global_pid, "global_tid": global_tid, "tid": pid,
            "start_ns": a_start, "end_ns": a_start + api_dur[sl], "dur_ns": api_dur[sl],
            "name": launch_names.take(pa.array(is_comm[sl].astype(np.int8))),
            "correlation_id": corr, "return_value": 0}))
    t_begin = int(k_start[0] - lead.max() - 1_000_000)
    t_end = int(k_end.max() + 1_000_000)
    del k_start, k_end, k_sig, is_comm, lead, api_dur

    # NVTX: a few training steps, each a forward and a backward range
    steps = 20
    b = np.linspace(t_begin + 500_000, t_end - 500_000, steps + 1).astype(np.int64)
    mid = b[:-1] + (b[1:] - b[:-1]) // 3
    n_s, n_e = np.concatenate([b[:-1], b[:-1], mid]), np.concatenate([b[1:], mid, b[1:]])
    w.write("nvtx", _table("nvtx", 3 * steps, {
        "run_id": run_id, "global_pid": global_pid, "global_tid": global_tid, "tid": pid, "start_ns": n_s,
        "end_ns": n_e, "dur_ns": n_e - n_s, "event_type": "push_pop",
        "text": pa.array([f"train_step {i}" for i in range(steps)] + ["forward"] * steps + ["backward"] * steps),
        "depth": np.repeat(np.array([0, 1, 1], dtype=np.int32), steps)}))

    # GPU metrics, stored wide: every metric at every sample; values follow the running kernel and communication
    per_chunk = CHUNK_ROWS * 2 // len(METRICS)
    for t0 in range(t_begin, t_end, per_chunk * sample_ns):
        ts = np.arange(t0, min(t_end, t0 + per_chunk * sample_ns), sample_ns, dtype=np.int64)
        ki = np.searchsorted(start, ts, side="right") - 1
        running = (ki >= 0) & (ts < end[np.maximum(ki, 0)])
        ks = sig[np.maximum(ki, 0)]
        ci = np.searchsorted(c_start, ts, side="right") - 1
        comm = ((ci >= 0) & (ts < c_end[np.maximum(ci, 0)])).astype(np.float64)
        noise = rng.normal(0.0, 1.5, (len(METRICS), len(ts)))
        vals = np.stack([
            np.where(running, tr["sm_pct"][ks], 0.0) + 3 * comm + noise[0],
            np.where(running, tr["dram_r"][ks], 0.0) + 8 * comm + noise[1],
            np.where(running, tr["dram_w"][ks], 0.0) + 4 * comm + noise[2],
            1980.0 - 15 * comm + np.round(noise[3]),
            comm * 60.0 + np.abs(noise[4]),
        ], axis=1)
        vals[:, [0, 1, 2, 4]] = np.clip(vals[:, [0, 1, 2, 4]], 0.0, 100.0)
        samples = _table("gpu_metrics", len(ts), {"run_id": run_id, "device_id": dev, "ts_ns": ts})
        for i in np.argsort(METRICS):  # the writer's column order
            samples = samples.append_column(METRICS[i], pa.array(vals[:, i]))
        w.write("gpu_metrics", samples)


def generate(root: Path, kernels: int, devices: int, metrics_hz: int, seed: int) -> dict[str, int]:
    """Write the synthetic run store under ``root``; return the rows per table."""
    import traceql
    from traceql import store

    params = {"kernels": kernels, "devices": devices, "metrics_hz": metrics_hz, "seed": seed, "bench": 1}
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()
    run_id = digest[:16]
    run_dir = store.run_dir(root, run_id)
    run_dir.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    sigs, traits, n_stream = signatures(rng)
    sample_ns = round(1e9 / metrics_hz)
    w = Writers(run_dir)
    try:
        w.write("runs", _table("runs", 1, {
            "run_id": run_id, "source_path": "synthetic", "source_sha256": digest, "format": "synthetic",
            "tool": "traceql benchmarks/attribute_bench.py", "host": "synthetic", "gpu_names": GPU_NAME,
            "ingested_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "traceql_version": traceql.__version__, "labels_json": json.dumps(params, sort_keys=True)}))
        d = np.arange(devices, dtype=np.int32)
        w.write("devices", _table("devices", devices, {
            "device_id": d, "name": GPU_NAME, "uuid": pa.array([f"GPU-synthetic-{i:04d}" for i in d]),
            "bus_id": pa.array([f"0000:{0x18 + 0x10 * i:02x}:00.0" for i in d]), "sm_count": SM_COUNT,
            "l2_bytes": 50 * MIB, "mem_bytes": 80 * 1024 * MIB, "mem_bandwidth_Bps": 3_350_000_000_000,
            "clock_hz": 1_980_000_000, "cc_major": 9, "cc_minor": 0, "max_smem_per_sm_bytes": 233_472,
            "max_warps_per_sm": 64, "max_blocks_per_sm": 32, "max_regs_per_sm": 65_536}))
        w.write("processes", _table("processes", devices, {
            "run_id": run_id, "global_pid": (4000 + d.astype(np.int64)) << 24, "pid": 4000 + d.astype(np.int64),
            "name": "python", "rank": d}))
        for dev in range(devices):
            n_dev = kernels // devices + (1 if dev < kernels % devices else 0)
            _device(w, run_id, dev, n_dev, sigs, traits, n_stream, sample_ns, np.random.default_rng([seed, dev]))
    finally:
        w.close()
    with store.locked_manifest(root) as manifest:
        manifest["runs"][run_id] = {"run_id": run_id, "source_path": "synthetic", "sha256": digest,
                                    "format": "synthetic", "tables": dict(w.rows)}
    (root / "bench.json").write_text(json.dumps(params, sort_keys=True))
    return dict(w.rows)


# -- measuring ------------------------------------------------------------------------------------------------------

@dataclass
class Child:
    rc: int
    wall_s: float
    cpu_s: float
    rss_mib: float
    spill_mib: float
    output: str
    killed: str | None = None  # why the benchmark stopped it: time limit, spill limit


def _dir_bytes(path: Path) -> int:
    """The bytes of the files under ``path``, subfolders included."""
    total = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(path):
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False):
                    total += _dir_bytes(Path(entry.path))
                else:
                    total += entry.stat(follow_symlinks=False).st_size
    return total


def child(args: list[str], folder: Path, timeout_s: float, max_spill_mib: float) -> Child:
    """Run ``args`` as a fresh child process in its own ``folder``; its wall and CPU time, peak RSS and spill.

    DuckDB spills to ``./.tmp``, and under ``$TRACEQL_MEMORY_LIMIT`` to a folder in the system's temporary
    directory, which the child gets as ``./.tmp`` too (``TMPDIR``): a folder of its own keeps the spill measurable
    and safe (a spill folder shared with other DuckDB processes, tests run from the repository say, can be removed
    under it when one of them exits). The child is killed past ``timeout_s`` or once its spill exceeds
    ``max_spill_mib``, so a run that cannot finish does not fill the disk.
    """
    (folder / ".tmp").mkdir(parents=True, exist_ok=True)
    with (folder / "output.txt").open("w+") as out:
        t = time.perf_counter()
        p = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=folder,
                             env={**os.environ, "TMPDIR": str(folder / ".tmp")})
        killed, spill = None, 0
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)  # this child's own rusage, not all children's
            if pid:
                break
            spill = max(spill, _dir_bytes(folder / ".tmp"))
            if killed is None and time.perf_counter() - t > timeout_s:
                killed = f"stopped after {timeout_s:.0f} s"
            elif killed is None and spill > max_spill_mib * MIB:
                killed = f"stopped: spilled over {max_spill_mib / 1024:.0f} GiB to disk"
            if killed:
                p.kill()
                _, status, usage = os.wait4(p.pid, 0)
                break
            time.sleep(0.25)
        wall = time.perf_counter() - t
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    shutil.rmtree(folder / ".tmp", ignore_errors=True)
    return Child(p.returncode, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024,  # maxrss: KiB
                 spill / MIB, text, killed)


def profile_view(run_dir: str, view: str, profile_path: str) -> None:
    """Child mode: evaluate every column of ``view`` with DuckDB's JSON profiler on; print the query time.

    A view that the attribution computes (``traceql.attribution.NEEDS_PREPARE``) is evaluated after ``prepare``
    from its own SQL (``queries/VIEW.sql``), over the tables ``prepare`` computed: its own cost. (Read as a view
    it would be the table ``prepare`` kept, and before ``prepare`` it refuses to be read.) For a view the engine
    computes in ``prepare`` (``_group_predictions``), that file is its reference SQL, not what ``prepare`` runs."""
    from traceql import attribution, store
    from traceql.queries_loader import query_files

    con = store.connect([run_dir])
    select = f'"{view}"'
    if attribution.needs_prepare(select):
        attribution.prepare(con)
        select = f"({dict(query_files())[view + '.sql']})"
    con.execute("SET enable_profiling = 'json'")
    con.execute(f"SET profiling_output = '{profile_path}'")
    t = time.perf_counter()
    con.execute(f"SELECT max(COLUMNS(*)) FROM {select}").fetchall()
    print(f"query_s {time.perf_counter() - t:.3f}")


def _brief(op: dict) -> str:
    info = op.get("extra_info") or {}
    parts = []
    for key in ("Join Type", "Conditions", "Groups", "Projections", "Aggregates", "Function", "Table"):
        v = info.get(key)
        if v:
            v = "; ".join(v) if isinstance(v, list) else str(v)
            parts.append(f"{key}: {v}")
    return " | ".join(parts).replace("\n", " ")


def hot_operators(profile: dict, top: int = 6) -> list[tuple[float, int, str, int, str]]:
    """The ``top`` operators by own time, alike ones (same type and details) summed, as a view read several times
    in one plan appears once per read: (seconds, count, type, output rows of one, brief)."""
    alike: dict[tuple[str, str], list] = {}

    def walk(op: dict) -> None:
        typ = op.get("type") or op.get("operator_type") or "?"
        entry = alike.setdefault((typ, _brief(op)), [0.0, 0, 0])
        entry[0] += float(op.get("timing") or op.get("operator_timing") or 0.0)
        entry[1] += 1
        entry[2] = max(entry[2], int(op.get("intermediate_rows") or op.get("operator_cardinality") or 0))
        for c in op.get("children", []):
            walk(c)

    for root in profile.get("operator") or profile.get("children") or []:
        walk(root)
    ranked = sorted(((sec, n, typ, rows, brief) for (typ, brief), (sec, n, rows) in alike.items()), reverse=True)
    return ranked[:top]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", type=int, default=10_000_000)
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--metrics-hz", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", type=Path, help="write the run store here and keep it (reused when it matches)")
    ap.add_argument("--skip-views", action="store_true", help="do not profile the views one by one")
    ap.add_argument("--views", default=",".join(VIEWS), help="comma-separated views to profile (default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=1800, help="stop a child after this many seconds")
    ap.add_argument("--max-spill-gib", type=float, default=16, help="stop a child that spills more than this to disk")
    ap.add_argument("--against", metavar="REV", help="also attribute with traceql at this git revision, side by side")
    ap.add_argument("--profile-view", nargs=3, metavar=("RUN_DIR", "VIEW", "PROFILE_JSON"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.profile_view:
        profile_view(*args.profile_view)
        return 0
    if args.kernels < args.devices * 64 or args.devices < 1 or args.metrics_hz < 1:
        ap.error("need --devices >= 1, --metrics-hz >= 1 and at least 64 kernels per device")

    params = {"kernels": args.kernels, "devices": args.devices, "metrics_hz": args.metrics_hz, "seed": args.seed,
              "bench": 1}
    tmp = None
    if args.keep:
        root = args.keep.resolve()
        if root.exists() and any(root.iterdir()) and not (root / "bench.json").is_file():
            ap.error(f"--keep {root}: exists and was not written by this benchmark; give a new or empty directory")
    else:
        tmp = tempfile.TemporaryDirectory(prefix="traceql-attribute-bench-")
        root = Path(tmp.name) / "store"
    work = Path(tempfile.mkdtemp(prefix="traceql-attribute-bench-work-"))
    try:
        bench = root / "bench.json"
        if bench.is_file() and json.loads(bench.read_text()) == params and (root / "manifest.json").is_file():
            from traceql import store

            if store.migrate(root) is not None:  # a store kept by an earlier traceql
                print(f"migrated {root} to layout {store.LAYOUT}")
            rows = next(iter(json.loads((root / "manifest.json").read_text())["runs"].values()))["tables"]
            print(f"reusing the run store in {root}")
        else:
            if root.exists():
                shutil.rmtree(root)
            t = time.perf_counter()
            rows = generate(root, args.kernels, args.devices, args.metrics_hz, args.seed)
            size = sum(p.stat().st_size for p in root.rglob("*.parquet"))
            gen_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"generated {root} in {time.perf_counter() - t:.1f} s (peak RSS {gen_rss:.0f} MiB; "
                  f"{size / MIB:.0f} MiB of Parquet): " + ", ".join(f"{k} {v:,}" for k, v in rows.items() if v))

        versions = {"this checkout": CHECKOUT}
        if args.against:
            tree = work / "against"
            subprocess.run(["git", "-C", str(CHECKOUT), "worktree", "add", "--detach", "-q", str(tree), args.against],
                           check=True)
            versions[args.against] = tree
        results = {}
        for label, src in versions.items():
            code = ATTRIBUTE_CODE.format(src=str(src), dir=str(root))
            results[label] = child([sys.executable, "-c", code], work / f"attribute-{len(results)}", args.timeout,
                                   args.max_spill_gib * 1024)
        if args.against:
            subprocess.run(["git", "-C", str(CHECKOUT), "worktree", "remove", "--force", str(versions[args.against])],
                           check=False)
            print(f"\n{'traceql':<16} {'wall s':>8} {'CPU s':>8} {'peak RSS MiB':>13}  "
                  f"({rows.get('kernels', 0):,} kernels, {args.devices} devices, one after the other, fresh processes)")
            for label, r in results.items():
                state = "" if not r.killed and r.rc == 0 else f"  ({r.killed or f'exit code {r.rc}'})"
                print(f"{label:<16} {r.wall_s:>8.1f} {r.cpu_s:>8.1f} {r.rss_mib:>13.0f}{state}")
            print()
        a = results["this checkout"]
        last = a.output.strip().splitlines()[-1] if a.output.strip() else ""  # after any DuckDB progress bars
        if a.killed:
            print(f"attribute: {a.killed}, after {a.wall_s:.0f} s (CPU {a.cpu_s:.0f} s, peak RSS {a.rss_mib:.0f} MiB, "
                  f"spill {a.spill_mib:.0f} MiB)")
        elif a.rc != 0:
            print(a.output[-4000:])
            print(f"attribute: failed (exit code {a.rc})")
        else:
            print(f"attribute: {last}  (kernel_attribution rows, device_summary rows); spilled {a.spill_mib:.0f} MiB")

        known = {name.removesuffix(".sql") for name, _ in query_files()}
        views = [v for v in args.views.split(",") if v and v in known] if not args.skip_views else []
        if views:
            print("\nviews, each alone in a fresh process (SELECT max(COLUMNS(*)) FROM view; a time includes the views "
                  "it reads, as often as the plan evaluates them):")
            for view in views:
                prof = work / f"{view}.json"
                v = child([sys.executable, str(Path(__file__).resolve()), "--profile-view", str(root), view, str(prof)],
                          work / view, args.timeout, args.max_spill_gib * 1024)
                if v.killed or v.rc != 0:
                    print(f"  {view:<20} {v.killed or f'failed (exit code {v.rc})'}  (CPU {v.cpu_s:.1f} s, peak RSS "
                          f"{v.rss_mib:.0f} MiB, spill {v.spill_mib:.0f} MiB)")
                    if not v.killed:
                        print(v.output[-2000:])
                    continue
                q = next((float(line.split()[1]) for line in v.output.splitlines() if line.startswith("query_s ")),
                         v.wall_s)
                print(f"  {view:<20} {q:7.1f} s (CPU {v.cpu_s:6.1f} s)  peak RSS {v.rss_mib:7.0f} MiB  spill "
                      f"{v.spill_mib:6.0f} MiB   hot operators (own time, summed over threads; xN: N alike):")
                if prof.is_file():
                    for sec, n, typ, nrows, brief in hot_operators(json.loads(prof.read_text())):
                        print(f"      {sec:7.2f} s x{n:<3} {typ:<15} {nrows:>13,} rows  {brief[:140]}")

        samples = rows.get("gpu_metrics", 0) * len(METRICS)  # values: a sample of each metric, as nsys counts them
        print()
        header = (f"{'kernels':>12} {'devices':>8} {'metric samples':>15} {'wall s':>8} {'CPU s':>8} "
                  f"{'peak RSS MiB':>13}  targets")
        print(header)
        print("-" * len(header))
        done = not a.killed and a.rc == 0
        ok_t, ok_m = done and a.wall_s < TARGET_WALL_S, a.rss_mib < TARGET_RSS_MIB
        wall = f"{a.wall_s:.1f}" if done else f">{a.wall_s:.0f}"
        print(f"{rows.get('kernels', 0):>12,} {args.devices:>8} {samples:>15,} {wall:>8} {a.cpu_s:>8.1f} "
              f"{a.rss_mib:>13.0f}  wall < {TARGET_WALL_S:.0f} s: {'met' if ok_t else 'MISSED'}; "
              f"RSS < {TARGET_RSS_MIB / 1024:g} GiB: {'met' if ok_m else 'MISSED'}  ({os.cpu_count()} cores"
              f"{'' if done else '; ' + (a.killed or f'exit code {a.rc}')})")
        return 0 if ok_t and ok_m else 2
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
