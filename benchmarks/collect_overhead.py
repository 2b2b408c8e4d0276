#!/usr/bin/env python3
"""What ``traceql collect`` costs on the CPU side: wall time with and without nsys, and per NVTX range.

    python benchmarks/collect_overhead.py [--reps 3] [--ranges 100000]

Three figures, each the median of ``--reps`` runs, all with the nsys that traceql finds and the flags
``traceql collect`` passes it on this machine (``traceql.collect.nsys_flags``):

1. ``collectors/cpu_nvtx.py`` (about 0.5 s of work on two threads): plain, under ``nsys profile``, and
   through the whole ``traceql collect`` (profile, export, ingest);
2. the cost of one NVTX push/pop pair in a loop of ``--ranges`` pairs, plain (no tool attached, the calls
   return at once) and under nsys (each range recorded).

No GPU is used: this is the fixed cost of starting nsys, writing and exporting the report, plus the
per-event cost of NVTX; CUDA tracing adds its own per-launch cost on a GPU machine.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CPU_NVTX = REPO / "collectors" / "cpu_nvtx.py"
LOOP = """
import sys, time
sys.path.insert(0, {collectors!r})
from cpu_nvtx import NVTX  # the default domain, also under nsys 2022.4 (see cpu_nvtx.py)
n = {n}
t = time.perf_counter()
for _ in range(n):
    NVTX.push_range(message="r")
    NVTX.pop_range()
print("ns_per_pair", (time.perf_counter() - t) / n * 1e9)
"""


def wall(cmd: list[str], cwd: Path) -> tuple[float, str]:
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(map(str, cmd))}\n{proc.stderr[-2000:]}")
    return time.perf_counter() - t, proc.stdout


def ns_per_pair(stdout: str) -> float:
    return float(re.search(r"^ns_per_pair (\S+)$", stdout, re.M).group(1))  # nsys prints to stdout too


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ranges", type=int, default=100_000)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from traceql.collect import gpus_present, nsys_flags
    from traceql.sources.nsys.locate import find_nsys, nsys_version

    nsys = find_nsys()
    version = nsys_version(nsys)
    flags = nsys_flags(version, gpu_metrics=False, have_gpu=gpus_present())
    py = sys.executable
    loop = LOOP.format(collectors=str(REPO / "collectors"), n=args.ranges)
    times: dict[str, list[float]] = {}
    per_range: dict[str, list[float]] = {"plain": [], "nsys": []}
    with tempfile.TemporaryDirectory(prefix="traceql-overhead-") as tmp:
        tmp = Path(tmp)
        for i in range(args.reps):
            profile = [nsys, "profile", *flags, "-o", str(tmp / f"p{i}")]
            runs = {
                "plain": [py, str(CPU_NVTX)],
                "nsys profile": [*profile, py, str(CPU_NVTX)],
                "traceql collect": [py, "-m", "traceql.cli", "collect", "-o", str(tmp / "store"), "--name", f"c{i}",
                                    "--", py, str(CPU_NVTX)],
            }
            for label, cmd in runs.items():
                times.setdefault(label, []).append(wall(cmd, REPO)[0])
            per_range["plain"].append(ns_per_pair(wall([py, "-c", loop], REPO)[1]))
            per_range["nsys"].append(ns_per_pair(wall([*profile[:-1], str(tmp / f"l{i}"), py, "-c", loop], REPO)[1]))
    print(f"nsys {'.'.join(map(str, version))} ({nsys}), flags: {' '.join(flags)}; median of {args.reps} runs")
    base = statistics.median(times["plain"])
    for label, ts in times.items():
        med = statistics.median(ts)
        extra = "" if label == "plain" else f"  (+{med - base:.2f} s)"
        print(f"  collectors/cpu_nvtx.py, {label:<16} {med:6.2f} s wall{extra}")
    for label, ns in per_range.items():
        print(f"  one NVTX push/pop pair, {label:<15} {statistics.median(ns):8.0f} ns ({args.ranges} pairs)")


if __name__ == "__main__":
    main()
