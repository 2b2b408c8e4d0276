"""Print what a case collector's SQLite export holds: table counts, GPU-metric samples, kernels by launch shape, and
the activities launched inside each ``case:`` NVTX range (matched to their launch by process and correlation id).

    python3 collectors/case_summary.py EXPORT.sqlite
"""

import sqlite3
import sys

con = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)


def q(sql: str) -> list[tuple]:
    return con.execute(sql).fetchall()


tables = {r[0] for r in q("SELECT name FROM sqlite_master WHERE type='table'")}
for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "NVTX_EVENTS",
          "GPU_METRICS", "CUPTI_ACTIVITY_KIND_RUNTIME", "TARGET_INFO_GPU_METRICS"):
    print(f"{t}: {q(f'SELECT count(*) FROM {t}')[0][0] if t in tables else 'MISSING'}")
if "GPU_METRICS" in tables:
    for dev, n, t0, t1, m in q("""SELECT typeId, count(DISTINCT timestamp), min(timestamp), max(timestamp),
                                  count(DISTINCT metricId) FROM GPU_METRICS GROUP BY 1"""):
        print(f"metric samples (typeId {dev}): {n} over {(t1 - t0) / 1e9:.3f} s; metrics: {m}")
t0, t1 = q("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
print(f"kernels span {(t1 - t0) / 1e9:.3f} s")
try:
    print(f"graph-node kernels: {q('SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId > 0')[0][0]}")
except sqlite3.Error as exc:
    print("graph-node kernels: ?", exc)
print("distinct kernels (device, name, grid, block, dyn smem, count, mean us):")
for r in q("""SELECT k.deviceId, s.value, k.gridX, k.gridY, k.gridZ, k.blockX, k.dynamicSharedMemory, count(*),
                     avg(k.end - k.start) / 1e3
              FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
              GROUP BY 1, 2, 3, 4, 5, 6, 7 ORDER BY 1, 8 DESC"""):
    print(f"    dev{r[0]} {r[1][:90]} grid=({r[2]},{r[3]},{r[4]}) block={r[5]} smem={r[6]} n={r[7]} mean={r[8]:.1f}us")
print("per case range (activity launched inside it: name, count, mean us):")
memcpy = ("UNION ALL SELECT correlationId, globalPid, 'memcpy(' || bytes || ' B)', end - start "
          "FROM CUPTI_ACTIVITY_KIND_MEMCPY") if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables else ""
rows = q(f"""
WITH r AS (SELECT n.rowid AS rid, n.start, n.end, n.globalTid, coalesce(n.text, s.value) AS text
           FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId WHERE coalesce(n.text, s.value) LIKE 'case:%'),
a AS (SELECT k.correlationId, k.globalPid, s.value AS name, k.end - k.start AS dur
      FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName {memcpy})
SELECT r.rid, r.text, a.name, count(*), avg(a.dur) / 1e3
FROM r JOIN CUPTI_ACTIVITY_KIND_RUNTIME rt ON rt.globalTid = r.globalTid AND rt.start BETWEEN r.start AND r.end
JOIN a ON a.correlationId = rt.correlationId AND a.globalPid = (rt.globalTid >> 24) << 24
GROUP BY 1, 2, 3 ORDER BY 1, 4 DESC""")
last = None
for rid, text, name, n, mean in rows:
    if rid != last:
        print("  ", text)
        last = rid
    print(f"       {name[:70]:<70} n={n:<4} mean={mean:.1f}us")
