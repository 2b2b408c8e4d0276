"""DuckDB connections follow the CPUs the process may use, not the host's core count."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import os, duckdb
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
from traceql import duck
plain = duckdb.connect().execute("SELECT current_setting('threads')").fetchone()[0]
ours = duck.connect().execute("SELECT current_setting('threads')").fetchone()[0]
print(plain, ours, duck.usable_cpus())
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and two CPUs")
def test_connections_use_the_cpus_the_process_is_bound_to():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout.split()
    plain, ours, usable = map(int, out)
    assert usable == 1 and ours == 1
    assert plain > 1  # DuckDB alone sizes its pool from the host: what traceql corrects


def test_memory_limit_is_applied_and_gives_the_same_attribution(train_ddp_run, monkeypatch, capsys):
    """$TRACEQL_MEMORY_LIMIT caps DuckDB's memory (its tables spill to a temporary folder past it): the attribution of
    a real DDP trace under a 64 MB cap is the same as without one; under 4 MB the command says it ran out of memory
    and what to do, with exit status 2 and no traceback."""
    import traceql
    from traceql import attribution
    from traceql.cli import main

    def attributed() -> tuple[list, str]:
        con = traceql.connect(train_ddp_run)
        attribution.prepare(con)
        rows = con.sql("SELECT * FROM kernel_attribution ORDER BY ALL").fetchall()
        limit = con.sql("SELECT current_setting('memory_limit')").fetchall()[0][0]
        con.close()
        return rows, limit

    free, default = attributed()
    monkeypatch.setenv("TRACEQL_MEMORY_LIMIT", "64MB")
    capped, limit = attributed()
    assert capped == free and len(free) > 10
    assert limit != default and limit.startswith("61.")  # 64 MB is 61.0 MiB, as DuckDB shows it

    monkeypatch.setenv("TRACEQL_MEMORY_LIMIT", "4MB")
    monkeypatch.setattr(sys, "argv", ["traceql", "attribute", str(train_ddp_run)])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main()
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "Traceback" not in err
    assert "out of memory" in err and "TRACEQL_MEMORY_LIMIT=4MB is too small" in err


def test_a_bad_memory_limit_is_bad_input(monkeypatch):
    from traceql import duck
    from traceql.errors import BadInputError

    monkeypatch.setenv("TRACEQL_MEMORY_LIMIT", "lots")
    with pytest.raises(BadInputError, match="TRACEQL_MEMORY_LIMIT='lots'"):
        duck.connect()


def test_prepared_tables_are_seen_by_cursors(train_ddp_run):
    """What ``prepare`` computes is kept where every cursor of the connection sees it (a temporary table is seen by
    its own cursor only): a cursor, as a notebook thread would use, reads the same rows of the public views, the
    uncompressed instance facts among them (a real DDP trace)."""
    import traceql
    from traceql import attribution

    con = traceql.connect(train_ddp_run)
    attribution.prepare(con)
    cur = con.cursor()
    for view in ("instance_facts", "kernel_signatures", "kernel_attribution", "device_summary", "instance_predictions"):
        mine = con.sql(f"SELECT * FROM {view} ORDER BY ALL").fetchall()
        assert mine, view
        assert cur.sql(f"SELECT * FROM {view} ORDER BY ALL").fetchall() == mine, view
    [(temporary,)] = con.sql("SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name LIKE '_materialized%'"
                             ).fetchall()
    assert temporary == 0
    cur.close()
    con.close()


def test_a_table_kept_in_a_file_reads_as_written_and_goes_with_its_connection(tmp_path, monkeypatch, capsys):
    """``duck.keep_file``: the pieces read back in the order written, text given as dictionaries or not, NULLs kept;
    a table shorter than ``FILE_MIN_ROWS`` is kept in memory; writing the table again on the connection removes its
    previous file or table, and so does ``drop_file``; the folder (with the files left in it) goes when the connection
    does; a forked process has a folder of its own; where no file can be made, the table is kept in memory, with a
    note."""
    import gc

    import pyarrow as pa

    from traceql import duck

    monkeypatch.setattr(duck.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(duck, "FILE_MIN_ROWS", 1)
    duck._folder_of.cache_clear()
    schema = pa.schema([("run_id", pa.string()), ("x", pa.int64())])
    pieces = [pa.table({"run_id": pa.array(["b", "b", "a"]).dictionary_encode(), "x": [3, None, 1]}),
              pa.table({"run_id": pa.array(["a", "c"]).dictionary_encode(), "x": [7, 2]}),
              pa.table({"run_id": pa.array(["c"]), "x": pa.array([5])})]
    rows = [("b", 3), ("b", None), ("a", 1), ("a", 7), ("c", 2), ("c", 5)]

    def kept(con) -> list[tuple[str, str]]:
        return con.sql(f"SELECT 'view', view_name FROM duckdb_views() WHERE database_name = '{duck.KEPT}' UNION ALL "
                       f"SELECT 'table', table_name FROM duckdb_tables() WHERE database_name = '{duck.KEPT}' "
                       "ORDER BY ALL").fetchall()

    con = duck.connect()
    first = duck.keep_file(con, "t", schema.empty_table(), iter(pieces))
    assert con.sql(f"SELECT * FROM {first}").fetchall() == rows
    old = duck.file_of(con, "t")
    assert os.path.exists(old) and kept(con) == [("view", "t")]
    again = duck.keep_file(con, "t", schema.empty_table(), iter([]))  # no rows: in memory
    assert not os.path.exists(old) and duck.file_of(con, "t") is None and kept(con) == [("table", "t")]
    assert con.sql(f"SELECT count(*) FROM {again}").fetchall() == [(0,)]
    assert [c[0] for c in con.sql(f"DESCRIBE SELECT * FROM {again}").fetchall()] == ["run_id", "x"]
    duck.keep_file(con, "t", schema.empty_table(), iter(pieces))  # a file again, in place of the table
    new = duck.file_of(con, "t")
    assert os.path.exists(new) and kept(con) == [("view", "t")]

    duck.drop_file(con, "t")  # once no view reads it
    assert not os.path.exists(new) and duck.file_of(con, "t") is None and kept(con) == []

    monkeypatch.setattr(duck, "FILE_MIN_ROWS", 7)  # one more than the pieces' rows: in memory
    small = duck.keep_file(con, "s", schema.empty_table(), iter(pieces))
    assert duck.file_of(con, "s") is None and con.sql(f"SELECT * FROM {small}").fetchall() == rows
    monkeypatch.setattr(duck, "FILE_MIN_ROWS", 6)
    duck.keep_file(con, "s", schema.empty_table(), iter(pieces))
    assert duck.file_of(con, "s") is not None and kept(con) == [("view", "s")]

    folder = os.path.dirname(new)
    del con
    gc.collect()
    assert not os.path.exists(folder)

    # a forked process makes its own folder, and its exit leaves its parent's
    mine = duck._files_folder()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            os.write(write, duck._files_folder().encode())
            import atexit
            atexit._run_exitfuncs()
        finally:
            os._exit(0)
    os.close(write)
    theirs = os.read(read, 4096).decode()
    os.waitpid(pid, 0)
    os.close(read)
    assert theirs and theirs != mine and os.path.isdir(mine) and not os.path.exists(theirs)

    con = duck.connect()
    with open(duck._con_folder(con), "w"):  # where its folder would go
        pass
    capsys.readouterr()
    fallback = duck.keep_file(con, "t", schema.empty_table(), iter(pieces))
    assert con.sql(f"SELECT * FROM {fallback}").fetchall() == rows and duck.file_of(con, "t") is None
    err = capsys.readouterr().err
    assert "keeping t in memory" in err and "set TMPDIR to a folder with room" in err
    # pieces that stream from a query on the same connection, as the engine's do: the fallback does not close it
    con.execute("CREATE TABLE src AS SELECT (i % 3)::VARCHAR AS run_id, i AS x FROM range(5000) t(i)")
    reader = con.sql("SELECT * FROM src ORDER BY x").to_arrow_reader(1000)
    streamed = duck.keep_file(con, "u", schema.empty_table(), (pa.Table.from_batches([b]) for b in reader))
    assert con.sql(f"SELECT count(*), sum(x) FROM {streamed}").fetchall() == [(5000, sum(range(5000)))]
    duck._folder_of.cache_clear()


def test_a_file_that_fails_mid_table_is_a_clear_error(tmp_path):
    """The first pieces written, a later one past the process's file size limit (``ulimit -f``): exit status 2
    at the command line (``BadInputError``), naming the limit, and no file left behind."""
    script = f"""
import os, resource, sys, tempfile
import numpy as np, pyarrow as pa
tempfile.tempdir = {str(tmp_path)!r}
from traceql import duck
from traceql.errors import BadInputError
duck.FILE_MIN_ROWS = 1
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))
pieces = [pa.table({{"x": np.arange(10)}}), pa.table({{"x": np.random.default_rng(0).integers(0, 1 << 62, 1 << 20)}})]
try:
    duck.keep_file(duck.connect(), "t", pieces[0].schema.empty_table(), iter(pieces))
except BadInputError as exc:
    print(exc)
    sys.exit(2)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "traceql's table t: cannot write in" in done.stdout and "ulimit -f" in done.stdout, done.stdout
    assert not [p for p in tmp_path.rglob("*.parquet")]


def test_prepare_leaves_one_file_per_connection(train_ddp_run, monkeypatch):
    """After ``prepare``, a connection's folder holds the engine's table (``_instance_parts``) and nothing else: the
    activity rows' file, which the pass read, is gone (a real DDP trace, its tables in files whatever their size)."""
    import gc

    import traceql
    from traceql import attribution, duck

    monkeypatch.setattr(duck, "FILE_MIN_ROWS", 1)
    con = traceql.connect(train_ddp_run)
    attribution.prepare(con)
    folder = duck._con_folder(con)
    names = os.listdir(folder)
    assert len(names) == 1 and names[0].startswith("_materialized__instance_parts-")
    assert con.sql("SELECT count(*) FROM _activity_rows").fetchall()[0][0] > 1000  # read from the remaining file
    del con
    gc.collect()
    assert not os.path.exists(folder)
