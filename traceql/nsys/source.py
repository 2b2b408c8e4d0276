"""Read-only access to an nsys export: an SQLite file or a Parquet directory.

Both kinds expose the same raw tables (``CUPTI_ACTIVITY_KIND_KERNEL``, ``StringIds``...) to
DuckDB as relations named ``raw_<TABLE>``, so the adapters hold one set of SQL for both.
SQLite is read through ADBC into Arrow (streamed for the large tables); inputs are opened
read-only and never modified.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import BadInputError

SQLITE_MAGIC = b"SQLite format 3\x00"
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # 2023+ and 2022.x spellings
STREAMED = {"GPU_METRICS"}  # large tables: scanned once, never materialized


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

    def meta(self) -> dict[str, str]:
        """The export's own description (product version, EXPORT_SCHEMA_VERSION...); {} if absent."""
        for t in META_TABLES:
            if t in self.tables():
                con = duckdb.connect()
                try:
                    rel = self.register(con, t, ["name", "value"])
                    return {k: v for k, v in con.execute(f"SELECT name, value FROM {rel}").fetchall()}
                finally:
                    con.close()
        return {}

    def close(self) -> None:
        pass


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
            names = self._db.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')").fetchall()
        except sqlite3.DatabaseError as exc:
            raise BadInputError(f"{path}: cannot read SQLite ({exc}); the file may be damaged, export it again") \
                from exc
        self._tables = {n for (n,) in names}
        self._adbc = None
        self._cursors: list = []

    def tables(self) -> set[str]:
        return self._tables

    def columns(self, table: str) -> list[str]:
        return [r[1] for r in self._db.execute(f"PRAGMA table_info({_quote(table)})").fetchall()]

    def _reader(self, sql: str) -> pa.RecordBatchReader:
        if self._adbc is None:
            import adbc_driver_sqlite.dbapi as adbc

            self._adbc = adbc.connect(f"file:{self.path.resolve()}?mode=ro")
        cur = self._adbc.cursor()
        self._cursors.append(cur)  # the reader dies with its cursor: keep it until close()
        cur.execute(sql)
        return cur.fetch_record_batch()

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
            raise BadInputError(f"{self.path}: reading table {table} failed ({exc}); the file may be damaged "
                                "or truncated, export it again") from exc
        name = f"raw_{table}"
        con.register(f"{name}_arrow", data)
        # An empty result comes back with every column as int64, so TEXT is cast back to VARCHAR.
        cols = ", ".join(f"NULLIF({_quote(c)}::VARCHAR, '') AS {_quote(c)}" if c in text else _quote(c)
                         for c in columns)
        con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT {cols} FROM {name}_arrow")
        return name

    def close(self) -> None:
        self._db.close()
        for cur in self._cursors:
            cur.close()
        if self._adbc is not None:
            self._adbc.close()


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
            raise BadInputError(f"{self._files[table]}: unreadable Parquet file ({exc})") from exc

    def register(self, con: duckdb.DuckDBPyConnection, table: str, columns: list[str]) -> str:
        name = f"raw_{table}"
        cols = ", ".join(map(_quote, columns))
        path = str(self._files[table]).replace("'", "''")
        con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT {cols} FROM read_parquet('{path}')")
        return name


def open_source(path: Path) -> Source:
    if path.is_dir():
        return ParquetDirSource(path)
    return SqliteSource(path)
