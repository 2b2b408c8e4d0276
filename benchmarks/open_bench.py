#!/usr/bin/env python3
"""How long a run store of many runs takes to open, against the floor, in one run of this script.

    python benchmarks/open_bench.py [--runs 1000] [--kernels 200] [--keep DIR] [--repeat 3]

The store: ``--runs`` runs of the real schema (a synthetic run of ``--kernels`` kernels, NCCL kernels among them,
copies, NVTX ranges, GPU metrics, written by ``tests/synthetic.py``, copied under new run ids with every table
file rewritten, and a ``run.json`` per run as ingest writes it). Each case runs in a fresh process (imports
excluded from the time; best of ``--repeat``):

- floor: DuckDB alone counts the kernels of every run from a glob of the kernel files (no index, no checks);
- ``connect(views=False)``: the index read, every file's size checked against its run's record, the table views;
- ``connect()``: the same and the analysis views of ``queries/``;
- ``connect() + query``: the same and the floor's query through the ``kernels`` view;
- ``connect(views=False)``, every footer: the same store with no sizes recorded, so every file's footer is read and
  checked (what opening cost before sizes were recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

CASES = {
    "floor: DuckDB over a glob of the kernel files": (
        "import duckdb", "duckdb.sql(\"SELECT run_id, count(*) FROM read_parquet('{root}/runs/*/kernels.parquet') "
                         "GROUP BY 1\").fetchall()"),
    "connect(views=False)": ("import traceql", "traceql.connect({root!r}, views=False)"),
    "connect()": ("import traceql", "traceql.connect({root!r})"),
    "connect() + the floor's query": (
        "import traceql", "traceql.connect({root!r}).sql('SELECT run_id, count(*) FROM kernels GROUP BY 1')"
                          ".fetchall()"),
    "connect(views=False), every footer checked": ("import traceql", "traceql.connect({unsized!r}, views=False)"),
}


def build(root: Path, runs: int, kernels: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from synthetic import NCCL_NAME, make_store

    from traceql import store
    from traceql.store import schema
    from traceql.store.writer import RunInfo, finish_run

    base = root.parent / "base"
    shutil.rmtree(base, ignore_errors=True)
    step = 10_000
    make_store(base, run_id="0" * 16,
               kernels=[dict(start_ns=i * step, end_ns=i * step + step // 2, name="gemm_bf16" if i % 3 else NCCL_NAME,
                             kind="compute" if i % 3 else "comm", device_id=i % 2) for i in range(kernels)],
               memcpy=[dict(start_ns=i * step * 7, end_ns=i * step * 7 + 900) for i in range(kernels // 7)],
               nvtx=[dict(start_ns=i * step * 10, end_ns=(i + 1) * step * 10, text=f"step:{i}")
                     for i in range(kernels // 10)],
               gpu_metrics=[dict(device_id=d, ts_ns=t * 100_000, metric="SMs Active [Throughput %]", value=50.0)
                            for d in (0, 1) for t in range(kernels * step // 100_000)])
    src = store.run_dir(base, "0" * 16)
    tables = {f.stem: pq.read_table(f) for f in src.glob("*.parquet")}
    entries = {}
    for i in range(runs):
        rid = f"{i + 1:016x}"
        folder = store.run_dir(root, rid)
        folder.mkdir(parents=True)
        info = RunInfo(rid, f"synthetic-{rid}", rid * 4, "synthetic")
        for name, table in tables.items():
            ids = pa.array([rid] * table.num_rows, pa.string())
            schema.write(name, table.set_column(table.schema.get_field_index("run_id"), "run_id", ids),
                         folder / f"{name}.parquet")
            info.tables[name] = table.num_rows
        finish_run(folder, info)
        entries[rid] = info.manifest_entry()
        if (i + 1) % 100 == 0:
            print(f"  built {i + 1} of {runs} runs", file=sys.stderr)
    store.reindex(root, entries)


def store_of(work: Path, runs: int, kernels: int) -> Path:
    """``work/store``: the store of ``runs`` runs that ``build`` makes, built unless it is there already."""
    root = work / "store"
    have = len(json.loads((root / "manifest.json").read_text())["runs"]) if (root / "manifest.json").exists() else 0
    if have != runs:
        shutil.rmtree(root, ignore_errors=True)
        t = time.perf_counter()
        build(root, runs, kernels)
        print(f"built {runs} runs in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return root


def unsized(root: Path) -> Path:
    """The same runs under an index that records no file sizes (every footer is then checked at open)."""
    other = root.parent / "unsized"
    shutil.rmtree(other, ignore_errors=True)
    other.mkdir()
    (other / "runs").symlink_to(root / "runs", target_is_directory=True)
    manifest = json.loads((root / "manifest.json").read_text())
    for entry in manifest["runs"].values():
        entry.pop("files", None)
    (other / "manifest.json").write_text(json.dumps(manifest))
    return other


def timed(setup: str, stmt: str) -> float:
    code = (f"{setup}\nimport time\nt = time.perf_counter()\n{stmt}\n"
            "print(time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--kernels", type=int, default=200, help="kernels per run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="build the store here and keep it (reused when it has --runs runs)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="traceql-open-"))
    root = store_of(work, args.runs, args.kernels)
    files = sum(1 for _ in (root / "runs").glob("*/*.parquet"))
    other = unsized(root)
    print(f"store: {args.runs} runs, {files} table files, {args.kernels} kernels per run; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'case':<46} {'best s':>8} {'x floor':>8}")
    floor = None
    for name, (setup, stmt) in CASES.items():
        best = min(timed(setup, stmt.format(root=str(root), unsized=str(other))) for _ in range(args.repeat))
        floor = floor or best
        print(f"{name:<46} {best:>8.3f} {best / floor:>8.1f}")
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
