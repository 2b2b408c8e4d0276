"""The page reader (traceql.sources.nsys.sqlite_pages) against SQLite itself.

Random tables (every integer width, negative numbers, NULLs, floats, whole floats in REAL columns, rowid gaps,
page sizes from 512 B to 64 KiB, b-trees several levels deep) must read back exactly as sqlite3 returns them;
what the reader does not decode must be refused (Unsupported), and SqliteSource.scan must then read it through
SQLite, also when the refusal comes midway through a table. The real exports under tests/data are read both
ways too.
"""

from __future__ import annotations

import lzma
import math
import sqlite3
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceql.sources.nsys import sqlite_pages
from traceql.sources.nsys.source import SqliteSource

DATA = Path(__file__).parent / "data"
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
# integers of each width SQLite stores (1, 2, 3, 4, 6, 8 bytes), both signs, and the 0/1 constants
WIDE_INTS = st.one_of(st.integers(-1, 1), st.integers(-(1 << 7), 1 << 7), st.integers(-(1 << 15), 1 << 15),
                      st.integers(-(1 << 23), 1 << 23), st.integers(-(1 << 31), 1 << 31),
                      st.integers(-(1 << 47), 1 << 47), INT64)
FLOATS = st.one_of(st.floats(allow_nan=False, allow_infinity=True), st.integers(-(1 << 40), 1 << 40).map(float))


def _page_read(db: Path, table: str, columns: list[str]) -> tuple[list[int], list[tuple]]:
    con = sqlite3.connect(db)
    root, sql = con.execute("SELECT rootpage, sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    plan = sqlite_pages.plan(sql, con.execute(f'PRAGMA table_info("{table}")').fetchall(), columns)
    con.close()
    pages = sqlite_pages.PageFile(db)
    rowids: list[int] = []
    cols: list[list] = [[] for _ in columns]
    try:
        for rowid, values in sqlite_pages.scan(pages, root, plan, chunk_bytes=4096):
            rowids += rowid.tolist()
            for out, (v, null) in zip(cols, values, strict=True):
                out += [None if null is not None and null[i] else v[i].item() for i in range(len(v))]
    finally:
        pages.close()
    return rowids, list(zip(*cols, strict=True))


def _sqlite_read(db: Path, table: str, columns: list[str]) -> tuple[list[int], list[tuple]]:
    con = sqlite3.connect(db)
    rows = con.execute(f"SELECT rowid, {', '.join(columns)} FROM \"{table}\" ORDER BY rowid").fetchall()
    con.close()
    return [r[0] for r in rows], [tuple(r[1:]) for r in rows]


def _same(a: list[tuple], b: list[tuple]) -> bool:
    def eq(x, y):
        if isinstance(x, float) or isinstance(y, float):
            return x is not None and y is not None and (x == y or (math.isnan(x) and math.isnan(y)))
        return x == y and type(x) is type(y)
    return len(a) == len(b) and all(eq(x, y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))


def _make(tmp: Path, page_size: int, ddl: str, rows: list[tuple], delete_every: int = 0) -> Path:
    db = tmp / f"t{page_size}.sqlite"
    db.unlink(missing_ok=True)
    con = sqlite3.connect(db)
    con.execute(f"PRAGMA page_size = {page_size}")
    con.execute(ddl)
    marks = ", ".join("?" * len(rows[0])) if rows else ""
    if rows:
        con.executemany(f"INSERT INTO t VALUES ({marks})", rows)
    if delete_every:
        con.execute(f"DELETE FROM t WHERE rowid % {delete_every} = 0")
    con.commit()
    con.close()
    return db


ROWS = st.lists(st.tuples(st.one_of(st.none(), WIDE_INTS), WIDE_INTS, st.one_of(st.none(), FLOATS), WIDE_INTS),
                max_size=1500)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                   HealthCheck.function_scoped_fixture])
@given(rows=ROWS, page_size=st.sampled_from([512, 1024, 4096, 65536]), delete_every=st.sampled_from([0, 3, 7]),
       wanted=st.sampled_from([["a", "b", "c", "d"], ["d", "b"], ["c"], ["b", "c", "d"]]))
def test_random_tables_read_as_sqlite_reads_them(tmp_path, rows, page_size, delete_every, wanted):
    db = _make(tmp_path, page_size, "CREATE TABLE t (a INTEGER, b INTEGER NOT NULL, c REAL, d INTEGER)", rows,
               delete_every)
    got_rowids, got = _page_read(db, "t", wanted)
    want_rowids, want = _sqlite_read(db, "t", wanted)
    assert got_rowids == want_rowids
    assert _same(got, want)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ids=st.lists(st.integers(-(1 << 62), 1 << 62), unique=True, max_size=800),
       page_size=st.sampled_from([512, 4096]))
def test_integer_primary_key_is_the_rowid(tmp_path, ids, page_size):
    db = _make(tmp_path, page_size, "CREATE TABLE t (id INTEGER NOT NULL PRIMARY KEY, v INTEGER)",
               [(i, i % 1000 - 500) for i in ids])
    got_rowids, got = _page_read(db, "t", ["id", "v"])
    want_rowids, want = _sqlite_read(db, "t", ["id", "v"])
    assert (got_rowids, got) == (want_rowids, want)
    assert [r[0] for r in got] == got_rowids


def test_a_deep_tree_of_many_rows(tmp_path):
    rng = np.random.default_rng(7)
    rows = [(int(a), int(b), float(c), int(d)) for a, b, c, d in zip(
        rng.integers(-(1 << 40), 1 << 40, 60_000), rng.integers(0, 300, 60_000), rng.normal(size=60_000),
        rng.integers(-(1 << 62), 1 << 62, 60_000), strict=True)]
    db = _make(tmp_path, 512, "CREATE TABLE t (a INTEGER, b INTEGER, c REAL, d INTEGER)", rows)
    con = sqlite3.connect(db)
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 't'").fetchone()[0]
    con.close()
    pages = sqlite_pages.PageFile(db)
    assert len(pages.leaves(root)) > 2000  # about 60 children per 512-byte interior page: three levels or more
    pages.close()
    assert _page_read(db, "t", ["a", "b", "c", "d"]) == _sqlite_read(db, "t", ["a", "b", "c", "d"])


@pytest.mark.parametrize("case, ddl, rows, then", [
    ("text in an INTEGER column", "CREATE TABLE t (a INTEGER, b INTEGER)", [(1, 2), ("x", 3)], None),
    ("a float in an INTEGER column", "CREATE TABLE t (a INTEGER, b INTEGER)", [(1, 2), (2.5, 3)], None),
    ("a record on overflow pages", "CREATE TABLE t (a INTEGER, b BLOB)", [(1, b"x" * 9000)], None),
    ("a record written before a column was added", "CREATE TABLE t (a INTEGER)", [(1,), (2,)],
     "ALTER TABLE t ADD COLUMN b INTEGER DEFAULT 7"),
    ("a WITHOUT ROWID table", "CREATE TABLE t (a INTEGER PRIMARY KEY, b INTEGER) WITHOUT ROWID", [(1, 2)], None),
])
def test_what_the_reader_does_not_decode_is_refused(tmp_path, case, ddl, rows, then):
    db = _make(tmp_path, 4096, ddl, rows)
    if then:
        con = sqlite3.connect(db)
        con.execute(then)
        con.commit()
        con.close()
    with pytest.raises(sqlite_pages.Unsupported):
        _page_read(db, "t", ["a", "b"] if "b" in ddl or then else ["a"])


def test_write_ahead_log_databases_are_refused(tmp_path):
    db = _make(tmp_path, 4096, "CREATE TABLE t (a INTEGER)", [(1,)])
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode = WAL")
    con.close()
    with pytest.raises(sqlite_pages.Unsupported):
        sqlite_pages.PageFile(db)


def _source_scan(db: Path, table: str, columns: list[str], batch_rows: int = 1 << 18) -> pa.Table:
    src = SqliteSource(db)
    try:
        return pa.Table.from_batches(list(src.scan(table, columns, batch_rows=batch_rows)))
    finally:
        src.close()


def test_scan_reads_through_sqlite_from_where_the_pages_stop(tmp_path):
    """Rows up to a record on overflow pages come from the pages, the rest through SQLite: no row twice or lost."""
    rows = [(i, i * 3 - 7, b"") for i in range(20_000)]
    rows[15_000] = (15_000, 44_993, b"y" * 10_000)
    db = _make(tmp_path, 4096, "CREATE TABLE t (a INTEGER, b INTEGER, c BLOB)", rows)
    got = _source_scan(db, "t", ["a", "b"], batch_rows=1000)
    assert got.column("a").to_pylist() == [r[0] for r in rows]
    assert got.column("b").to_pylist() == [r[1] for r in rows]


def test_scan_gives_the_declared_types(tmp_path):
    db = _make(tmp_path, 4096, "CREATE TABLE t (a INTEGER, c REAL)", [(1, 2), (None, None), (-5, 2.5)])
    got = _source_scan(db, "t", ["a", "c"])
    assert got.schema == pa.schema([("a", pa.int64()), ("c", pa.float64())])
    assert got.to_pylist() == [{"a": 1, "c": 2.0}, {"a": None, "c": None}, {"a": -5, "c": 2.5}]


@pytest.mark.parametrize("export", [DATA / "h200" / "overlap.sqlite.xz", DATA / "h200" / "contention.sqlite.xz",
                                    DATA / "h100" / "known_cause.sqlite.xz", DATA / "h200x2" / "train_ddp.sqlite.xz",
                                    *sorted((DATA / "nsys2022").glob("*.sqlite.xz"))[:1]],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_exports_read_as_sqlite_reads_them(tmp_path, export):
    db = tmp_path / "export.sqlite"
    with lzma.open(export) as src, open(db, "wb") as dst:
        dst.write(src.read())
    con = sqlite3.connect(db)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    con.close()
    checked = 0
    for table, columns in [("GPU_METRICS", ["timestamp", "typeId", "metricId", "value"]),
                           ("CUPTI_ACTIVITY_KIND_KERNEL", ["start", "end", "deviceId", "streamId", "correlationId",
                                                           "globalPid", "gridX", "graphNodeId"])]:
        if table in tables:
            assert _page_read(db, table, columns) == _sqlite_read(db, table, columns), table
            checked += 1
    assert checked >= 1
