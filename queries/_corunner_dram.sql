-- _corunner_dram: per GPU activity, the DRAM bandwidth its co-runners use when they run alone, averaged over the
-- time they overlap it (the demand they bring, before any interference), and the working set of its profiled
-- co-runners (Nsight Compute), averaged the same way, and the SM Issue its co-runners use alone, averaged the same
-- way (NULL where one of them has no known SM Issue).
-- columns:
--   run_id          VARCHAR  run
--   device_id       INTEGER  physical GPU
--   activity_id     BIGINT   activity (_activities)
--   own_dram_pct    DOUBLE   the activity's own isolated DRAM rate (% of peak)
--   co_dram_pct     DOUBLE   co-runners' isolated DRAM rate while overlapping it (% of peak)
--   co_kernel_dram_pct DOUBLE the same, of the co-running kernels alone (copies and sets left out: % of peak)
--   co_working_set_bytes DOUBLE summed working sets of profiled co-runners while overlapping it (bytes; NULL if none)
--   co_sm_issue_pct DOUBLE   co-runners' isolated SM Issue while overlapping it (% of peak, averaged over every SM)
WITH dram AS (
    SELECT d.*, CASE WHEN a.activity = 'kernel' THEN d.dram_pct ELSE 0 END AS kernel_dram_pct
    FROM _activity_dram d JOIN _activity_rows a USING (run_id, device_id, activity_id)
), edges AS (
    SELECT run_id, device_id, start_ns AS t, dram_pct AS d, kernel_dram_pct AS k, coalesce(working_set_bytes, 0) AS w,
           (working_set_bytes IS NOT NULL)::INT AS p, coalesce(sm_issue_pct, 0) AS i,
           (sm_issue_pct IS NULL)::INT AS u FROM dram
    UNION ALL
    SELECT run_id, device_id, end_ns AS t, -dram_pct AS d, -kernel_dram_pct AS k, -coalesce(working_set_bytes, 0) AS w,
           -(working_set_bytes IS NOT NULL)::INT AS p, -coalesce(sm_issue_pct, 0) AS i,
           -(sm_issue_pct IS NULL)::INT AS u FROM dram
), deltas AS (
    SELECT run_id, device_id, t, sum(d) AS d, sum(k) AS k, sum(w) AS w, sum(p) AS p, sum(i) AS i, sum(u) AS u
    FROM edges GROUP BY ALL
), levels AS (
    SELECT run_id, device_id, t, sum(d) OVER w AS rate, sum(k) OVER w AS kernel_rate, sum(w) OVER w AS ws,
           sum(p) OVER w AS profiled,
           sum(i) OVER w AS issue, sum(u) OVER w AS unknown,
           coalesce(lead(t) OVER (PARTITION BY run_id, device_id ORDER BY t) - t, 0) AS len
    FROM deltas
    WINDOW w AS (PARTITION BY run_id, device_id ORDER BY t ROWS UNBOUNDED PRECEDING)
), cum AS (
    SELECT run_id, device_id, t,
           coalesce(sum(len * rate) OVER before, 0) AS r,
           coalesce(sum(len * kernel_rate) OVER before, 0) AS rk,
           coalesce(sum(len * ws) OVER before, 0) AS rw,
           -- integral of the number of profiled activities: beyond the activity's own, a profiled co-runner overlapped
           coalesce(sum(len * profiled) OVER before, 0) AS rp,
           coalesce(sum(len * issue) OVER before, 0) AS ri,
           -- integral of the number of activities whose SM Issue is unknown
           coalesce(sum(len * unknown) OVER before, 0) AS ru
    FROM levels
    WINDOW before AS (PARTITION BY run_id, device_id ORDER BY t ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
)
SELECT a.run_id, a.device_id, a.activity_id, a.dram_pct AS own_dram_pct,
       CASE WHEN o.overlap_ns > 0
            THEN greatest(0, (ce.r - cs.r) - a.dram_pct * (a.end_ns - a.start_ns)) / o.overlap_ns END AS co_dram_pct,
       CASE WHEN o.overlap_ns > 0
            THEN greatest(0, (ce.rk - cs.rk) - a.kernel_dram_pct * (a.end_ns - a.start_ns)) / o.overlap_ns
       END AS co_kernel_dram_pct,
       CASE WHEN o.overlap_ns > 0
                 AND (ce.rp - cs.rp) - (a.working_set_bytes IS NOT NULL)::INT * (a.end_ns - a.start_ns) > 0
            THEN greatest(0, (ce.rw - cs.rw) - coalesce(a.working_set_bytes, 0) * (a.end_ns - a.start_ns))
                 / o.overlap_ns
       END AS co_working_set_bytes,
       CASE WHEN o.overlap_ns > 0 AND (ce.ru - cs.ru) - (a.sm_issue_pct IS NULL)::INT * (a.end_ns - a.start_ns) = 0
            THEN greatest(0, (ce.ri - cs.ri) - coalesce(a.sm_issue_pct, 0) * (a.end_ns - a.start_ns)) / o.overlap_ns
       END AS co_sm_issue_pct
FROM dram a
JOIN _instance_overlap o USING (run_id, device_id, activity_id)
JOIN cum cs ON cs.run_id = a.run_id AND cs.device_id = a.device_id AND cs.t = a.start_ns
JOIN cum ce ON ce.run_id = a.run_id AND ce.device_id = a.device_id AND ce.t = a.end_ns
