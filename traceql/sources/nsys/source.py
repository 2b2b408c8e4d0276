"""Read-only access to an nsys export: an SQLite file or a Parquet directory.

Both kinds expose the same raw tables (``CUPTI_ACTIVITY_KIND_KERNEL``, ``StringIds``...) to
DuckDB as relations named ``raw_<TABLE>``, so the adapters hold one set of SQL for both.
SQLite is read through ADBC into Arrow; inputs are opened read-only and never modified.
The largest table (``GPU_METRICS``, tens of millions of rows) is not registered but scanned
with :meth:`Source.scan`: Arrow batches in table order. Its records are decoded straight from the
file's pages with numpy (:mod:`.sqlite_pages`, several times faster than SQLite's row-by-row
decoding); what that reader does not handle is read from SQLite in rowid ranges over several
connections at once.
"""

from __future__ import annotations

import queue
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ... import duck
from ...errors import BadInputError
from . import sqlite_pages

SQLITE_MAGIC = b"SQLite format 3\x00"
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # 2023+ and 2022.x spellings
STREAMED = {"GPU_METRICS"}  # large tables: scanned once, never materialized
ARROW_TYPES = {"INTEGER": pa.int64(), "REAL": pa.float64(), "TEXT": pa.string()}
T = TypeVar("T")
R = TypeVar("R")
MAX_RANGES = 1 << 16  # more rowid ranges than this (a table with huge rowid gaps): read in one pass


def default_workers() -> int:
    """Readers for :meth:`Source.scan`: one per CPU this process may use, up to 4 (beyond, the single
    thread that consumes the batches is the limit)."""
    return max(1, min(4, duck.usable_cpus()))


class Source:
    """One nsys export. Subclasses: :class:`SqliteSource`, :class:`ParquetDirSource`."""

    path: Path
    format: str

    def tables(self) -> set[str]:
        raise NotImplementedError

    def columns(self, table: str) -> list[str]:
        raise NotImplementedError

    def register(self, con: duckdb.DuckDBPyConnection, table: str, columns: list[str]) -> str:
        raise NotImplementedError

    def scan(self, table: str, columns: list[str], *, batch_rows: int = 1 << 18, workers: int | None = None,
             transform: Callable[[pa.RecordBatch], pa.RecordBatch] | None = None) -> Iterator[pa.RecordBatch]:
        """The table's ``columns`` as Arrow batches of at most ``batch_rows`` rows, in table order; ``transform``
        (thread-safe) is applied to each batch, in the reading threads where there are several.

        Up to ``workers`` batches (default: :func:`default_workers`) are read at once; the result does
        not depend on ``workers``.
        Nothing is held beyond the batches in flight, so memory stays flat for any table size.
        """
        raise NotImplementedError

    def meta(self) -> dict[str, str]:
        """The export's own description (product version, EXPORT_SCHEMA_VERSION...); {} if absent."""
        for t in META_TABLES:
            if t in self.tables():
                con = duck.connect()
                try:
                    rel = self.register(con, t, ["name", "value"])
                    return {k: v for k, v in con.execute(f"SELECT name, value FROM {rel}").fetchall()}
                finally:
                    con.close()
        return {}

    def close(self) -> None:
        pass


def _lenient_text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def check_sqlite_file(path: Path) -> None:
    """Fail clearly on a file that is not SQLite or was cut short (a copy that did not finish)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        header = f.read(100)
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        raise BadInputError(f"{path}: not an SQLite file; give an nsys export (`nsys export -t sqlite`), "
                            "a Parquet export directory, or an .nsys-rep report")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    change, valid_for = header[24:28], header[92:96]
    if change == valid_for and pages and size < pages * page_size:
        raise BadInputError(f"{path}: truncated SQLite file ({size} of {pages * page_size} bytes); "
                            "copy or export it again")


class SqliteSource(Source):
    format = "nsys-sqlite"

    def __init__(self, path: Path):
        self.path = path
        check_sqlite_file(path)
        try:
            self._db = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True, check_same_thread=False)
            # a damaged file's text may not be UTF-8: decoded with replacement, it fails later as bad input, by name
            self._db.text_factory = _lenient_text
            names = self._db.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')").fetchall()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # SQLite's message may quote the damaged bytes
            reason = "bytes that are not text where text belongs" if isinstance(exc, UnicodeDecodeError) else exc
            raise BadInputError(f"{path}: cannot read SQLite ({reason}); the file may be damaged, export it again") \
                from exc
        self._tables = {n for (n,) in names}
        self._adbc: _Adbc | None = None
        self._pages: sqlite_pages.PageFile | None = None

    def tables(self) -> set[str]:
        return self._tables

    def columns(self, table: str) -> list[str]:
        return [r[1] for r in self._db.execute(f"PRAGMA table_info({_quote(table)})").fetchall()]

    def _reader(self, sql: str) -> pa.RecordBatchReader:
        if self._adbc is None:
            self._adbc = _Adbc(self.path)
        return self._adbc.reader(sql)

    def _read_error(self, table: str, exc: Exception) -> BadInputError:
        return BadInputError(f"{self.path}: reading table {table} failed ({exc}); the file may be damaged "
                             "or truncated, export it again")

    def scan(self, table: str, columns: list[str], *, batch_rows: int = 1 << 18, workers: int | None = None,
             transform: Callable[[pa.RecordBatch], pa.RecordBatch] | None = None) -> Iterator[pa.RecordBatch]:
        transform = transform or _same
        # ADBC infers each batch's types from its values (an empty batch is all int64): cast to the declared ones.
        # (A TEXT column whose batch starts with NULLs can fail there: scan is for numeric tables, see register.)
        types = self.declared_types(table)
        target = pa.schema([(c, ARROW_TYPES.get(types.get(c, ""), pa.null())) for c in columns])
        workers = max(1, workers or default_workers())
        after = None  # the last rowid read from the pages
        try:
            for batch, last in self._page_scan(table, columns, target, batch_rows, workers, transform):
                after = last
                yield batch
            return
        except sqlite_pages.Unsupported:
            pass  # the rest (or all) of the table through SQLite
        try:
            # two subqueries: SQLite reads a lone min() or max() off the b-tree, but scans for both at once
            lo, hi = self._db.execute(f"SELECT (SELECT min(rowid) FROM {_quote(table)}), "
                                      f"(SELECT max(rowid) FROM {_quote(table)})").fetchone()
        except sqlite3.DatabaseError as exc:
            raise self._read_error(table, exc) from exc
        if lo is None or (after is not None and after >= hi):
            return
        lo = lo if after is None else max(lo, after + 1)
        # nsys tables are rowid tables filled in order: rowid ranges are disjoint slices of the table.
        ranges = [(start, min(start + batch_rows, hi + 1)) for start in range(lo, hi + 1, batch_rows)] \
            if (hi - lo) // batch_rows < MAX_RANGES else [(lo, hi + 1)]
        select = f"SELECT {', '.join(map(_quote, columns))} FROM {_quote(table)}"
        if self._adbc is None:
            self._adbc = _Adbc(self.path)
        idle: queue.SimpleQueue = queue.SimpleQueue()  # one ADBC connection per worker, reused across ranges
        for _ in range(workers):
            idle.put(self._adbc.connect())

        def read(bounds: tuple[int, int]) -> list[pa.RecordBatch]:
            con = idle.get()
            try:
                batches = self._adbc.read(con, f"{select} WHERE rowid >= {bounds[0]:d} AND rowid < {bounds[1]:d} "
                                               "ORDER BY rowid", batch_rows)
                return [transform(_conform(b, target)) for b in batches]
            except Exception as exc:  # ADBC raises its own DatabaseError family
                raise self._read_error(table, exc) from exc
            finally:
                idle.put(con)

        for batches in _in_order(read, ranges, workers, f"traceql-read-{table}"):
            yield from batches

    def _page_scan(self, table: str, columns: list[str], target: pa.Schema, batch_rows: int, workers: int,
                   transform: Callable[[pa.RecordBatch], pa.RecordBatch]) -> Iterator[tuple[pa.RecordBatch, int]]:
        """Batches decoded from the file's pages, each with the last rowid of its chunk; raises
        :class:`sqlite_pages.Unsupported` (also midway) where SQLite must read the rest."""
        row = self._db.execute("SELECT rootpage, sql FROM sqlite_master WHERE type = 'table' AND name = ?",
                               (table,)).fetchone()
        if row is None or not row[0]:
            raise sqlite_pages.Unsupported(f"no table {table}")
        plan = sqlite_pages.plan(row[1], self._db.execute(f"PRAGMA table_info({_quote(table)})").fetchall(),
                                 columns)
        if self._pages is None:
            self._pages = sqlite_pages.PageFile(self.path)
        pages, leaves = self._pages, self._pages.leaves(row[0])
        step = max(1, sqlite_pages.CHUNK_BYTES * workers // pages.page_size)  # sqlite_pages.CHUNK_BYTES says why

        def chunk(start: int) -> tuple[list[pa.RecordBatch], int | None]:
            rowid, values = pages.decode(leaves[start:start + step], plan)
            if not len(rowid):
                return [], None
            arrays = [pa.array(v, mask=null).cast(f.type) for (v, null), f in zip(values, target, strict=True)]
            batches = [transform(pa.RecordBatch.from_arrays([a.slice(lo, batch_rows) for a in arrays],
                                                            schema=target)) for lo in range(0, len(rowid), batch_rows)]
            return batches, int(rowid[-1])

        for batches, last in _in_order(chunk, range(0, len(leaves), step), workers, f"traceql-pages-{table}"):
            for batch in batches:
                yield batch, last

    def declared_types(self, table: str) -> dict[str, str]:
        return {r[1]: (r[2] or "").upper() for r in self._db.execute(f"PRAGMA table_info({_quote(table)})")}

    def register(self, con: duckdb.DuckDBPyConnection, table: str, columns: list[str]) -> str:
        # ADBC infers Arrow types from the first rows, so a TEXT column that starts with NULLs
        # would come out as int64 (or fail later): read TEXT as '' for NULL and restore NULL in DuckDB.
        types = self.declared_types(table)
        text = [c for c in columns if types.get(c) == "TEXT"]
        select = ", ".join(f"COALESCE({_quote(c)}, '') AS {_quote(c)}" if c in text else _quote(c) for c in columns)
        try:
            reader = self._reader(f"SELECT {select} FROM {_quote(table)}")
            data = reader if table in STREAMED else reader.read_all()
        except Exception as exc:  # ADBC raises its own DatabaseError family
            raise self._read_error(table, exc) from exc
        name = f"raw_{table}"
        con.register(f"{name}_arrow", data)
        # An empty result comes back with every column as int64, so TEXT is cast back to VARCHAR.
        cols = ", ".join(f"NULLIF({_quote(c)}::VARCHAR, '') AS {_quote(c)}" if c in text else _quote(c)
                         for c in columns)
        con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT {cols} FROM {name}_arrow")
        return name

    def close(self) -> None:
        self._db.close()
        if self._pages is not None:
            self._pages.close()
        if self._adbc is not None:
            self._adbc.close()


class _Adbc:
    """Read-only ADBC connections to one SQLite file, through ADBC's own API: its DB-API module
    imports pandas or polars where they are installed, which costs more than a small ingest."""

    def __init__(self, path: Path):
        import adbc_driver_manager
        import adbc_driver_sqlite

        self._api = adbc_driver_manager
        self._db = adbc_driver_sqlite.connect(f"file:{path.resolve()}?mode=ro")
        self._connections: list = []
        self._statements: list = []  # a stream lives as long as its statement
        self._main = None  # the connection of :meth:`reader`

    def connect(self):
        con = self._api.AdbcConnection(self._db)
        self._connections.append(con)
        return con

    def _statement(self, con, sql: str, batch_rows: int | None):
        stmt = self._api.AdbcStatement(con)
        if batch_rows:
            stmt.set_options(**{"adbc.sqlite.query.batch_rows": str(batch_rows)})
        stmt.set_sql_query(sql)
        return stmt

    def reader(self, sql: str) -> pa.RecordBatchReader:
        """A stream over ``sql``'s rows on a connection of its own; it stays valid until :meth:`close`."""
        if self._main is None:
            self._main = self.connect()
        stmt = self._statement(self._main, sql, None)
        self._statements.append(stmt)
        return pa.RecordBatchReader.from_stream(stmt.execute_query()[0])

    def read(self, con, sql: str, batch_rows: int) -> list[pa.RecordBatch]:
        """All of ``sql``'s rows, read on ``con`` (one thread at a time per connection)."""
        with self._statement(con, sql, batch_rows) as stmt:
            return list(pa.RecordBatchReader.from_stream(stmt.execute_query()[0]))

    def close(self) -> None:
        for handle in (*self._statements, *self._connections, self._db):
            handle.close()


class ParquetDirSource(Source):
    """The directory that ``nsys export -t parquetdir`` writes: one ``TABLE.parquet`` per table."""

    format = "nsys-parquetdir"

    def __init__(self, path: Path):
        self.path = path
        self._files = {p.stem: p for p in path.glob("*.parquet")}
        if not self._files:
            raise BadInputError(f"{path}: directory holds no .parquet files; is it an `nsys export -t parquetdir` "
                                "output, or a traceql run directory?")

    def tables(self) -> set[str]:
        return set(self._files)

    def columns(self, table: str) -> list[str]:
        try:
            return pq.read_schema(self._files[table]).names
        except Exception as exc:
            raise BadInputError(f"{self._files[table]}: unreadable Parquet file ({exc}); the export is damaged: "
                                  "export it again (`nsys export -t parquetdir`)") from exc

    def register(self, con: duckdb.DuckDBPyConnection, table: str, columns: list[str]) -> str:
        name = f"raw_{table}"
        cols = ", ".join(map(_quote, columns))
        path = str(self._files[table]).replace("'", "''")
        con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT {cols} FROM read_parquet('{path}')")
        return name

    def scan(self, table: str, columns: list[str], *, batch_rows: int = 1 << 18, workers: int | None = None,
             transform: Callable[[pa.RecordBatch], pa.RecordBatch] | None = None) -> Iterator[pa.RecordBatch]:
        transform = transform or _same
        try:  # pyarrow decodes with its own threads; ``workers`` is for SQLite
            for batch in pq.ParquetFile(self._files[table]).iter_batches(batch_size=batch_rows, columns=columns,
                                                                        use_threads=workers != 1):
                yield transform(batch)
        except (OSError, pa.ArrowException) as exc:
            raise BadInputError(f"{self._files[table]}: unreadable Parquet file ({exc}); the export is damaged: "
                                  "export it again (`nsys export -t parquetdir`)") from exc


def _in_order(fn: Callable[[T], R], items: Iterable[T], workers: int, name: str) -> Iterator[R]:
    """``fn`` of each item, computed on ``workers`` threads, handed on in the items' order; no more results are
    held than there are workers busy (and one ready), whatever the number of items."""
    pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
    pending: list[Future] = []
    try:
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) > workers:  # every worker busy, and no more than that in memory
                yield pending.pop(0).result()
        while pending:
            yield pending.pop(0).result()
    finally:
        for fut in pending:
            fut.cancel()
        pool.shutdown(wait=True)


def _same(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch


def _conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    if batch.schema.equals(target):
        return batch
    return pa.RecordBatch.from_arrays([col if f.type == pa.null() else col.cast(f.type)
                                       for col, f in zip(batch.columns, target, strict=True)], names=target.names)


def open_source(path: Path) -> Source:
    if path.is_dir():
        return ParquetDirSource(path)
    return SqliteSource(path)
