#!/usr/bin/env python3
"""The sweep engine against its floor and against the reference SQL, side by side in one run.

    python benchmarks/engine_bench.py STORE [--repeat 3]

STORE is a run store (e.g. one written by ``benchmarks/attribute_bench.py --keep DIR``, or ``traceql ingest``).
Three ways to the same exact answer, per device: the union of communication, of compute, and their overlap (ns),
and every activity's overlap with communication (checked equal across the three):

- floor: read only the needed Parquet columns (start, end, device, kind, is_peer) with pyarrow and sweep each
  device with the smallest exact numpy code (sort the boundaries, cumulative sums): the least work there is;
- unions: ``traceql.connect`` + ``traceql.engine.device_unions`` over ``_union_intervals`` (what ``traceql overlap``
  runs: the same work as the floor);
- pass: ``traceql.connect`` + the activity rows + the engine's one pass per device as ``prepare`` runs it (more work
  than the floor: every activity's overlap by each class, SM·ns, GPU-metric means, DRAM demand, launch context);
- sql: the unions through the reference SQL (``_activity_steps``, ``_instance_overlap``, ``_device_unions``).

Each is timed in a fresh child process (wall time, peak RSS); the best of ``--repeat`` runs is printed, with the
ratio to the floor. On a shared machine, run it when the CPUs are idle (the load average is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

FLOOR = r"""
import glob, json, sys, numpy as np, pyarrow.parquet as pq, pyarrow as pa
root = sys.argv[1]
def read(table, cols):
    files = glob.glob(f"{root}/runs/*/{table}.parquet")
    return pa.concat_tables([pq.read_table(f, columns=cols) for f in files]) if files else None
k = read("kernels", ["device_id", "start_ns", "end_ns", "kind"])
m = read("memcpy", ["device_id", "start_ns", "end_ns", "is_peer"])
s = read("memset", ["device_id", "start_ns", "end_ns"])
parts = [(k["device_id"].to_numpy(), k["start_ns"].to_numpy(), k["end_ns"].to_numpy(),
          np.where(np.asarray(k["kind"].to_numpy(zero_copy_only=False) == "comm"), 0, 1))]
if m is not None:
    parts.append((m["device_id"].to_numpy(), m["start_ns"].to_numpy(), m["end_ns"].to_numpy(),
                  np.where(m["is_peer"].to_numpy(zero_copy_only=False).astype(bool), 0, 2)))
if s is not None:
    parts.append((s["device_id"].to_numpy(), s["start_ns"].to_numpy(), s["end_ns"].to_numpy(), np.full(len(s), 2)))
dev, start, end, cls = (np.concatenate(x) for x in zip(*parts))
out = {}
for d in np.unique(dev):
    sel = dev == d
    st, en, c = start[sel], end[sel], cls[sel]
    t = np.concatenate([st, en]); order = np.argsort(t, kind="stable"); ts = t[order]
    n = len(st); is_start = order < n; kid = np.where(is_start, order, order - n)
    sign = np.where(is_start, 1, -1); ck = c[kid]
    seg = np.diff(ts)
    comm = np.cumsum(np.where(ck == 0, sign, 0))[:-1] > 0
    comp = np.cumsum(np.where(ck == 1, sign, 0))[:-1] > 0
    out[int(d)] = [int(seg[comp].sum()), int(seg[comm].sum()), int(seg[comm & comp].sum())]
print(json.dumps(out))
"""

TRACEQL = r"""
import json, sys
import traceql
from traceql import engine
from traceql.queries_loader import materialize
con = traceql.connect(sys.argv[1])
if sys.argv[2] == "unions":
    engine.device_unions(con)
elif sys.argv[2] == "pass":
    for stage in ("_activity_rows", "_activity_occurrence", "_activity_groups", "_instance_sweeps"):
        engine.STAGES[stage](con)
else:
    materialize(con, ("_activity_rows", "_activity_steps", "_instance_overlap", "_device_unions"))
rows = con.sql("SELECT device_id, compute_ns, comm_ns, overlap_ns FROM _device_unions ORDER BY ALL").fetchall()
print(json.dumps({str(d): [c, m, o] for d, c, m, o in rows}))
"""


def child(code: str, *args: str) -> tuple[float, float, dict]:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()  # small: one JSON line
    _, status, usage = os.wait4(proc.pid, 0)  # the child's own rusage
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"child failed ({os.waitstatus_to_exitcode(status)})")
    return wall, usage.ru_maxrss / 1024, {str(k): v for k, v in json.loads(out).items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("store", type=Path)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    print(f"store {a.store}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    results = {}
    for name, code, args in (("floor", FLOOR, [str(a.store)]), ("unions", TRACEQL, [str(a.store), "unions"]),
                             ("pass", TRACEQL, [str(a.store), "pass"]), ("sql", TRACEQL, [str(a.store), "sql"])):
        runs = [child(code, *args) for _ in range(a.repeat)]
        wall = min(r[0] for r in runs)
        rss = max(r[1] for r in runs)
        results[name] = (wall, rss, runs[0][2])
    answers = {name: r[2] for name, r in results.items()}
    same = all(answer == answers["floor"] for answer in answers.values())
    floor = results["floor"][0]
    print(f"{'path':8s} {'wall s':>8s} {'x floor':>8s} {'peak RSS MiB':>13s}")
    for name, (wall, rss, _) in results.items():
        print(f"{name:8s} {wall:8.2f} {wall / floor:8.1f} {rss:13.0f}")
    print("same answer on every device:", same)
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
