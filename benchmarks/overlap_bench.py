#!/usr/bin/env python3
"""From a raw nsys export to the overlap numbers: traceql against the single-process floor and nsys-ai, in one run.

    python benchmarks/overlap_bench.py [--trace tests/data/h200x2/train_ddp.sqlite.xz] [--copies 28]
                                       [--work DIR] [--nsys-ai PATH/TO/nsys-ai] [--repeat 2]

The trace (by default the bundled real 2-GPU DDP training trace, H200) is replicated ``--copies`` times along its
timeline (every table with times: kernels, copies, sets, API calls, NVTX, GPU metrics; correlation ids shifted so
launches stay distinct), which gives an export of the size of a real long run (28 copies: 1.85 M kernels, 794 MB).

The answer, per device: the union of compute kernels, of communication (NCCL kernels and peer copies), their
intersection and the span from first to last; compute only, communication only and idle follow. Each way is timed
in a fresh process (wall, CPU, peak RSS), the best of ``--repeat``, and each must give the same numbers:

- floor (ADBC), floor (pages): a plain script that reads only the needed columns (kernel times, device, name id;
  copy kinds) through SQLite (ADBC, Arrow batches) or with traceql's page decoder, classifies each distinct name
  and sweeps each device with numpy: the least work that gives the answer;
- ``traceql overlap EXPORT -f json``: the command as a user runs it (nothing kept);
- ``traceql overlap EXPORT --keep DIR``: the same through a lazily ingested run directory (kept for SQL and
  ``traceql attribute``);
- ``nsys-ai overlap EXPORT --gpu 0`` (nsys-ai 0.3.0, if ``--nsys-ai`` is given), cold (its cache removed first),
  in its default mode (it builds a Parquet cache of the export first) and with ``NSYS_AI_CACHE_MODE=direct``
  (DuckDB's SQLite scanner over the export); it answers for one device per call, so "all devices" is one call per
  device, the first cold. nsys-ai installs offline with ``duckdb==1.5.5 duckdb-extension-sqlite-scanner==1.5.5``;
  the extension then needs ``INSTALL '<site-packages>/duckdb_extension_sqlite_scanner/extensions/v1.5.5/
  sqlite_scanner.duckdb_extension'`` once (without it nsys-ai falls back to plain sqlite3, also timed here as its
  default mode would run).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FLOOR = r"""
import json, sqlite3, sys, numpy as np
from traceql.classify import classify
path, how = sys.argv[1], sys.argv[2]
db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
names = dict(db.execute("SELECT id, value FROM StringIds"))
if how == "adbc":
    import adbc_driver_sqlite.dbapi as adbc
    cur = adbc.connect(f"file:{path}?mode=ro").cursor()
    def read(table, cols):
        cur.execute(f"SELECT {', '.join(chr(34) + c + chr(34) for c in cols)} FROM {table}")
        t = cur.fetch_arrow_table()
        return [t.column(c).to_numpy() for c in cols]
else:
    from pathlib import Path
    import pyarrow as pa
    from traceql.sources.nsys.source import SqliteSource
    src = SqliteSource(Path(path))
    def read(table, cols):
        t = pa.Table.from_batches(list(src.scan(table, cols)))
        return [t.column(c).to_numpy() for c in cols]
dev, start, end, name = read("CUPTI_ACTIVITY_KIND_KERNEL", ["deviceId", "start", "end", "demangledName"])
ids = np.unique(name)
comm_ids = np.array([i for i in ids.tolist() if classify(names.get(i, "")).kind == "comm"], dtype=np.int64)
cls = np.where(np.isin(name, comm_ids), 0, 1)
has_copies = db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_MEMCPY'").fetchone()[0]
if has_copies:
    cdev, cstart, cend, ckind = read("CUPTI_ACTIVITY_KIND_MEMCPY", ["deviceId", "start", "end", "copyKind"])
    peer = ckind == 10
    dev, start, end = (np.concatenate([a, b[peer]]) for a, b in ((dev, cdev), (start, cstart), (end, cend)))
    cls = np.concatenate([cls, np.zeros(int(peer.sum()), cls.dtype)])
out = {}
for d in np.unique(dev).tolist():
    sel = dev == d
    st, en, c = start[sel], end[sel], cls[sel]
    t = np.concatenate([st, en]); order = np.argsort(t, kind="stable"); ts = t[order]
    n = len(st); kid = np.where(order < n, order, order - n); sign = np.where(order < n, 1, -1)
    seg = np.diff(ts)
    comm = np.cumsum(np.where(c[kid] == 0, sign, 0))[:-1] > 0
    comp = np.cumsum(np.where(c[kid] == 1, sign, 0))[:-1] > 0
    out[int(d)] = {"compute_ns": int(seg[comp].sum()), "comm_ns": int(seg[comm].sum()),
                   "overlap_ns": int(seg[comm & comp].sum()), "span_ns": int(en.max() - st.min())}
print(json.dumps(out))
"""

TRACEQL_KEEP = r"""
import json, sys
from traceql.overlap import overlap
rows = overlap([sys.argv[1]], workdir=sys.argv[2]).to_pylist()
print(json.dumps({r["device_id"]: {k: r[k] for k in ("compute_ns", "comm_ns", "overlap_ns", "span_ns")} for r in rows}))
"""


def replicate(trace: Path, copies: int, work: Path) -> Path:
    """``copies`` copies of the export end to end on its timeline, in one SQLite file (cached in ``work``)."""
    out = work / f"{trace.name.split('.')[0]}-x{copies}.sqlite"
    if out.exists():
        return out
    part = out.with_suffix(".part")
    if trace.suffix == ".xz":
        import lzma
        with lzma.open(trace) as src, part.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    else:
        shutil.copyfile(trace, part)
    db = sqlite3.connect(part)
    lo, hi = db.execute('SELECT min(start), max("end") FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
    step = hi - lo + 1_000_000  # a millisecond between copies
    for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        info = db.execute(f'PRAGMA table_info("{table}")').fetchall()
        names = [r[1] for r in info]
        if not {"start", "end", "timestamp"} & set(names):
            continue
        n = db.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
        keep = [r for r in info if not (r[5] and (r[2] or "").upper() == "INTEGER")]  # rowid aliases renumber
        cols = ", ".join(f'"{r[1]}"' for r in keep)
        corr = db.execute(f'SELECT max(correlationId) FROM "{table}"').fetchone()[0] if "correlationId" in names \
            else 0
        for k in range(1, copies):
            exprs = [f'"{r[1]}" + {k * step}' if r[1] in ("start", "end", "timestamp") else
                     f'"{r[1]}" + {k * ((corr or 0) + 1)}' if r[1] == "correlationId" else f'"{r[1]}"' for r in keep]
            db.execute(f'INSERT INTO "{table}" ({cols}) SELECT {", ".join(exprs)} FROM "{table}" LIMIT {n}')
    db.commit()
    db.close()
    part.rename(out)
    return out


def timed(cmd: list[str], env: dict | None = None, before=None) -> tuple[float, float, float, str]:
    """Run ``cmd`` in a fresh process: wall s, CPU s, peak RSS MiB, stdout (``before``: called first, untimed)."""
    if before:
        before()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, **(env or {})})
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)  # the child's own rusage
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"{' '.join(cmd)} failed ({os.waitstatus_to_exitcode(status)})")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out


def nsys_ai_answers(text: str) -> list[dict]:
    """Compute only, NCCL only, overlap and idle (ms, as nsys-ai prints them) from each of its reports."""
    out = []
    for report in text.split("Compute/Communication Overlap Analysis")[1:]:
        got = {}
        for key, label in (("compute_only_ms", "Compute only"), ("comm_only_ms", "NCCL only"),
                           ("overlap_ms", "Overlap"), ("idle_ms", "Idle")):
            m = re.search(rf"{label}:\s+([0-9.]+)ms", report)
            got[key] = float(m.group(1)) if m else None
        out.append(got)
    return out


def as_ms(ans: dict) -> dict:
    """The floor's/traceql's answer in nsys-ai's terms (ms)."""
    union = ans["compute_ns"] + ans["comm_ns"] - ans["overlap_ns"]
    return {"compute_only_ms": (ans["compute_ns"] - ans["overlap_ns"]) / 1e6,
            "comm_only_ms": (ans["comm_ns"] - ans["overlap_ns"]) / 1e6, "overlap_ms": ans["overlap_ns"] / 1e6,
            "idle_ms": (ans["span_ns"] - union) / 1e6}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", type=Path, default=ROOT / "tests/data/h200x2/train_ddp.sqlite.xz")
    p.add_argument("--copies", type=int, default=28)
    p.add_argument("--work", type=Path, default=None, help="where the replicated export is kept (default: a temp dir)")
    p.add_argument("--nsys-ai", default=None, help="the nsys-ai executable (0.3.0) to compare with")
    p.add_argument("--repeat", type=int, default=2)
    a = p.parse_args()
    work = a.work or Path(tempfile.mkdtemp(prefix="traceql-overlap-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    export = replicate(a.trace, a.copies, work)
    db = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    kernels = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    db.close()
    print(f"{a.trace.name} x{a.copies}: {export} ({export.stat().st_size / 2**20:.0f} MiB, {kernels:,} kernels; "
          f"made in {time.perf_counter() - t0:.0f} s)")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; best of {a.repeat}, each in a fresh "
          "process; the export in the page cache")
    subprocess.run(["cat", str(export)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache for all

    keep = work / "kept"
    cases: dict[str, tuple[list[str], dict | None, object]] = {
        "floor (ADBC)": ([sys.executable, "-c", FLOOR, str(export), "adbc"], None, None),
        "floor (pages)": ([sys.executable, "-c", FLOOR, str(export), "pages"], None, None),
        "traceql overlap": ([sys.executable, "-m", "traceql", "overlap", str(export), "-f", "json"], None, None),
        "traceql overlap --keep": ([sys.executable, "-c", TRACEQL_KEEP, str(export), str(keep)], None,
                                   lambda: shutil.rmtree(keep, ignore_errors=True)),
    }
    cache = export.with_name(export.stem + ".nsys-cache")

    def cold() -> None:
        shutil.rmtree(cache, ignore_errors=True)
        for f in export.parent.glob(export.stem + ".nsys-cache*"):
            f.unlink() if f.is_file() else shutil.rmtree(f, ignore_errors=True)

    if a.nsys_ai:
        db = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
        devices = [d for (d,) in db.execute("SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY 1")]
        db.close()

        def calls(gpus: list[int]) -> list[str]:  # one call per device, one after the other
            return ["sh", "-c", " && ".join(f"'{a.nsys_ai}' overlap '{export}' --gpu {g} --trim 0 100000"
                                            for g in gpus)]

        for mode, env in (("default", None), ("direct", {"NSYS_AI_CACHE_MODE": "direct"})):
            cases[f"nsys-ai, {mode}, gpu 0, cold"] = (calls(devices[:1]), env, cold)
            cases[f"nsys-ai, {mode}, all {len(devices)} gpus, cold"] = (calls(devices), env, cold)
    results = {}
    for name, (cmd, env, before) in cases.items():
        runs = [timed(cmd, env, before) for _ in range(a.repeat)]
        best = min(runs, key=lambda r: r[0])
        results[name] = (best[0], best[1], max(r[2] for r in runs), best[3])
        print(f"  {name}: {', '.join(f'{r[0]:.2f}' for r in runs)} s", flush=True)

    answers = {}
    for name, (*_, out) in results.items():
        if name.startswith("nsys-ai"):
            devices = sorted(answers["floor (ADBC)"])  # the floor is parsed first; nsys-ai reports devices in order
            answers[name] = dict(zip(devices, nsys_ai_answers(out), strict=False))
        elif name == "traceql overlap":
            answers[name] = {r["device_id"]: {k: r[k] for k in ("compute_ns", "comm_ns", "overlap_ns", "span_ns")}
                             for r in json.loads(out)}
        else:
            answers[name] = {int(k): v for k, v in json.loads(out).items()}
    reference = answers["floor (ADBC)"]
    agree = {}
    for name, ans in answers.items():
        if name.startswith("nsys-ai"):  # printed to 0.1 ms (after rounding to 0.01 ms): compared at that precision
            agree[name] = bool(ans) and all(v is not None and abs(v - as_ms(reference[d])[k]) <= 0.1 + 1e-9
                                            for d, got in ans.items() for k, v in got.items())
        else:
            agree[name] = ans == reference
    floor = min(results["floor (ADBC)"][0], results["floor (pages)"][0])
    print(f"\n{'path':34s} {'wall s':>8s} {'x floor':>8s} {'CPU s':>7s} {'peak RSS MiB':>13s}  same answer")
    for name, (wall, cpu, rss, _) in results.items():
        print(f"{name:34s} {wall:8.2f} {wall / floor:8.2f} {cpu:7.2f} {rss:13.0f}  {agree[name]}")
    ours = results["traceql overlap"][0]
    print(f"\ntraceql overlap: {ours / floor:.2f}x the floor (target <= 2x), all {len(reference)} devices")
    for name in [n for n in results if n.startswith("nsys-ai")]:
        print(f"{name}: {results[name][0] / ours:.1f}x traceql's time (all {len(reference)} devices; target >= 10x)")
    return 0 if all(agree.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
