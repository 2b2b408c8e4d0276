-- _solo_rates: per signature, the DRAM rate and SM Issue measured while one of its instances ran with nothing else on
-- the device:
-- the median of the GPU-metric samples whose two neighbours lie in one stretch where that instance was the only
-- activity (so the sample stands for that stretch whichever part of the sampling period it covers). A kernel that
-- never ran alone as a whole (a long co-runner that other kernels overlap for part of its run) shows its demand there;
-- _activity_dram takes each where no isolated instance was measured. (traceql.engine.sweeps.solo_samples computes the
-- same in numpy.)
-- columns:
--   run_id       VARCHAR  run
--   device_id    INTEGER  physical GPU
--   sig          UBIGINT  signature id
--   dram_pct     DOUBLE   DRAM read + write bandwidth (% of peak), median over its solo samples
--   samples      BIGINT   solo samples with a DRAM rate
--   sm_issue_pct DOUBLE   SM Issue (% of peak, averaged over every SM), median over its solo samples
WITH edges AS (
    SELECT run_id, device_id, start_ns AS t, 1 AS d, activity_id AS a FROM _activity_rows
    UNION ALL
    SELECT run_id, device_id, end_ns AS t, -1 AS d, -activity_id AS a FROM _activity_rows
), deltas AS (
    SELECT run_id, device_id, t, sum(d) AS d, sum(a) AS a FROM edges GROUP BY ALL
), segments AS (
    -- on a segment where one activity runs, the sum of the ids of those running is its id
    SELECT run_id, device_id, t AS seg_start, lead(t) OVER (PARTITION BY run_id, device_id ORDER BY t) AS seg_end,
           sum(d) OVER w AS running, sum(a) OVER w AS who
    FROM deltas
    WINDOW w AS (PARTITION BY run_id, device_id ORDER BY t ROWS UNBOUNDED PRECEDING)
), samples AS (
    SELECT run_id, device_id, ts_ns, dram_pct, sm_issue_pct, lag(ts_ns) OVER w AS prev_ns, lead(ts_ns) OVER w AS next_ns
    FROM _metric_wide
    WINDOW w AS (PARTITION BY run_id, device_id ORDER BY ts_ns)
), solo AS (
    SELECT s.run_id, s.device_id, g.who AS activity_id, s.dram_pct, s.sm_issue_pct
    FROM samples s ASOF JOIN segments g
      ON g.run_id = s.run_id AND g.device_id = s.device_id AND g.seg_start <= s.prev_ns
    WHERE g.running = 1 AND s.next_ns <= g.seg_end AND (s.dram_pct IS NOT NULL OR s.sm_issue_pct IS NOT NULL)
)
SELECT s.run_id, s.device_id, a.sig, median(s.dram_pct::DOUBLE) AS dram_pct, count(s.dram_pct) AS samples,
       median(s.sm_issue_pct::DOUBLE) AS sm_issue_pct
FROM solo s JOIN _activity_rows a USING (run_id, device_id, activity_id)
GROUP BY ALL
