"""Nsight Compute reports: isolated-kernel counters for the attribution.

``traceql ingest REPORT.ncu-rep`` reads a report (:mod:`.report`), derives one row per profiled
kernel (:mod:`.derive`) and stores both as a run (:mod:`.ingest`). The view ``ncu_match``
(``queries/ncu_match.sql``) pairs trace kernel signatures with profiled kernels; :func:`demand`
returns it.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

MATCH_LEVELS = ("exact", "name", "unmatched")


def demand(con: duckdb.DuckDBPyConnection, *, matched_only: bool = False) -> pa.Table:
    """Per trace kernel signature: the isolated demand measured by Nsight Compute (view ``ncu_match``).

    ``con`` is a connection from :func:`traceql.connect` over run directories that hold both the
    Nsight Systems runs and the Nsight Compute runs. Keys: run_id, device_id, name, grid, block,
    dynamic_smem_bytes (as in ``kernel_signatures``); ``match`` says how the profiled kernel was found.
    """
    where = "WHERE match <> 'unmatched'" if matched_only else ""
    return con.sql(f"SELECT * FROM ncu_match {where} ORDER BY run_id, device_id, name, grid, block, "
                   "dynamic_smem_bytes").to_arrow_table()
