-- timeline_segments: per device, the maximal intervals during which compute kernels ran alone, communication ran
-- alone, or both ran together (the picture of how well communication was hidden). Gaps with neither are left out;
-- copies and sets that are not peer-to-peer count as neither.
-- columns:
--   run_id     VARCHAR  run
--   device_id  INTEGER  physical GPU
--   state      VARCHAR  compute (no communication), comm (exposed communication) or overlap (both)
--   start_ns   BIGINT   segment start (ns)
--   end_ns     BIGINT   segment end (ns)
--   dur_ns     BIGINT   end_ns - start_ns (ns)
WITH edges AS (
    SELECT run_id, device_id, start_ns AS t, 1 AS sign, corunner_kind FROM _activity_rows
    WHERE corunner_kind IN ('comm', 'compute')
    UNION ALL
    SELECT run_id, device_id, end_ns AS t, -1 AS sign, corunner_kind FROM _activity_rows
    WHERE corunner_kind IN ('comm', 'compute')
), deltas AS (
    SELECT run_id, device_id, t, sum(sign * (corunner_kind = 'comm')::INT) AS d_comm,
           sum(sign * (corunner_kind = 'compute')::INT) AS d_comp
    FROM edges GROUP BY ALL
), levels AS (
    SELECT run_id, device_id, t, lead(t) OVER (PARTITION BY run_id, device_id ORDER BY t) AS t_next,
           CASE WHEN sum(d_comm) OVER w > 0 AND sum(d_comp) OVER w > 0 THEN 'overlap'
                WHEN sum(d_comm) OVER w > 0 THEN 'comm'
                WHEN sum(d_comp) OVER w > 0 THEN 'compute' END AS state
    FROM deltas
    WINDOW w AS (PARTITION BY run_id, device_id ORDER BY t ROWS UNBOUNDED PRECEDING)
), runs_of_state AS (  -- consecutive steps of one state form one segment
    SELECT *, sum(new_segment) OVER (PARTITION BY run_id, device_id ORDER BY t) AS segment
    FROM (SELECT *, (state IS DISTINCT FROM lag(state) OVER (PARTITION BY run_id, device_id ORDER BY t))::INT
                    AS new_segment
          FROM levels)
)
SELECT run_id, device_id, any_value(state) AS state, min(t)::BIGINT AS start_ns, max(t_next)::BIGINT AS end_ns,
       (max(t_next) - min(t))::BIGINT AS dur_ns
FROM runs_of_state
WHERE state IS NOT NULL AND t_next IS NOT NULL
GROUP BY run_id, device_id, segment
