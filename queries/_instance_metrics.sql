-- _instance_metrics: per GPU activity (every kernel, copy and set), the nsys GPU metrics averaged over its run time.
-- Samples strictly after the start and up to the end count; an activity shorter than one sampling period takes the
-- sample around it. No rows for devices sampled without GPU metrics (nsys --gpu-metrics-devices).
-- columns:
--   run_id          VARCHAR  run
--   device_id       INTEGER  physical GPU
--   activity_id     BIGINT   activity (_activities)
--   samples         BIGINT   metric samples inside the activity (0: the sample around it was used)
--   sm_active_pct   DOUBLE   SMs Active (% of peak), device-wide
--   dram_pct        DOUBLE   DRAM read + write bandwidth (% of peak), device-wide
--   gpc_clock_mhz   DOUBLE   GPC clock (MHz)
--   nvlink_pct      DOUBLE   NVLink user data, busier direction (% of peak)
--   pcie_pct        DOUBLE   PCIe, busier direction (% of peak)
--   sm_issue_pct    DOUBLE   SM Issue: the share of issue slots used, averaged over every SM (% of peak)
WITH devices_sampled AS (
    SELECT DISTINCT run_id, device_id FROM _metric_samples
), inst AS (
    SELECT a.run_id, a.device_id, a.activity_id, a.start_ns, a.end_ns
    FROM _activity_rows a JOIN devices_sampled USING (run_id, device_id)
), at_start AS (
    SELECT i.*,
           m.cum_sm_active_pct AS v0_sm_active_pct, m.n_sm_active_pct AS c0_sm_active_pct,
           m.sm_active_pct AS around_sm_active_pct,
           m.cum_dram_pct AS v0_dram_pct, m.n_dram_pct AS c0_dram_pct,
           m.dram_pct AS around_dram_pct,
           m.cum_gpc_clock_mhz AS v0_gpc_clock_mhz, m.n_gpc_clock_mhz AS c0_gpc_clock_mhz,
           m.gpc_clock_mhz AS around_gpc_clock_mhz,
           m.cum_nvlink_pct AS v0_nvlink_pct, m.n_nvlink_pct AS c0_nvlink_pct,
           m.nvlink_pct AS around_nvlink_pct,
           m.cum_pcie_pct AS v0_pcie_pct, m.n_pcie_pct AS c0_pcie_pct,
           m.pcie_pct AS around_pcie_pct,
           m.cum_sm_issue_pct AS v0_sm_issue_pct, m.n_sm_issue_pct AS c0_sm_issue_pct,
           m.sm_issue_pct AS around_sm_issue_pct
    FROM inst i ASOF LEFT JOIN _metric_samples m
      ON m.run_id = i.run_id AND m.device_id = i.device_id AND m.ts_ns <= i.start_ns
), at_end AS (
    SELECT a.*,
           m.cum_sm_active_pct AS v1_sm_active_pct, m.n_sm_active_pct AS c1_sm_active_pct,
           m.cum_dram_pct AS v1_dram_pct, m.n_dram_pct AS c1_dram_pct,
           m.cum_gpc_clock_mhz AS v1_gpc_clock_mhz, m.n_gpc_clock_mhz AS c1_gpc_clock_mhz,
           m.cum_nvlink_pct AS v1_nvlink_pct, m.n_nvlink_pct AS c1_nvlink_pct,
           m.cum_pcie_pct AS v1_pcie_pct, m.n_pcie_pct AS c1_pcie_pct,
           m.cum_sm_issue_pct AS v1_sm_issue_pct, m.n_sm_issue_pct AS c1_sm_issue_pct
    FROM at_start a ASOF LEFT JOIN _metric_samples m
      ON m.run_id = a.run_id AND m.device_id = a.device_id AND m.ts_ns <= a.end_ns
), counted AS (
    -- samples of each metric inside the kernel: running count at its end minus at its start
    SELECT *,
           coalesce(c1_sm_active_pct, 0) - coalesce(c0_sm_active_pct, 0) AS n_sm_active_pct,
           coalesce(c1_dram_pct, 0) - coalesce(c0_dram_pct, 0) AS n_dram_pct,
           coalesce(c1_gpc_clock_mhz, 0) - coalesce(c0_gpc_clock_mhz, 0) AS n_gpc_clock_mhz,
           coalesce(c1_nvlink_pct, 0) - coalesce(c0_nvlink_pct, 0) AS n_nvlink_pct,
           coalesce(c1_pcie_pct, 0) - coalesce(c0_pcie_pct, 0) AS n_pcie_pct,
           coalesce(c1_sm_issue_pct, 0) - coalesce(c0_sm_issue_pct, 0) AS n_sm_issue_pct
    FROM at_end
)
SELECT run_id, device_id, activity_id,
       greatest(n_sm_active_pct, n_dram_pct, n_gpc_clock_mhz,
                n_nvlink_pct, n_pcie_pct, n_sm_issue_pct) AS samples,
       CASE WHEN n_sm_active_pct > 0 THEN (v1_sm_active_pct - coalesce(v0_sm_active_pct, 0)) / n_sm_active_pct
            ELSE around_sm_active_pct END AS sm_active_pct,
       CASE WHEN n_dram_pct > 0 THEN (v1_dram_pct - coalesce(v0_dram_pct, 0)) / n_dram_pct
            ELSE around_dram_pct END AS dram_pct,
       CASE WHEN n_gpc_clock_mhz > 0 THEN (v1_gpc_clock_mhz - coalesce(v0_gpc_clock_mhz, 0)) / n_gpc_clock_mhz
            ELSE around_gpc_clock_mhz END AS gpc_clock_mhz,
       CASE WHEN n_nvlink_pct > 0 THEN (v1_nvlink_pct - coalesce(v0_nvlink_pct, 0)) / n_nvlink_pct
            ELSE around_nvlink_pct END AS nvlink_pct,
       CASE WHEN n_pcie_pct > 0 THEN (v1_pcie_pct - coalesce(v0_pcie_pct, 0)) / n_pcie_pct
            ELSE around_pcie_pct END AS pcie_pct,
       CASE WHEN n_sm_issue_pct > 0 THEN (v1_sm_issue_pct - coalesce(v0_sm_issue_pct, 0)) / n_sm_issue_pct
            ELSE around_sm_issue_pct END AS sm_issue_pct
FROM counted
