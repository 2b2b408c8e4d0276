"""Stage 1 of the attribution: the instances. One row per GPU activity with everything measured about it
(``instance_facts``): its interval, what overlapped it and how many SMs those held, the GPU metrics over it, its
launch context (an NVTX group, by the rule of :mod:`traceql.launch`), and, for a collective matched across ranks, its
wait for the last rank (``_collective_arrivals``), with the waits per device (``collective_waits``, ``rank_waits``).

The views of ``queries/`` up to ``instance_facts`` are plain SQL, except the interval sweeps and what is read beside
them, which the engine (``traceql.engine``) computes exactly in numpy, in one pass per device, into the table
``_instance_parts`` that ``_instance_facts`` derives its columns from; the views it replaces read projections of it.
"""

from __future__ import annotations

import duckdb

from .. import duck, engine
from ..queries_loader import materialize

# computed once, in this order: each is read by several views downstream; the engine's stages replace theirs.
# _collective_arrivals gives the baselines a collective's transfer time (its duration less its wait for other ranks).
# devices and _ncu_demand are small but read by many views: over a store of many runs each read opens a file per run;
# _kernel_sigs is one scan of every kernel, which ncu_match (_ncu_demand) and signatures (_signatures) both read
UPSTREAM = ("devices", "_kernel_sigs", "_ncu_demand", "_activity_rows", "_signatures", "_activity_occurrence",
            "_activity_groups", "_instance_sweeps", "_instance_facts", "_collective_arrivals")
# the waits per collective and per device (the verdict reads them), computed last, as they always were
WAITS = ("collective_waits", "rank_waits")
# the reference SQL of the engine's stages, computed once when prepare(sweeps="sql")
SQL_STAGES = {"_instance_sweeps": ("_activity_steps", "_instance_overlap", "_device_unions", "_metric_samples",
                                   "_instance_metrics", "_solo_rates", "_activity_dram", "_corunner_dram",
                                   "_instance_sweeps")}
NVTX_GROUPS_SQL = """
CREATE OR REPLACE VIEW _activity_groups AS
WITH rule AS (
    SELECT scope, domains FROM _launch_rule
), launches AS (
    -- the launch record's run_id, so that the ranges are matched within the run whatever the join order
    SELECT r.run_id, a.activity_id,
           CASE WHEN rule.scope = 'thread' THEN r.global_tid ELSE r.global_pid END AS scope_id, r.start_ns AS t
    FROM _activity_rows a JOIN runtime_api r
      ON r.run_id = a.run_id AND r.global_pid = a.global_pid AND r.correlation_id = a.correlation_id, rule
), ranges AS (
    SELECT n.run_id, CASE WHEN rule.scope = 'thread' THEN n.global_tid ELSE n.global_pid END AS scope_id,
           n.start_ns, n.end_ns, n.text
    FROM nvtx n, _nvtx_glob g, rule
    WHERE n.event_type IN ('push_pop', 'start_end') AND n.text GLOB g.pattern
      AND (n.domain IS NULL OR list_contains(rule.domains, n.domain))
)
-- the innermost matching range of the user's around the launch (traceql.launch): the latest-starting one (ties
-- broken by text, then by end, so the answer does not depend on the join order)
SELECT l.run_id, l.activity_id, arg_max(r.text, (r.start_ns, r.text, r.end_ns)) AS nvtx,
       max(r.start_ns) AS nvtx_start_ns, arg_max(r.end_ns, (r.start_ns, r.text, r.end_ns)) AS nvtx_end_ns
FROM launches l JOIN ranges r
  ON r.run_id = l.run_id AND r.scope_id = l.scope_id AND r.start_ns <= l.t AND l.t <= r.end_ns
GROUP BY l.run_id, l.activity_id
"""


def group_by_nvtx(con: duckdb.DuckDBPyConnection, pattern: str) -> None:
    """Give each activity the innermost of the user's NVTX ranges around its launch (``traceql.launch``) that
    matches ``pattern`` (a glob)."""
    con.execute("CREATE OR REPLACE TEMP TABLE _nvtx_glob AS SELECT $1::VARCHAR AS pattern", [pattern])
    con.execute(NVTX_GROUPS_SQL)


def prepare(con: duckdb.DuckDBPyConnection, sweeps: str = "engine") -> bool:
    """Compute the instances on ``con`` (after NVTX grouping, if any); ``sweeps="sql"`` evaluates the reference SQL
    of the engine's stages instead (for comparisons). True when the facts are kept in the order of the activities
    and a device's facts fit the engine's windows: the baselines then read them unsorted."""
    # the reference's instance facts (a row of 47 columns per activity) stay uncompressed unless memory is capped:
    # compressing them took longer than computing them (2.3 s against 1.6 s for the 2.2 M activities of a real DDP
    # trace). The engine writes its _instance_parts to a file instead (duck.keep_file)
    plain = () if duck.memory_limit() else ("_instance_facts",)
    for view in UPSTREAM:
        if sweeps == "engine" and view in engine.STAGES:
            engine.STAGES[view](con)
        elif sweeps == "engine" and view == "_instance_facts":
            continue  # a view: its columns derived row by row from the engine's table (_instance_parts)
        else:
            materialize(con, SQL_STAGES.get(view, (view,)), uncompressed=plain)
    # the engine keeps the facts in activity order, which scans return unless the connection turned that off; the
    # baselines then take a device's facts whole, so a device larger than the engine's windows is read sorted instead
    # (a signature's facts at a time)
    return sweeps == "engine" and duck.keeps_order(con) and con.sql(
        "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM _instance_parts GROUP BY run_id, device_id)"
    ).fetchall()[0][0] <= engine.window_rows()


def prepare_waits(con: duckdb.DuckDBPyConnection) -> None:
    """The waits for other ranks per collective and per device (they read the instances alone)."""
    materialize(con, WAITS)
