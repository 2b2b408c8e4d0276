"""Every view of queries/ documents its columns in its header; the header must match what DuckDB says the view is."""

from __future__ import annotations

import pytest
from conftest import H200

import traceql
from traceql.queries_loader import header_columns, query_files


@pytest.fixture(scope="module")
def con():
    return traceql.connect(H200 / "suite")


@pytest.mark.parametrize("name, sql", query_files(), ids=[n for n, _ in query_files()])
def test_header_matches_describe(con, name, sql):
    view = name.removesuffix(".sql")
    assert "-- columns:" in sql, f"{name}: no '-- columns:' header"
    documented = header_columns(sql)
    described = [(r[0], r[1]) for r in con.sql(f'DESCRIBE "{view}"').fetchall()]
    assert [c for c, _ in documented] == [c for c, _ in described], f"{name}: column names or order differ"
    assert documented == described, f"{name}: column types differ"
