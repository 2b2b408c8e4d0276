#!/usr/bin/env python3
"""Perfetto export benchmark: ``traceql export --perfetto`` over a large synthetic run store.

    python benchmarks/perfetto_bench.py [--kernels 1000000] [--devices 8] [--metrics-hz 10000] [--keep DIR]
                                        [--out FILE] [--no-api] [--seed 0]

The run store is the one ``benchmarks/attribute_bench.py`` writes (real schema, real kernel names, a compute and a
communication stream per GPU, one launch call per kernel, a few NVTX ranges, GPU metrics stored wide); ``--keep DIR``
writes it there once and reuses it. The export runs in this process: it prints the time of the attribution it
starts with, the time of writing the trace, the file's size, what was written, and the peak RSS of the process.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _attribute_bench():
    spec = importlib.util.spec_from_file_location("attribute_bench", REPO / "benchmarks" / "attribute_bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["attribute_bench"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--metrics-hz", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", type=Path, help="write the run store here and keep it (reused when it matches)")
    ap.add_argument("--out", type=Path, help="write the trace here (default: a temporary file, removed)")
    ap.add_argument("--no-api", action="store_true", help="leave out the CUDA API calls")
    args = ap.parse_args()

    from traceql.perfetto import export_perfetto

    params = {"kernels": args.kernels, "devices": args.devices, "metrics_hz": args.metrics_hz, "seed": args.seed,
              "bench": 1}
    with tempfile.TemporaryDirectory(prefix="traceql-perfetto-bench-") as tmp:
        root = args.keep or Path(tmp) / "store"
        bench = root / "bench.json"
        if bench.exists() and json.loads(bench.read_text()) == params:
            print(f"reusing {root}")
        else:
            if root.exists() and any(root.iterdir()):
                ap.error(f"--keep {root}: exists and was not written for these parameters; give a new directory")
            t = time.perf_counter()
            rows = _attribute_bench().generate(root, args.kernels, args.devices, args.metrics_hz, args.seed)
            print(f"generated {root} in {time.perf_counter() - t:.1f} s: "
                  + ", ".join(f"{k} {v}" for k, v in sorted(rows.items())))
        out = args.out or Path(tmp) / "trace.pftrace"
        marks: dict[str, float] = {}
        t = time.perf_counter()
        summary = export_perfetto([root], out, api=not args.no_api,
                                  progress=lambda step: marks.setdefault(step, time.perf_counter()))
        total = time.perf_counter() - t
        attribute_s = marks.get("predictions", t) - t
        predictions_s = marks.get("write", t) - marks.get("predictions", t)
        write_s = total - attribute_s - predictions_s
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        events = sum(summary.slices.values()) + summary.counters
        print(summary.text())
        print(f"export: {total:.1f} s in all: attribution {attribute_s:.1f} s, per-instance predictions "
              f"{predictions_s:.1f} s, writing the trace {write_s:.1f} s ({events / max(write_s, 1e-9) / 1e6:.2f} M "
              f"slices and counter samples/s); {summary.bytes / 1e6:.0f} MB; peak RSS {rss:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
