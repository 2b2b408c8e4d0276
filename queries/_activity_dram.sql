-- _activity_dram: every GPU activity with the DRAM bandwidth it uses when it runs alone.
-- An activity takes the device-wide DRAM rate measured during its signature's isolated instances (nothing else
-- on the device), else the rate measured while one of its instances ran alone for a stretch (_solo_rates), else the
-- isolated rate Nsight Compute measured for its signature (_ncu_demand); a copy
-- without isolated instances is estimated from its bytes (a same-device copy reads and writes them).
-- Activities with neither (no GPU metrics, no profile) count 0.
-- Its SM Issue alone (the issue slots it uses, averaged over every SM) comes the same way, from its isolated
-- instances, else its solo samples; a copy or set uses none (copy engines); a kernel with neither is unknown (NULL).
-- columns:
--   run_id       VARCHAR  run
--   device_id    INTEGER  physical GPU
--   activity_id  BIGINT   activity (_activities)
--   start_ns     BIGINT   start (ns)
--   end_ns       BIGINT   end (ns)
--   dram_pct     DOUBLE   DRAM read + write bandwidth it uses alone (% of peak)
--   working_set_bytes DOUBLE working set of a profiled kernel (bytes, Nsight Compute; NULL otherwise)
--   sm_issue_pct DOUBLE      SM Issue it uses alone (% of peak, averaged over every SM; NULL: unknown)
WITH acts AS (
    SELECT a.run_id, a.device_id, a.activity_id, a.start_ns, a.end_ns, a.dur_ns, a.sig,
           CASE WHEN a.activity <> 'kernel' AND a.dur_ns > 0 AND d.mem_bandwidth_Bps > 0
                THEN 100.0 * a.bytes * (CASE WHEN n.name LIKE '%DtoD%' THEN 2 ELSE 1 END)
                     / (a.dur_ns * 1e-9) / d.mem_bandwidth_Bps END AS estimate,
           a.activity = 'kernel' AS is_kernel, o.overlap_ns = 0 AS alone
    FROM _activity_rows a JOIN _instance_overlap o USING (run_id, device_id, activity_id)
    LEFT JOIN _signatures n USING (sig)
    LEFT JOIN devices d ON d.run_id = a.run_id AND d.device_id = a.device_id
), rates AS (
    -- the median over isolated instances: a rate per instance, not a duration-weighted mean
    SELECT a.run_id, a.device_id, a.sig, median(m.dram_pct) AS dram_pct, median(m.sm_issue_pct) AS sm_issue_pct
    FROM acts a JOIN _instance_metrics m USING (run_id, device_id, activity_id)
    WHERE a.alone AND a.dur_ns > 0 AND (m.dram_pct IS NOT NULL OR m.sm_issue_pct IS NOT NULL) GROUP BY ALL
), profiled AS (
    SELECT run_id, device_id, sig, dram_pct, working_set_bytes FROM _ncu_demand
)
SELECT a.run_id, a.device_id, a.activity_id, a.start_ns, a.end_ns,
       coalesce(r.dram_pct, s.dram_pct, p.dram_pct, a.estimate, 0) AS dram_pct, p.working_set_bytes,
       CASE WHEN a.is_kernel THEN coalesce(r.sm_issue_pct, s.sm_issue_pct) ELSE 0 END AS sm_issue_pct
FROM acts a LEFT JOIN rates r USING (run_id, device_id, sig)
LEFT JOIN _solo_rates s USING (run_id, device_id, sig)
LEFT JOIN profiled p USING (run_id, device_id, sig)
