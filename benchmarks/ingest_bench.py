#!/usr/bin/env python3
"""Ingest benchmark: a large synthetic nsys 2025.3 SQLite export, ingested and set against a plain-SQLite floor.

    python benchmarks/ingest_bench.py [--metrics-rows 10500000] [--kernels 100000] [--keep] [--db PATH]
                                      [--ranks N] [--repeat N]

The export has the real nsys 2025.3 schema: every CREATE TABLE, and the rows of the small tables (StringIds,
META_DATA_EXPORT, TARGET_INFO_*, PROCESSES, ThreadNames, ENUM_*), are copied from tests/data/h200/overlap.sqlite.xz.
Inside SQLite, with the real rows as templates, it then generates GPU_METRICS (every metric of both GPUs sampled at
10 kHz, ascending timestamps), CUPTI_ACTIVITY_KIND_KERNEL (devices and processes alternating as in the real file),
one CUPTI_ACTIVITY_KIND_RUNTIME launch per kernel (same correlationId) and one NVTX push/pop range per ten kernels.
Other tables are created empty.

Measured, with the export in the page cache:
- floor: for each table ingest reads, one aggregate over the columns it reads, in a fresh sqlite3 connection, so
  SQLite decodes every value once; the sum is about the least any ingest that reads SQLite can take.
- ingest: ``traceql.ingest`` in a child process: wall time of the call, CPU time, peak RSS, and time per step.
Targets: ingest <= 1.5x floor, peak RSS < 1 GiB, on 2 cores: on a larger machine run it under ``taskset -c 0,1``.
A real export is given with ``--db`` (docs/performance.md says how the one measured there was collected).
The last line is the verdict against both. ``--ranks N`` also ingests N distinct copies with jobs=2;
``--repeat N`` takes the best of N measurements (on a shared machine; a warning says when the CPUs are busy).
"""

from __future__ import annotations

import argparse
import functools
import json
import lzma
import math
import os
import re
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REAL_EXPORT = REPO / "tests" / "data" / "h200" / "overlap.sqlite.xz"
SMALL_TABLES = re.compile(r"StringIds|META_DATA_EXPORT|TARGET_INFO_.*|PROCESSES|ThreadNames|ENUM_.*")
SAMPLE_NS = 100_000  # GPU metrics at 10 kHz
KERNELS_PER_NVTX = 10
TARGET_RATIO = 1.5
TARGET_RSS_MIB = 1024
MIB = 1 << 20
TARGET_CPUS = 2
BESIDE = "sha256 of the input (own thread, beside the reads)"  # overlaps the other steps: not in their sum

# Used only if the child cannot observe which tables and columns ingest reads (see _child).
FALLBACK_READS = {
    "GPU_METRICS": ["timestamp", "typeId", "metricId", "value"],
    "CUPTI_ACTIVITY_KIND_KERNEL": ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid",
                                   "graphNodeId", "demangledName", "shortName", "gridX", "gridY", "gridZ", "blockX",
                                   "blockY", "blockZ", "staticSharedMemory", "dynamicSharedMemory",
                                   "registersPerThread"],
    "CUPTI_ACTIVITY_KIND_RUNTIME": ["start", "end", "globalTid", "correlationId", "nameId", "returnValue"],
    "NVTX_EVENTS": ["start", "end", "eventType", "text", "textId", "globalTid", "domainId"],
    "StringIds": ["id", "value"],
}


def q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# -- building the export --------------------------------------------------------------------------------------------

def build(db: Path, metrics_rows: int, kernels: int) -> dict[str, int]:
    """Write the synthetic export to ``db``; return the generated row counts."""
    db.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        real = Path(tmp) / "real.sqlite"
        with lzma.open(REAL_EXPORT) as src, real.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 22)
        con = sqlite3.connect(db, isolation_level=None, uri=True)
        try:
            con.execute("PRAGMA journal_mode = OFF")
            con.execute("PRAGMA synchronous = OFF")
            con.execute("PRAGMA temp_store = MEMORY")
            con.execute(f"ATTACH 'file:{real}?mode=ro' AS src")
            con.execute(f"PRAGMA main.page_size = {con.execute('PRAGMA src.page_size').fetchone()[0]}")
            con.execute("BEGIN")
            for name, sql in con.execute("SELECT name, sql FROM src.sqlite_master WHERE type = 'table' "
                                         "ORDER BY rowid").fetchall():
                con.execute(sql)
                if SMALL_TABLES.fullmatch(name):
                    con.execute(f"INSERT INTO main.{q(name)} SELECT * FROM src.{q(name)}")
            counts = {"GPU_METRICS": fill_metrics(con, metrics_rows)}
            t0, span = con.execute("SELECT min(timestamp), max(timestamp) - min(timestamp) + 1 "
                                   "FROM main.GPU_METRICS").fetchone()
            counts.update(fill_kernels(con, kernels, t0 or 0, span or 1))
            counts["NVTX_EVENTS"] = fill_nvtx(con, max(kernels // KERNELS_PER_NVTX, 1), t0 or 0, span or 1)
            con.execute("COMMIT")
            con.execute("DETACH src")
        finally:
            con.close()
    return counts


def insert_from(con: sqlite3.Connection, table: str, alias: str, source: str, overrides: dict[str, str],
                params: dict | None = None) -> int:
    """INSERT into ``table`` every column of template ``alias``, except the ``overrides`` expressions."""
    cols = [r[1] for r in con.execute(f"PRAGMA main.table_info({q(table)})")]
    exprs = [overrides.get(c, f"{alias}.{q(c)}") for c in cols]
    cur = con.execute(f"INSERT INTO main.{q(table)} ({', '.join(map(q, cols))}) SELECT {', '.join(exprs)} {source}",
                      params or {})
    return cur.rowcount


def fill_metrics(con: sqlite3.Connection, rows: int) -> int:
    """GPU_METRICS: each (typeId, metricId) of TARGET_INFO_GPU_METRICS sampled every SAMPLE_NS, values drawn
    (changing every 8 samples) from the range that metric has in the real export."""
    con.execute("""
        CREATE TEMP TABLE metric_tpl AS
        SELECT m.typeId, m.metricId, COALESCE(min(g.value), 0) AS lo, COALESCE(max(g.value), 0) AS hi
        FROM (SELECT DISTINCT typeId, metricId FROM src.TARGET_INFO_GPU_METRICS) m
        LEFT JOIN src.GPU_METRICS g ON g.typeId = m.typeId AND g.metricId = m.metricId
        GROUP BY m.typeId, m.metricId ORDER BY m.typeId, m.metricId""")
    pairs = con.execute("SELECT count(*) FROM metric_tpl").fetchone()[0]
    t0 = con.execute("SELECT COALESCE(min(timestamp), 0) FROM src.GPU_METRICS").fetchone()[0]
    ts = f"{t0} + tick.t * {SAMPLE_NS} + (m.typeId & 255) * 10"  # GPUs a few ns apart, as in real exports
    # CROSS JOIN keeps tick as the outer loop, so rows come out in timestamp order without a sort.
    cur = con.execute(f"""
        INSERT INTO main.GPU_METRICS (rawTimestamp, timestamp, typeId, metricId, value)
        WITH RECURSIVE tick(t) AS (SELECT 0 UNION ALL SELECT t + 1 FROM tick WHERE t + 1 < :ticks)
        SELECT {ts}, {ts}, m.typeId, m.metricId,
               CASE WHEN m.hi = m.lo THEN m.lo
                    ELSE m.lo + ((tick.t / 8) * 2654435761 + m.metricId * 40503 + m.typeId) % (m.hi - m.lo + 1) END
        FROM tick CROSS JOIN metric_tpl m
        LIMIT :rows""", {"ticks": math.ceil(rows / max(pairs, 1)), "rows": rows})
    return cur.rowcount


def fill_kernels(con: sqlite3.Connection, n: int, t0: int, span: int) -> dict[str, int]:
    """CUPTI_ACTIVITY_KIND_KERNEL from the real kernels (alternating devices, each device's kernels back to back
    over the metrics' time span) and one CUPTI_ACTIVITY_KIND_RUNTIME launch per kernel."""
    for sql in ("""CREATE TEMP TABLE ktpl AS
                   SELECT k.*, dense_rank() OVER (ORDER BY deviceId) - 1 AS dev,
                          row_number() OVER (PARTITION BY deviceId ORDER BY start) - 1 AS rn
                   FROM src.CUPTI_ACTIVITY_KIND_KERNEL k""",
                "CREATE INDEX temp.ktpl_key ON ktpl (dev, rn)",
                "CREATE TEMP TABLE kdev AS SELECT dev, count(*) AS n FROM ktpl GROUP BY dev",
                # the runtime call that launched each template kernel
                """CREATE TEMP TABLE rtpl AS
                   SELECT t.dev, t.rn, t.start - r.start AS lag, r.*
                   FROM ktpl t JOIN src.CUPTI_ACTIVITY_KIND_RUNTIME r
                     ON r.correlationId = t.correlationId AND r.globalTid >> 24 = t.globalPid >> 24
                   GROUP BY t.dev, t.rn""",
                "CREATE INDEX temp.rtpl_key ON rtpl (dev, rn)"):
        con.execute(sql)
    devices = con.execute("SELECT count(*) FROM kdev").fetchone()[0]
    if not devices or n <= 0:
        return {"CUPTI_ACTIVITY_KIND_KERNEL": 0, "CUPTI_ACTIVITY_KIND_RUNTIME": 0}
    period = max(span * devices // n, 1000)  # ns between kernel starts on one device
    con.execute("""
        CREATE TEMP TABLE kgen AS
        WITH RECURSIVE seq(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM seq WHERE k + 1 < :n)
        SELECT seq.k AS k, d.dev AS dev, (seq.k / :devices) % d.n AS rn,
               :t0 + (seq.k / :devices) * :period + d.dev * 1000 AS start
        FROM seq CROSS JOIN kdev d ON d.dev = seq.k % :devices""",
                {"n": n, "devices": devices, "t0": t0, "period": period})
    kernels = insert_from(con, "CUPTI_ACTIVITY_KIND_KERNEL", "t", "FROM kgen g JOIN ktpl t USING (dev, rn)", {
        "start": "g.start", "end": f'g.start + min(t."end" - t.start, {period * 4 // 5})',
        "correlationId": "g.k + 1"})
    runtime = insert_from(con, "CUPTI_ACTIVITY_KIND_RUNTIME", "r", "FROM kgen g JOIN rtpl r USING (dev, rn)", {
        "start": "g.start - r.lag", "end": 'g.start - r.lag + r."end" - r.start', "correlationId": "g.k + 1"})
    return {"CUPTI_ACTIVITY_KIND_KERNEL": kernels, "CUPTI_ACTIVITY_KIND_RUNTIME": runtime}


def fill_nvtx(con: sqlite3.Connection, n: int, t0: int, span: int) -> int:
    """NVTX_EVENTS: the real non-range events (domain creation) and ``n`` push/pop ranges from the real ones."""
    rows = con.execute("INSERT INTO main.NVTX_EVENTS SELECT * FROM src.NVTX_EVENTS WHERE eventType <> 59").rowcount
    con.execute("""CREATE TEMP TABLE ntpl AS
                   SELECT row_number() OVER (ORDER BY start) - 1 AS rn, *
                   FROM src.NVTX_EVENTS WHERE eventType = 59 AND "end" IS NOT NULL""")
    templates = con.execute("SELECT count(*) FROM ntpl").fetchone()[0]
    if templates:
        period = max(span // n, 1000)
        rows += insert_from(con, "NVTX_EVENTS", "t", """
            FROM (WITH RECURSIVE seq(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM seq WHERE j + 1 < :n)
                  SELECT j FROM seq) s
            JOIN ntpl t ON t.rn = s.j % :templates""",
                            {"start": f"{t0} + s.j * {period}", "end": f"{t0} + s.j * {period} + {period * 9 // 10}"},
                            {"n": n, "templates": templates})
    return rows


# -- measuring ------------------------------------------------------------------------------------------------------

def read_through(path: Path) -> None:
    """Read the file once so that the floor and ingest both find it in the page cache."""
    with path.open("rb") as f:
        while f.read(1 << 24):
            pass


def floor(db: Path, reads: dict[str, list[str]]) -> dict[str, float]:
    """Seconds per table for one fresh-connection SQLite scan decoding every column ingest reads."""
    times = {}
    for table, cols in reads.items():
        con = sqlite3.connect(f"file:{db.resolve()}?mode=ro", uri=True)
        try:
            types = {r[1]: (r[2] or "").upper() for r in con.execute(f"PRAGMA table_info({q(table)})")}
            aggs = ", ".join(f"total(length({q(c)}))" if types.get(c) == "TEXT" else f"total({q(c)})" for c in cols)
            start = time.perf_counter()
            con.execute(f"SELECT count(*), {aggs} FROM {q(table)}").fetchone()
            times[table] = time.perf_counter() - start
        finally:
            con.close()
    return times


def run_child(dbs: list[Path], out: Path, jobs: int) -> dict:
    """Ingest ``dbs`` in a fresh interpreter; return what the child reports, plus its wall time and peak RSS."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "_child", str(out), str(jobs), *map(str, dbs)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"ingest failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    report["process_s"] = wall
    return report


def _child(argv: list[str]) -> None:
    """Child side of run_child: ingest, timing the steps; print one JSON line."""
    out, jobs, dbs = argv[0], int(argv[1]), argv[2:]
    start = time.perf_counter()
    import traceql
    from traceql.sources.nsys import adapter, source
    from traceql.store import schema

    ingest_mod = sys.modules["traceql.ingest"]  # the package's ``ingest`` attribute is the function
    imported = time.perf_counter()

    steps: dict[str, float] = {}
    reads: dict[str, list[str]] = {}

    def timed(owner: object, name: str, label: str) -> None:
        fn = getattr(owner, name, None)
        if fn is None:
            return

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                steps[label] = steps.get(label, 0.0) + time.perf_counter() - t

        setattr(owner, name, wrapper)

    timed(ingest_mod, "sha256_of", BESIDE)
    for table in ("devices", "processes", "kernels", "memcpy", "memset", "nvtx", "runtime_api"):
        timed(adapter.Adapter, table, f"{table}: read + query")
    timed(schema, "write", "small tables: Parquet write")
    timed(adapter.Adapter, "gpu_metrics", "gpu_metrics: setup")
    timed(ingest_mod, "write_wide", "gpu_metrics: stream (parallel read + lookup + widen + write)")

    def recording(method: str) -> None:
        """Note which columns of which tables ingest reads through ``SqliteSource.<method>``."""
        fn = getattr(source.SqliteSource, method, None)
        if fn is None:
            return

        @functools.wraps(fn)
        def wrapper(self, *args, **kwargs):
            table, columns = args[-2:] if method == "register" else args[:2]
            known = reads.setdefault(table, [])
            known.extend(c for c in columns if c not in known)
            return fn(self, *args, **kwargs)

        setattr(source.SqliteSource, method, wrapper)

    recording("register")  # (con, table, columns): tables read whole into DuckDB
    recording("scan")  # (table, columns, ...): tables streamed in batches

    infos = traceql.ingest(dbs, out, jobs=jobs)
    done = time.perf_counter()
    # RUSAGE_CHILDREN: the worker processes, with jobs > 1
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    rss_kib = max(u.ru_maxrss for u in usage)
    cpu_s = sum(u.ru_utime + u.ru_stime for u in usage)
    print(json.dumps({"import_s": imported - start, "ingest_s": done - imported, "peak_rss_mib": rss_kib / 1024,
                      "cpu_s": cpu_s,
                      "tables": [i.tables for i in infos], "steps": steps if jobs <= 1 else {}, "reads": reads}))


def cpu_busy(seconds: float = 1.0) -> float:
    """Share of all CPUs busy over ``seconds`` (Linux /proc/stat; 0 where unavailable)."""
    def sample() -> list[int]:
        with open("/proc/stat") as f:
            return [int(x) for x in f.readline().split()[1:]]

    try:
        before = sample()
        time.sleep(seconds)
        delta = [b - a for a, b in zip(before, sample(), strict=True)]
    except OSError:
        return 0.0
    idle = delta[3] + delta[4]  # idle + iowait
    return 1 - idle / max(sum(delta), 1)


def make_copies(db: Path, n: int, where: Path) -> list[Path]:
    """``n`` copies of ``db`` with different content (EXPORT_HOST), so that each becomes its own run."""
    copies = []
    for i in range(n):
        path = where / f"rank{i}.sqlite"
        shutil.copyfile(db, path)
        con = sqlite3.connect(path, isolation_level=None)
        con.execute("UPDATE META_DATA_EXPORT SET value = ? WHERE name = 'EXPORT_HOST'", (f"rank{i}",))
        con.close()
        copies.append(path)
    return copies


# -- report ---------------------------------------------------------------------------------------------------------

def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def print_table(rows: list[tuple[str, str, str]]) -> None:
    width = max(len(r[0]) for r in rows)
    print(f"{'':{width}}  {'value':>12}  target")
    for name, value, target in rows:
        print(f"{name:{width}}  {value:>12}  {target}")


def main() -> None:
    if sys.argv[1:2] == ["_child"]:
        return _child(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--metrics-rows", type=int, default=10_500_000, help="GPU_METRICS rows (default 10.5 M)")
    ap.add_argument("--kernels", type=int, default=100_000, help="kernel rows (default 100 k)")
    ap.add_argument("--db", type=Path, help="export to reuse if it exists, else to build there and keep")
    ap.add_argument("--keep", action="store_true", help="keep the built export and the ingested run directories")
    ap.add_argument("--ranks", type=int, default=0, help="also ingest N distinct copies with jobs=2")
    ap.add_argument("--repeat", type=int, default=1, help="measure floor and ingest N times, report the best")
    args = ap.parse_args()

    busy = cpu_busy()
    if busy > 0.1:
        print(f"warning: other work keeps the CPUs {busy:.0%} busy: timings are noisy")
    work = Path(tempfile.mkdtemp(prefix="traceql-bench-"))
    db = args.db or work / "synthetic.sqlite"
    try:
        if db.exists():
            print(f"export: reusing {db}")
        else:
            start = time.perf_counter()
            counts = build(db, args.metrics_rows, args.kernels)
            print(f"export: built in {time.perf_counter() - start:.1f} s: "
                  + ", ".join(f"{t} {n:,}" for t, n in counts.items()))
        print(f"export: {db} {db.stat().st_size / MIB:,.1f} MiB")
        read_through(db)

        runs = [run_child([db], work / f"run{i}", jobs=1) for i in range(max(args.repeat, 1))]
        run = min(runs, key=lambda r: r["ingest_s"])
        tables = run["tables"][0]
        reads = run["reads"] or FALLBACK_READS
        if not run["reads"]:
            print("warning: could not observe ingest's reads; floor uses a fixed list of tables")
        scans = [floor(db, reads) for _ in range(max(args.repeat, 1))]
        scan = {t: min(s[t] for s in scans) for t in reads}
        floor_s, ingest_s = sum(scan.values()), run["ingest_s"]
        peak_mib = max(r["peak_rss_mib"] for r in runs)
        rows = tables.get("gpu_metrics", 0) + tables.get("kernels", 0)

        best = f" (best of {len(runs)})" if len(runs) > 1 else ""
        print(f"\nfloor{best}: one SQLite scan per table ingest reads (columns it reads)")
        for table, secs in sorted(scan.items(), key=lambda kv: -kv[1]):
            print(f"  {secs:8.3f} s  {table} ({len(reads[table])} columns)")
        print(f"ingest steps{best}: of {ingest_s:.2f} s in traceql.ingest, after {run['import_s']:.2f} s of imports")
        for step, secs in sorted(run["steps"].items(), key=lambda kv: -kv[1]):
            print(f"  {secs:8.3f} s  {step}")
        if run["steps"]:
            serial = sum(secs for step, secs in run["steps"].items() if step != BESIDE)
            print(f"  {ingest_s - serial:8.3f} s  other (manifest, metadata, setup)")
        if len(runs) > 1:
            print("ingest s, all runs: " + ", ".join(f"{r['ingest_s']:.2f}" for r in runs))
        print("rows written: " + ", ".join(f"{t} {n:,}" for t, n in tables.items()))

        ratio = ingest_s / floor_s
        report = [
            ("floor s", f"{floor_s:.2f}", ""),
            ("ingest s", f"{ingest_s:.2f}", f"(whole child process {run['process_s']:.2f} s)"),
            ("ingest CPU s", f"{run['cpu_s']:.2f}", "(user + system, whole child; imports included)"),
            ("ratio ingest/floor", f"{ratio:.2f}", f"<= {TARGET_RATIO}  {verdict(ratio <= TARGET_RATIO)}"),
            ("peak RSS MiB", f"{peak_mib:.0f}", f"< {TARGET_RSS_MIB}  {verdict(peak_mib < TARGET_RSS_MIB)}"),
            ("rows/s (metrics+kernels)", f"{rows / ingest_s:,.0f}", ""),
        ]
        if args.ranks:
            copies = make_copies(db, args.ranks, work)
            for path in copies:
                read_through(path)
            ranks = run_child(copies, work / "ranks", jobs=2)
            ideal = ingest_s * args.ranks / min(2, os.cpu_count() or 1)
            report += [
                (f"{args.ranks} ranks, jobs=2: s", f"{ranks['ingest_s']:.2f}",
                 f"(1 rank x {args.ranks} / 2 workers = {ideal:.2f} s)"),
                (f"{args.ranks} ranks: peak RSS MiB", f"{ranks['peak_rss_mib']:.0f}", "(largest single process)"),
                (f"{args.ranks} ranks: rows/s", f"{rows * args.ranks / ranks['ingest_s']:,.0f}", ""),
            ]
        print()
        print_table(report)
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        ok = ratio <= TARGET_RATIO and peak_mib < TARGET_RSS_MIB
        print(f"\nverdict: {'PASS' if ok else 'MISSED'}: ingest {ingest_s:.2f} s = {ratio:.2f}x floor {floor_s:.2f} s "
              f"(target <= {TARGET_RATIO:g}x), peak RSS {peak_mib:.0f} MiB (target < {TARGET_RSS_MIB}), "
              f"{rows / ingest_s / 1e6:.2f} M rows/s, on {cpus} CPUs"
              + ("" if cpus == TARGET_CPUS else f" (targets are for {TARGET_CPUS}: run under taskset -c 0,1)"))
    finally:
        if args.keep:
            print(f"\nkept: {work}" + (f" and {db}" if args.db else f" (reuse with --db {db})"))
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
