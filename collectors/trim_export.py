"""Trim an nsys SQLite export for use as test data; every row that stays is as nsys wrote it.

Usage: ``python collectors/trim_export.py IN.sqlite OUT.sqlite [--empty TABLE ...] [--metrics-every N]``

``--empty TABLE`` deletes the rows of a table that traceql does not read (the table stays, empty), e.g.
``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION``, ``CUPTI_ACTIVITY_KIND_CUDA_EVENT``, ``OSRT_API``,
``OSRT_CALLCHAINS``. ``--metrics-every N`` keeps every N-th GPU metrics sample of each GPU (all of that
sample's metrics), as if nsys had sampled at 1/N of its rate. The copy is vacuumed; the input is not touched.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
from pathlib import Path


def trim(src: Path, dest: Path, empty: list[str], metrics_every: int = 1) -> dict[str, int]:
    """Write the trimmed copy; return the rows deleted per table."""
    shutil.copyfile(src, dest)
    con = sqlite3.connect(dest)
    deleted = {}
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table in empty:
            if table not in tables:
                raise SystemExit(f"{src}: no table {table} to empty")
            deleted[table] = con.execute(f'DELETE FROM "{table}"').rowcount
        if metrics_every > 1 and "GPU_METRICS" in tables:
            deleted["GPU_METRICS"] = con.execute("""
                DELETE FROM GPU_METRICS WHERE rowid IN (
                    SELECT m.rowid FROM GPU_METRICS m JOIN (
                        SELECT typeId, timestamp, row_number() OVER (PARTITION BY typeId ORDER BY timestamp) AS k
                        FROM (SELECT DISTINCT typeId, timestamp FROM GPU_METRICS)) s
                      ON s.typeId = m.typeId AND s.timestamp = m.timestamp
                    WHERE (s.k - 1) % ? <> 0)""", (metrics_every,)).rowcount
        con.commit()
        con.execute("VACUUM")
    finally:
        con.close()
    return deleted


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", type=Path)
    p.add_argument("dest", type=Path)
    p.add_argument("--empty", action="append", default=[], help="table whose rows to delete (repeatable)")
    p.add_argument("--metrics-every", type=int, default=1, help="keep every N-th GPU metrics sample per GPU")
    args = p.parse_args(argv)
    for table, n in trim(args.src, args.dest, args.empty, args.metrics_every).items():
        print(f"{args.dest}: {table}: {n} rows deleted")


if __name__ == "__main__":
    main()
