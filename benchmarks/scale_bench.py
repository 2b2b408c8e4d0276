#!/usr/bin/env python3
"""Scale benchmark: many rank files through the local executor and a Dask LocalCluster.

    python benchmarks/scale_bench.py [--ranks 256] [--workers 2] [--kernels 20000] [--metrics-hz 2000]
                                     [--trace tests/data/h200/train_ddp.sqlite.xz] [--keep DIR] [--skip-ingest]

Two workloads, each through ``--executor local:N`` (a process pool) and ``dask://`` (a ``LocalCluster`` of N
worker processes, one thread each), N = ``--workers``:

- ingest: ``--ranks`` rank files, each a real nsys SQLite export (``--trace``, decompressed) with its SQLite
  ``user_version`` set to the rank, so that every file is another file (another sha256, another run) holding the
  same events;
- attribute: ``--ranks`` synthetic runs of ``--kernels`` kernels on one GPU each, with GPU metrics sampled at
  ``--metrics-hz`` (written with the real schema by ``benchmarks/attribute_bench.py``'s generator: kernels from
  real kernel names, NCCL kernels covering about 30% of the time, SMs Active, DRAM, clock and NVLink metrics),
  attributed one run per unit; the one-connection computation over every run is measured too, for reference.

Reported per case: wall time, and the peak RSS of the largest worker process (the pool's processes, or the Dask
workers) and of the client, sampled every 0.1 s. The results of the two
executors are checked to be equal (attribution JSON, byte for byte). ``docs/scale.md`` has the figures.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))


def make_rank_files(trace: Path, ranks: int, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    base = folder / "base.sqlite"
    if not base.exists():
        opener = lzma.open if trace.suffix == ".xz" else open
        with opener(trace, "rb") as src, open(base, "wb") as dst:
            shutil.copyfileobj(src, dst)
    files = []
    for r in range(ranks):
        f = folder / f"rank{r:04d}.sqlite"
        if not f.exists():
            shutil.copy(base, f)
            con = sqlite3.connect(f)
            con.execute(f"PRAGMA user_version = {r + 1}")  # another file, the same events
            con.close()
        files.append(f)
    return files


def make_synthetic_store(root: Path, ranks: int, kernels: int, metrics_hz: int) -> Path:
    from attribute_bench import generate

    from traceql import store

    if store.is_store(root) and len(store.read_manifest(root)["runs"]) == ranks:
        return root
    shutil.rmtree(root, ignore_errors=True)
    for r in range(ranks):
        generate(root, kernels, 1, metrics_hz, seed=r)
    return root


class PeakSampler:
    """Peak RSS of this process and of each of its descendants (pool workers, Dask nannies and workers), sampled
    every 0.1 s while a case runs: short-lived peaks between samples are missed, so the figures are lower bounds."""

    def __init__(self):
        import threading

        import psutil

        self.me = psutil.Process()
        self.peaks: dict[int, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil

        while not self.stop.is_set():
            for p in [self.me, *self.me.children(recursive=True)]:
                try:
                    rss = p.memory_info().rss / 2**20
                except psutil.Error:
                    continue
                self.peaks[p.pid] = max(self.peaks.get(p.pid, 0.0), rss)
            self.stop.wait(0.1)

    def __enter__(self) -> PeakSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def run_case(name: str, fn) -> dict:
    with PeakSampler() as peaks:
        t0 = time.perf_counter()
        result = fn()
        wall = time.perf_counter() - t0
    me = peaks.me.pid
    workers = [v for pid, v in peaks.peaks.items() if pid != me]
    row = {"case": name, "wall_s": round(wall, 1), "worker_peak_mib": round(max(workers)) if workers else None,
           "client_peak_mib": round(peaks.peaks.get(me, 0.0)),
           "load_avg_1min": round(os.getloadavg()[0], 1)}  # other work on the machine slows every case
    print(json.dumps(row), flush=True)
    return {"row": row, "result": result}


def max_relative_difference(a, b) -> float:
    """The largest relative difference between two JSON documents of the same shape (strings and ints equal)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        return max((max_relative_difference(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, list):
        assert len(a) == len(b)
        return max((max_relative_difference(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) / max(abs(a), abs(b)) if a != b else 0.0
    assert a == b, (a, b)
    return 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--kernels", type=int, default=20_000, help="kernels per synthetic run")
    ap.add_argument("--metrics-hz", type=int, default=2_000)
    ap.add_argument("--trace", type=Path, default=REPO / "tests" / "data" / "h200" / "train_ddp.sqlite.xz")
    ap.add_argument("--keep", type=Path, help="keep the rank files and stores here (reused when they match)")
    ap.add_argument("--skip-ingest", action="store_true")
    ap.add_argument("--skip-attribute", action="store_true")
    args = ap.parse_args()

    import duckdb
    from distributed import LocalCluster

    import traceql
    from traceql.attribute import attribute

    work = args.keep or Path(tempfile.mkdtemp(prefix="traceql-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    with LocalCluster(processes=True, n_workers=args.workers, threads_per_worker=1, dashboard_address=":0") as cl:
        spec = "dask://" + cl.scheduler_address.removeprefix("tcp://")
        local = f"local:{args.workers}"
        if not args.skip_ingest:
            files = make_rank_files(args.trace, args.ranks, work / "ranks")
            for kind, ex in (("pool", local), ("dask", spec)):
                out = work / f"ingest-{kind}"
                shutil.rmtree(out, ignore_errors=True)
                case = run_case(f"ingest {args.ranks} rank files, {ex.split('://')[0]}",
                                lambda out=out, ex=ex: traceql.ingest(files, out, executor=ex))
                assert len(case["result"]) == args.ranks
                rows.append(case["row"])
        if not args.skip_attribute:
            root = make_synthetic_store(work / "synthetic", args.ranks, args.kernels, args.metrics_hz)
            results = {}
            for kind, ex in (("pool", local), ("dask", spec)):
                case = run_case(f"attribute {args.ranks} runs, {ex.split('://')[0]}",
                                lambda ex=ex: attribute(root, executor=ex))
                rows.append(case["row"])
                results[kind] = json.dumps(case["result"].to_json(), default=str)
            assert results["pool"] == results["dask"], "the executors disagree"
            case = run_case(f"attribute {args.ranks} runs, one connection",
                            lambda: attribute(root, con=duckdb.connect()))
            rows.append(case["row"])
            # one connection runs DuckDB's aggregates on every core: floating-point sums in another order
            worst = max_relative_difference(case["result"].to_json(), json.loads(results["pool"]))
            print(json.dumps({"one connection against the units, largest relative difference": worst}))
            assert worst < 1e-12, worst
    print(json.dumps({"ranks": args.ranks, "workers": args.workers, "kernels_per_run": args.kernels,
                      "metrics_hz": args.metrics_hz, "rows": rows}, indent=1))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
