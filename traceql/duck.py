"""DuckDB connections that use the CPUs this process may run on.

DuckDB sizes its thread pool from the machine's core count, not from the process's CPU affinity: under
``taskset`` or a batch scheduler's CPU binding (Slurm's ``--cpu-bind``, a container's cpuset) it would start a
thread per core of the host and oversubscribe the few it may use. pyarrow and traceql's own pools already
follow the affinity; every connection traceql opens does too.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import os
import re
import shutil
import sys
import tempfile
import weakref
from collections.abc import Iterable

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from . import stopping
from .errors import BadInputError
from .output import write_failure


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


MEMORY_LIMIT_ENV = "TRACEQL_MEMORY_LIMIT"


@functools.cache
def _spill_folder() -> str:
    """This process's folder for DuckDB's spilled tables, removed at exit (DuckDB leaves it when a connection is
    never closed)."""
    folder = os.path.join(tempfile.gettempdir(), f"traceql-spill-{os.getpid()}")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def keeps_order(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether ``con`` returns a table's rows in the order they were inserted, when a query does not order them
    (DuckDB's ``preserve_insertion_order``, on unless the connection turned it off)."""
    return bool(con.sql("SELECT current_setting('preserve_insertion_order')").fetchall()[0][0])


def memory_limit() -> str:
    """``$TRACEQL_MEMORY_LIMIT`` as given (DuckDB's size syntax), or "" when memory is not capped."""
    return os.environ.get(MEMORY_LIMIT_ENV, "").strip()


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def memory_limit_bytes() -> int | None:
    """``$TRACEQL_MEMORY_LIMIT`` in bytes (None when memory is not capped, or the size is not one DuckDB's syntax
    gives in these units: DuckDB itself then refuses it)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-z]*)\s*", memory_limit().lower())
    if not m or m.group(2) not in _UNITS:
        return None
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def identifier(name: str) -> str:
    """``name`` quoted as an SQL identifier (a column named by nsys, with spaces, brackets or quotes)."""
    return '"' + name.replace('"', '""') + '"'


def connect() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one thread per usable CPU.

    ``$TRACEQL_MEMORY_LIMIT`` (DuckDB's size syntax: ``2GB``, ``800MiB``) caps the memory DuckDB keeps: past it,
    the tables an analysis computes once spill to a folder under the system's temporary directory. Without it,
    DuckDB's own default applies (80% of the machine's memory).
    """
    config: dict[str, str | int] = {"threads": usable_cpus()}
    limit = memory_limit()
    if limit:
        config["memory_limit"] = limit
        config["temp_directory"] = _spill_folder()
    try:
        return stopping.track(duckdb.connect(config=config))  # interrupted on Ctrl-C (traceql.stopping.run)
    except duckdb.Error as exc:
        if not limit:
            raise
        raise BadInputError(f"{MEMORY_LIMIT_ENV}={limit!r} is not a size DuckDB accepts (e.g. 2GB, 800MiB): "
                            f"{str(exc).splitlines()[0]}") from None


KEPT = "_kept"  # the in-memory database, compressed, that holds the tables an analysis computes once
PLAIN = "_kept_plain"  # the same, uncompressed: for a table whose compression costs more than its memory is worth


# a table this long is compressed at once; a shorter one waits for the next checkpoint: each costs tens of
# milliseconds whatever it compresses, more than a short table's memory is worth
CHECKPOINT_ROWS = 1 << 18


def keep(con: duckdb.DuckDBPyConnection, table: str, select: str, data: pa.Table | None = None,
         compressed: bool = True, checkpoint: bool = True) -> str:
    """Compute ``select`` (over ``data``, named ``_input`` there, if given) once into ``table`` of an in-memory
    database attached to ``con``, and return the table's qualified name. ``compressed``: in the database with
    compression on, where after a checkpoint (:func:`_compress`) its columns are stored as a database file's are
    (bit-packing, dictionaries, frame-of-reference, ALP for doubles): a few times smaller than a temporary table's,
    and faster to scan. The checkpoint comes at once for a table of ``CHECKPOINT_ROWS`` rows or more (unless not
    ``checkpoint``: :func:`keep_pieces` checkpoints once its pieces are in); a shorter one is compressed by the
    next, if any. Cursors of ``con`` see these tables (they do
    not see temporary tables)."""
    database = KEPT if compressed else PLAIN
    con.execute(f"ATTACH IF NOT EXISTS ':memory:' AS {database}{' (COMPRESS)' if compressed else ''}")
    if data is not None:
        con.register("_input", data)
    try:
        [(rows,)] = con.execute(f'CREATE OR REPLACE TABLE {database}."{table}" AS {select}').fetchall()
    finally:
        if data is not None:
            con.unregister("_input")
    if compressed and checkpoint and rows >= CHECKPOINT_ROWS:
        _compress(con)
    return f'{database}."{table}"'


def keep_pieces(con: duckdb.DuckDBPyConnection, table: str, empty: pa.Table, pieces: Iterable[pa.Table]) -> str:
    """A kept table (:func:`keep`) of the columns of ``empty``, appended a piece at a time as ``pieces`` yields them,
    so that memory holds a piece and DuckDB's table (which it can spill), not the whole result twice. The appends go
    through a cursor: ``pieces`` may be computed from a stream that reads on ``con``, which a statement on ``con``
    would close."""
    cur = con.cursor()
    rows = 0
    try:
        kept = keep(cur, table, "SELECT * FROM _input", empty, checkpoint=False)
        for piece in pieces:
            cur.register("_input", piece)
            try:
                cur.execute(f"INSERT INTO {kept} SELECT * FROM _input")
            finally:
                cur.unregister("_input")
            rows += piece.num_rows
    finally:
        cur.close()
    if rows >= CHECKPOINT_ROWS:
        _compress(con)
    return kept


def _files_folder() -> str:
    """This process's folder for the tables written to files (:func:`keep_file`), removed at exit. Not DuckDB's
    spill folder: DuckDB removes that one when a database closes. A process forked from one that made its folder
    makes its own (a connection's folder is named by the connection's address, which a fork repeats)."""
    return _folder_of(os.getpid())


@functools.cache
def _folder_of(pid: int) -> str:
    folder = tempfile.mkdtemp(prefix=f"traceql-tables-{pid}-")
    atexit.register(_remove_own, folder, pid)
    return folder


def _remove_own(folder: str, pid: int) -> None:
    if os.getpid() == pid:  # not a fork's exit
        shutil.rmtree(folder, ignore_errors=True)


def _con_folder(con: duckdb.DuckDBPyConnection) -> str:
    """``con``'s folder of files (:func:`keep_file`), named by its address."""
    return os.path.join(_files_folder(), f"con-{id(con):x}")


def keep_file(con: duckdb.DuckDBPyConnection, table: str, empty: pa.Table, pieces: Iterable[pa.Table]) -> str:
    """A table of the columns of ``empty`` written to a Parquet file a piece at a time as ``pieces`` yields them, and
    the name of the kept view that reads it (``read_parquet``: in the order written, where the connection keeps order;
    cursors see it).

    Memory holds a piece; DuckDB reads the file at the pace it needs, and never spills it. A kept table's appended
    rows, by contrast, stay in memory uncompressed until the next checkpoint, which cannot run while ``con``'s cursors
    read, and spill uncompressed past a cap. The file is in a folder of ``con``'s under the system's temporary
    directory (``TMPDIR``), removed when ``con`` is, or at exit; the table's previous file on ``con``, if any, is
    removed once this one is written (the caller points its view here at once).

    A table of fewer than ``FILE_MIN_ROWS`` rows is kept in memory instead (:func:`keep_pieces`), and so is one whose
    file cannot be made or begun (a full, read-only or size-limited ``TMPDIR``: said on stderr). A file that fails
    later, mid-table, is an error that says so (exit status 2)."""
    pieces = iter(pieces)
    head: list[pa.Table] = []  # the pieces read before the table is known to be large
    rows = 0
    for piece in pieces:
        head.append(piece)
        rows += piece.num_rows
        if rows >= FILE_MIN_ROWS:
            break
    else:
        return _keep_in_memory(con, table, empty, head)
    folder = _con_folder(con)
    path = os.path.join(folder, f"{table}-{next(_FILE_NUMBERS)}.parquet")
    out = None
    try:
        if not os.path.isdir(folder):
            os.makedirs(folder)
            weakref.finalize(con, _remove_folder, folder)
        # text columns as dictionaries, where the first piece has them; integers as deltas
        out = pq.ParquetWriter(path, head[0].schema, compression=FILE_COMPRESSION, write_statistics=False,
                               use_dictionary=[f.name for f in head[0].schema if _is_text(f.type)],
                               column_encoding={f.name: "DELTA_BINARY_PACKED" for f in head[0].schema
                                                if pa.types.is_integer(f.type)},
                               data_page_version=FILE_PAGES)
        for piece in head:
            _write(out, piece)
    except OSError as exc:  # no file can be made here: the table stays in memory
        _discard(out, path)
        print(f"traceql: note: {_why_not(folder, exc)}; keeping {table} in memory", file=sys.stderr)
        return _keep_in_memory(con, table, empty, itertools.chain(head, pieces))
    except BaseException:
        _discard(out, path)
        raise
    head = []
    try:
        for piece in pieces:
            _write(out, piece)
        out.close()
    except BaseException as exc:
        _discard(out, path)
        if isinstance(exc, OSError):
            raise BadInputError(f"traceql's table {table}: {_why_not(folder, exc)}") from None
        raise
    con.execute(f"ATTACH IF NOT EXISTS ':memory:' AS {KEPT} (COMPRESS)")
    drop_file(con, table)
    literal = "'" + path.replace("'", "''") + "'"  # a view's SQL takes no parameters
    con.execute(f'CREATE OR REPLACE VIEW {KEPT}."{table}" AS SELECT * FROM read_parquet({literal})')
    _FILES[(folder, table)] = path
    return f'{KEPT}."{table}"'


def _write(out: pq.ParquetWriter, piece: pa.Table) -> None:
    if not piece.schema.equals(out.schema):
        piece = piece.cast(out.schema)
    out.write_table(piece, row_group_size=max(piece.num_rows, 1))


def _discard(out: pq.ParquetWriter | None, path: str) -> None:
    """Close and remove a file not written to its end."""
    if out is not None:
        with contextlib.suppress(OSError):
            out.close()
    with contextlib.suppress(OSError):
        os.remove(path)


def _why_not(folder: str, exc: OSError) -> str:
    """Why a file of ``folder`` could not be written, and what to do."""
    why, hint = write_failure(exc)
    return (f"cannot write in {folder} ({why}); {hint + '; ' if hint else ''}set TMPDIR to a folder with room "
            "(traceql writes the large tables it computes there)")


def _keep_in_memory(con: duckdb.DuckDBPyConnection, table: str, empty: pa.Table, pieces: Iterable[pa.Table]) -> str:
    drop_file(con, table)
    return keep_pieces(con, table, empty, pieces)


def drop_file(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """Drop ``table`` (:func:`keep_file`) once no other view reads it: its view and file, or its table in memory, if
    there is one. Through a cursor: a stream that reads on ``con`` may be under way (a statement on ``con`` would
    close it)."""
    path = _FILES.pop((_con_folder(con), table), None)
    cur = con.cursor()
    try:
        kinds = cur.execute("SELECT 'VIEW' FROM duckdb_views() WHERE database_name = ? AND view_name = ? UNION ALL "
                            "SELECT 'TABLE' FROM duckdb_tables() WHERE database_name = ? AND table_name = ?",
                            [KEPT, table, KEPT, table]).fetchall()
        for (kind,) in kinds:
            cur.execute(f'DROP {kind} {KEPT}."{table}"')
    finally:
        cur.close()
    if path is not None and os.path.exists(path):
        os.remove(path)


def file_of(con: duckdb.DuckDBPyConnection, table: str) -> str | None:
    """The file of ``table`` on ``con`` (:func:`keep_file`), None if it has none."""
    return _FILES.get((_con_folder(con), table))


def lock_kept_files(con: duckdb.DuckDBPyConnection) -> None:
    """The tables ``con`` keeps in files (:func:`keep_file`) read as Arrow scans of the same files, which pyarrow
    opens, not DuckDB: for SQL after DuckDB's own file access is turned off (``store.lock_files``)."""
    import pyarrow.dataset as ds

    folder = _con_folder(con)
    for (where, table), path in list(_FILES.items()):
        if where == folder:
            con.register(f"_file_{table}", ds.dataset(path, format="parquet"))
            con.execute(f'CREATE OR REPLACE VIEW {KEPT}."{table}" AS SELECT * FROM "_file_{table}"')


def _remove_folder(folder: str) -> None:
    for key in [k for k in _FILES if k[0] == folder]:
        del _FILES[key]
    shutil.rmtree(folder, ignore_errors=True)


_FILE_NUMBERS = itertools.count()
_FILES: dict[tuple[str, str], str] = {}  # (a connection's folder, table): its file
# lz4, and dictionaries for text only: writing 1 M rows of _instance_parts (45 columns) took 0.57 s, against 0.98 s
# with zstd and dictionaries for every column (pyarrow's default; 0.84 s with zstd and dictionaries for text, 0.45 s
# uncompressed), for 64 MiB of file (42 MiB; 33 MiB; 224 MiB). 2-core machine, the 1 M-kernel benchmark store.
FILE_COMPRESSION = "lz4"
# Parquet's version 2 data pages: the same rows written in 0.47-0.51 s against 0.55-0.56 s with version 1 pages, the
# same size, and read back by DuckDB as fast (0.22-0.24 s against 0.23-0.26 s for every column)
FILE_PAGES = "2.0"
# Integer columns are written as deltas (DELTA_BINARY_PACKED), then lz4: times, ids and counts of activities in time
# order differ little from row to row. 1 M rows of _instance_parts: 45 MiB against 64 MiB, written as fast, a scan of
# five columns by DuckDB 0.030 s against 0.046 s; attribute_bench.py at 10 M kernels, three runs each, alternating:
# 42.6-44.7 s and 74.5-76.5 s of CPU against 44.4-46.7 s and 77.2-80.4 s
# a table shorter than this stays in memory: its file would save little memory, and cost a file per connection
FILE_MIN_ROWS = CHECKPOINT_ROWS


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t)


def _compress(con: duckdb.DuckDBPyConnection) -> None:
    """Compress what the kept tables gained since the last time (a checkpoint of their database)."""
    con.execute(f"CHECKPOINT {KEPT}")
