-- _activity_occurrence: where each activity was launched: the innermost of the user's NVTX ranges (push/pop or
-- start/end) open at the launch in the launching process, or on the launching thread (_launch_rule, traceql.launch),
-- and the activity's occurrence there: 0 for the first launch of its signature inside that range instance, 1 for
-- the second... The same signature at different occurrences of a step is often different work (the same GEMM tile
-- grid over another K; the k-th all-reduce bucket of a backward pass): baselines compare like occurrence with like.
-- Activities launched outside any range, or without a launch record, have no row.
-- columns:
--   run_id          VARCHAR  run
--   activity_id     BIGINT   activity (_activities)
--   scope_id        BIGINT   launching process (scope process) or thread (scope thread)
--   step_start_ns   BIGINT   start of the innermost enclosing NVTX range (ns): the range instance
--   step_text       VARCHAR  that range's text
--   occurrence      BIGINT   launches of the same signature before it inside that range instance
WITH rule AS (
    SELECT scope, domains FROM _launch_rule
), launches AS (
    -- run_id of the launch record (equal to the activity's): whichever join order the planner picks, the ranges are
    -- then matched within the run (a plan matching on the scope alone crossed every run's ranges)
    SELECT r.run_id, a.activity_id, a.sig,
           CASE WHEN rule.scope = 'thread' THEN r.global_tid ELSE r.global_pid END AS scope_id, r.start_ns AS t
    FROM _activity_rows a JOIN runtime_api r
      ON r.run_id = a.run_id AND r.global_pid = a.global_pid AND r.correlation_id = a.correlation_id, rule
), ranges AS (
    SELECT run_id, CASE WHEN rule.scope = 'thread' THEN global_tid ELSE global_pid END AS scope_id, start_ns, end_ns,
           text
    FROM nvtx, rule
    WHERE event_type IN ('push_pop', 'start_end') AND (domain IS NULL OR list_contains(rule.domains, domain))
), enclosing AS (
    SELECT l.run_id, l.activity_id, l.sig, l.scope_id, l.t, max(r.start_ns) AS step_start_ns,
           arg_max(r.text, (r.start_ns, r.text)) AS step_text
    FROM launches l JOIN ranges r
      ON r.run_id = l.run_id AND r.scope_id = l.scope_id AND r.start_ns <= l.t AND l.t <= r.end_ns
    GROUP BY ALL
)
SELECT run_id, activity_id, scope_id, step_start_ns, step_text,
       row_number() OVER (PARTITION BY run_id, scope_id, step_start_ns, sig ORDER BY t, activity_id) - 1
           AS occurrence
FROM enclosing
