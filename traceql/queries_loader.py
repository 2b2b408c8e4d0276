"""Load the SQL views shipped in ``queries/`` (installed as ``traceql.queries``).

One public view per ``.sql`` file, named after the file; files starting with ``_`` are helpers
and load first. Each file starts with a header comment that lists the view's columns, their
types and units (a test checks the header against DuckDB's DESCRIBE).
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Sequence
from importlib import resources
from pathlib import Path

import duckdb

from . import duck

HEADER_COLUMN = re.compile(r"^--\s+(\w+)\s+([A-Z][A-Z0-9_\[\]]*(?:\([^)]*\))?)\s*(.*)$")


def bundled_dir(package: str, source_dir: str):
    """An installed data package (``traceql.queries``…), or its folder when running from a checkout."""
    try:
        return resources.files(f"traceql.{package}")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / source_dir


def query_files() -> list[tuple[str, str]]:
    root = bundled_dir("queries", "queries")
    files = sorted((p.name, p.read_text()) for p in root.iterdir() if p.name.endswith(".sql"))
    return sorted(files, key=lambda f: (not f[0].startswith("_"), f[0]))


def header_columns(sql: str) -> list[tuple[str, str]]:
    """(column, type) pairs from a view file's header block (lines ``-- name TYPE description``)."""
    cols = []
    in_cols = False
    for line in sql.splitlines():
        if not line.startswith("--"):
            break
        if line.strip().lower().startswith("-- columns"):
            in_cols = True
            continue
        if in_cols and (m := HEADER_COLUMN.match(line)):
            cols.append((m.group(1), m.group(2)))
    return cols


def create_views(con: duckdb.DuckDBPyConnection, only: Collection[str] | None = None) -> list[str]:
    """Create every view, each after the views it reads (a view whose dependencies do not exist yet is retried
    after the others). ``only``: those views and the views they read, but for views and tables ``con`` has already
    (for a connection that holds some tables only, or results computed outside SQL).

    DuckDB binds a view when it is created, expanding every view it reads, so creating a deep chain of views one
    over the other costs far more than each view's own SQL (seconds for the analysis views). Each view is therefore
    first a stand-in: an empty temporary table of its columns, under its own name (the temporary schema is searched
    first), made from its definition bound against the stand-ins of the views it reads. Then every view is created
    with its real definition, bound against those stand-ins again (one level deep), and the stand-ins are dropped.
    """
    pending = _in_dependency_order([(n.removesuffix(".sql"), sql.strip().rstrip(";")) for n, sql in query_files()])
    if only is not None:
        have = {r[0] for r in con.sql("SELECT table_name FROM duckdb_tables() UNION ALL "
                                      "SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        wanted, todo = set(), [v for v in only if v not in have]
        sqls = dict(pending)
        while todo:
            view = todo.pop()
            if view in wanted or view in have:
                continue
            wanted.add(view)
            todo += [w for w in identifiers(sqls[view]) if w in sqls and w != view]
        pending = [(v, s) for v, s in pending if v in wanted]
    created: list[tuple[str, str]] = []
    try:
        while pending:
            failed = []
            for view, sql in pending:
                try:
                    con.execute(f'CREATE OR REPLACE TEMP TABLE "{view}" AS SELECT * FROM ({sql}) LIMIT 0')
                except duckdb.CatalogException as exc:
                    failed.append((view, sql, exc))
                    continue
                created.append((view, sql))
            if len(failed) == len(pending):
                view, _, exc = failed[0]
                raise RuntimeError(f"query view {view} cannot be created: {exc}")
            pending = [(v, s) for v, s, _ in failed]
        for view, sql in created:
            con.execute(f'CREATE OR REPLACE VIEW main."{view}" AS {sql}')
    finally:
        for view, _ in created:
            con.execute(f'DROP TABLE IF EXISTS temp."{view}"')
    return [view for view, _ in created]


def metric_projection(con: duckdb.DuckDBPyConnection, own: Sequence[str], wide: str = "gpu_metrics_wide") -> str:
    """``_metric_wide`` as a projection of the stored wide GPU metrics (``wide``, whose metric columns are ``own``):
    each of its columns from the columns of the metrics that ``_metric_keys`` gives it, combined as it says, row by
    row, where the reference SQL (``_metric_wide.sql``) unpivots every metric of every sample and groups them again.
    The same rows: a sample with a value of at least one metric named there."""
    keys = [c for c, _ in header_columns(dict(query_files())["_metric_wide.sql"])]
    fixed = keys[:3]  # run_id, device_id, ts_ns
    own = list(own)
    rules = con.execute("""SELECT c.name, arg_min(k.key, k.rank), arg_min(k.combine, k.rank)
                           FROM (SELECT unnest($1::VARCHAR[]) AS name) c JOIN _metric_keys k ON c.name LIKE k.pattern
                           GROUP BY c.name""", [own]).fetchall()
    feeds = {key: [(duck.identifier(n), combine) for n, k, combine in sorted(rules, key=lambda r: own.index(r[0]))
                   if k == key] for key in keys[3:]}
    select = []
    for key, cols in feeds.items():
        names = [c for c, _ in cols]
        if not names:
            expr = "NULL"
        elif len(names) == 1:
            expr = names[0]
        elif cols[0][1] == "sum":  # NULL where none has a value, as sum() of no rows
            expr = (f"CASE WHEN coalesce({', '.join(names)}) IS NULL THEN NULL "
                    f"ELSE {' + '.join(f'coalesce({n}, 0)' for n in names)} END")
        else:
            expr = f"greatest({', '.join(names)})"  # NULLs left out, as max()
        select.append(f"({expr})::DOUBLE AS {key}")
    present = " OR ".join(f"{c} IS NOT NULL" for cols in feeds.values() for c, _ in cols) or "false"
    return f"SELECT {', '.join(fixed)}, {', '.join(select)} FROM {duck.identifier(wide)} WHERE {present}"


def _in_dependency_order(views: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``views`` (name, SQL) ordered so that each comes after the views its SQL names outside comments (a name in a
    string counts too: a needless edge only moves a view later); a circle is broken in the given order (its views are
    then created by the retries of :func:`create_views`, or fail, named)."""
    names = {name for name, _ in views}
    needs = {name: {w for w in identifiers(sql) if w in names and w != name} for name, sql in views}
    ordered: list[tuple[str, str]] = []
    done: set[str] = set()
    todo = list(views)
    while todo:
        ready = [(n, s) for n, s in todo if needs[n] <= done] or todo[:1]
        for n, s in ready:
            ordered.append((n, s))
            done.add(n)
        todo = [(n, s) for n, s in todo if n not in done]
    return ordered


IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def identifiers(sql: str) -> set[str]:
    """The identifiers of a view's ``sql`` outside comments (view and table names among them), as written."""
    return set(IDENTIFIER.findall(re.sub(r"--[^\n]*", "", sql)))


# DuckDB expands a view at every reference, so a chain of views that each read the one before recomputes the whole
# chain many times over; computing the shared ones once into temporary tables (and pointing the views at them)
# makes a whole attribution seconds instead of minutes. traceql.attribution names them.


def materialize(con: duckdb.DuckDBPyConnection, views: tuple[str, ...], uncompressed: tuple[str, ...] = ()) -> None:
    """Compute ``views`` once on this connection; later queries of them (and of views over them) read the result:
    a kept table (``duck.keep``), compressed but for those of ``uncompressed``.

    Do it after every view the results depend on is final (NVTX groups, an external baseline).
    """
    if os.environ.get("TRACEQL_MATERIALIZE", "1") == "0":  # for comparing plans in benchmarks
        return
    present = {r[0] for r in con.sql("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    for view in views:
        if view not in present:
            continue
        keep_view(con, view, f'SELECT * FROM "{view}"', compressed=view not in uncompressed)


def keep_view(con: duckdb.DuckDBPyConnection, view: str, select: str, compressed: bool = True) -> None:
    """``view`` now reads the result of ``select``, computed once into a kept table (``duck.keep``)."""
    point_view(con, view, duck.keep(con, f"_materialized_{view}", select, compressed=compressed))


def point_view(con: duckdb.DuckDBPyConnection, view: str, table: str) -> None:
    """``view`` now reads ``table`` (the result computed for it)."""
    con.execute(f'CREATE OR REPLACE VIEW "{view}" AS SELECT * FROM {table}')
