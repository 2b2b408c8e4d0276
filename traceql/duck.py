"""DuckDB connections that use the CPUs this process may run on.

DuckDB sizes its thread pool from the machine's core count, not from the process's CPU affinity: under
``taskset`` or a batch scheduler's CPU binding (Slurm's ``--cpu-bind``, a container's cpuset) it would start a
thread per core of the host and oversubscribe the few it may use. pyarrow and traceql's own pools already
follow the affinity; every connection traceql opens does too.
"""

from __future__ import annotations

import os

import duckdb


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def connect() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one thread per usable CPU."""
    return duckdb.connect(config={"threads": usable_cpus()})
