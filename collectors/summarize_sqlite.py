"""Print what an nsys SQLite export holds: tables with row counts, schema version, top kernels."""

import sqlite3
import sys

for path in sys.argv[1:]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    print(f"== {path}")
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
    for t in tables:
        n = con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
        print(f"  {t}: {n}")
    if "META_DATA_EXPORT" in tables:
        print("  meta:", con.execute("SELECT * FROM META_DATA_EXPORT").fetchall())
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        q = """SELECT s.value, count(*), avg(k.end-k.start), min(k.gridX), min(k.blockX)
               FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
               GROUP BY 1 ORDER BY 2 DESC LIMIT 25"""
        for row in con.execute(q):
            print("   ", row)
    if "TARGET_INFO_GPU_METRICS" in tables:
        print("  metrics:", con.execute("SELECT * FROM TARGET_INFO_GPU_METRICS LIMIT 40").fetchall())
