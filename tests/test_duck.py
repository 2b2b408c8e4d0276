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
