#!/usr/bin/env python3
"""How long ``traceql report`` takes, on the bundled suite and on a store of many small runs, in one run of this script.

    python benchmarks/report_bench.py [--runs 1000] [--kernels 200] [--keep DIR] [--repeat 2]

Stores:

- the bundled suite (``tests/data/h200/suite``: six real traced runs from an H200 and one Nsight Compute profile);
- ``--runs`` small runs of the real schema (``--kernels`` kernels each on two GPUs, a third of them NCCL kernels,
  copies, NVTX ranges, GPU metrics), built as ``benchmarks/open_bench.py`` builds them.

Each case runs in a fresh process (imports included, as a user waits for them); best of ``--repeat``, with that
process's CPU time and peak RSS:

- floor: DuckDB alone reads every run's kernels from a glob of the files (no attribution: what any report must read);
- ``traceql report STORE -o page.html``, the command as a user runs it; the child also says how its time split
  between the queries (compute) and the page (HTML).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
SUITE = REPO / "tests" / "data" / "h200" / "suite"

FLOOR = ("import duckdb; duckdb.sql(\"SELECT run_id, count(*), sum(end_ns - start_ns) "
         "FROM read_parquet('{root}/runs/*/kernels.parquet') GROUP BY 1\").fetchall()")
REPORT = ("import time; t = time.perf_counter()\n"
          "from traceql.report import report\n"
          "r = report({root!r}); c = time.perf_counter() - t\n"
          "r.write({out!r}); h = time.perf_counter() - t - c\n"
          "print('SPLIT', c, h, len(r.runs), {out!r} and __import__('os').path.getsize({out!r}))")


def child(code: str) -> dict:
    """Run ``code`` in a fresh interpreter: its wall time, CPU time, peak RSS and its last 'SPLIT' line."""
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    out, err = proc.stdout.read(), proc.stderr.read()
    if status != 0:
        sys.exit(f"child failed:\n{err[-2000:]}")
    split = next((line.split()[1:] for line in out.splitlines() if line.startswith("SPLIT")), None)
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024, "split": split}


def best(code: str, repeat: int) -> dict:
    return min((child(code) for _ in range(repeat)), key=lambda r: r["wall"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--kernels", type=int, default=200, help="kernels per run")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--keep", type=Path, help="keep the many-run store here (reused when it has --runs runs)")
    args = ap.parse_args()
    from open_bench import store_of

    work = args.keep or Path(tempfile.mkdtemp(prefix="traceql-report-"))
    root = store_of(work, args.runs, args.kernels)
    out = work / "page.html"
    print(f"load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs; best of {args.repeat}")
    print(f"{'store':<40} {'case':<16} {'wall s':>7} {'x floor':>8} {'CPU s':>7} {'RSS MiB':>8} "
          f"{'compute s':>9} {'HTML s':>7} {'page MB':>8}")
    for label, store in ((f"bundled suite ({SUITE.relative_to(REPO)})", SUITE),
                         (f"{args.runs} runs of {args.kernels} kernels", root)):
        floor = best(FLOOR.format(root=str(store)), args.repeat)
        rep = best(REPORT.format(root=str(store), out=str(out)), args.repeat)
        for case, r in (("floor", floor), ("traceql report", rep)):
            compute, html, _runs, size = r["split"] or ("", "", "", "")
            extra = (f"{float(compute):>9.1f} {float(html):>7.1f} {int(size) / 1e6:>8.1f}" if r["split"]
                     else f"{'':>9} {'':>7} {'':>8}")
            print(f"{label:<40} {case:<16} {r['wall']:>7.2f} {r['wall'] / floor['wall']:>8.1f} {r['cpu']:>7.1f} "
                  f"{r['rss_mib']:>8.0f} {extra}")
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
