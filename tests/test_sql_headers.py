"""Every view of queries/ documents its columns in its header; the header must match what DuckDB says the view is."""

from __future__ import annotations

import re

import pytest
from conftest import H200

import traceql
from traceql.queries_loader import query_files

COLUMN = re.compile(r"^--\s+(\w+)\s+([A-Z][A-Z0-9_\[\]]*)\s")


def _header(sql: str) -> list[tuple[str, str]]:
    lines = sql.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "-- columns:")
    cols = []
    for line in lines[start + 1:]:
        if not line.startswith("--"):
            break
        m = COLUMN.match(line)
        if m:
            cols.append((m.group(1), m.group(2)))
    return cols


@pytest.fixture(scope="module")
def con():
    return traceql.connect(H200 / "suite")


@pytest.mark.parametrize("name, sql", query_files(), ids=[n for n, _ in query_files()])
def test_header_matches_describe(con, name, sql):
    view = name.removesuffix(".sql")
    assert "-- columns:" in sql, f"{name}: no '-- columns:' header"
    documented = _header(sql)
    described = [(r[0], r[1]) for r in con.sql(f'DESCRIBE "{view}"').fetchall()]
    assert [c for c, _ in documented] == [c for c, _ in described], f"{name}: column names or order differ"
    assert documented == described, f"{name}: column types differ"
