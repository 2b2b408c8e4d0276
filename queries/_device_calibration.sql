-- _device_calibration: per device, the limits the trace itself shows. DRAM saturation is the highest sustained
-- rate seen: the largest median DRAM rate over the isolated instances of a baseline pool that each span 5 or more
-- metric samples, never below _thresholds.dram_sat_floor_pct (overlapped instances are left out: the prediction they
-- feed must not depend on the windows of the durations it predicts). The DRAM rate per SM is the
-- largest median of isolated instances divided by the SMs the signature's CTAs occupy: what one SM can pull, for
-- the roofline of bandwidth-bound kernels.
-- columns:
--   run_id             VARCHAR  run
--   device_id          INTEGER  physical GPU
--   sm_count           INTEGER  SMs on the device
--   dram_sat_pct       DOUBLE   DRAM saturation (% of peak)
--   dram_per_sm_pct    DOUBLE   highest isolated DRAM rate per occupied SM (% of peak per SM)
WITH grouped AS (
    -- by baseline pool, not NVTX group: the calibration must not depend on how rows are grouped
    SELECT i.run_id, i.device_id, b.pool_id, i.overlap_ns = 0 AS alone, median(i.dram_pct) AS dram_pct,
           any_value(least(coalesce(i.sm_count, i.ctas), i.ctas)) AS sms_used, any_value(i.activity) AS activity
    FROM instance_facts i JOIN _instance_baselines b USING (run_id, activity_id)
    WHERE i.samples >= 5 AND i.dram_pct IS NOT NULL AND i.overlap_ns = 0
    GROUP BY ALL
), per_device AS (
    SELECT run_id, device_id, max(dram_pct) AS dram_high_pct,
           max(dram_pct / sms_used) FILTER (alone AND activity = 'kernel' AND sms_used > 0) AS dram_per_sm_pct
    FROM grouped GROUP BY ALL
)
SELECT d.run_id, d.device_id, d.sm_count,
       greatest(coalesce(p.dram_high_pct, 0), t.dram_sat_floor_pct) AS dram_sat_pct,
       coalesce(p.dram_per_sm_pct, greatest(coalesce(p.dram_high_pct, 0), t.dram_sat_floor_pct) / d.sm_count)
           AS dram_per_sm_pct
FROM devices d LEFT JOIN per_device p USING (run_id, device_id) CROSS JOIN _thresholds t
