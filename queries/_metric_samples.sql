-- _metric_samples: the GPU metrics of _metric_wide with running sums (reference SQL of the engine's sample means).
-- A kernel's average of a metric is (sum at its end - sum at its start) / (count difference), found with two ASOF
-- joins; a kernel shorter than one sampling period takes the sample around it. One row per sample time (not per
-- metric) keeps those joins to two per kernel whatever the number of metrics.
-- columns:
--   run_id             VARCHAR  run
--   device_id          INTEGER  physical GPU
--   ts_ns              BIGINT   sample time (ns)
--   sm_active_pct      DOUBLE   SMs Active (% of peak), device-wide
--   dram_pct           DOUBLE   DRAM read + write bandwidth (% of peak): they share the interface
--   gpc_clock_mhz      DOUBLE   GPC clock (MHz)
--   nvlink_pct         DOUBLE   NVLink user data, busier direction (% of peak)
--   pcie_pct           DOUBLE   PCIe throughput, busier direction (% of peak)
--   sm_issue_pct       DOUBLE   SM Issue, averaged over every SM (% of peak)
--   cum_sm_active_pct  DOUBLE   running sum of sm_active_pct up to and including this sample
--   cum_dram_pct       DOUBLE   running sum of dram_pct
--   cum_gpc_clock_mhz  DOUBLE   running sum of gpc_clock_mhz
--   cum_nvlink_pct     DOUBLE   running sum of nvlink_pct
--   cum_pcie_pct       DOUBLE   running sum of pcie_pct
--   cum_sm_issue_pct   DOUBLE   running sum of sm_issue_pct
--   n_sm_active_pct    BIGINT   running count of samples of sm_active_pct
--   n_dram_pct         BIGINT   running count of samples of dram_pct
--   n_gpc_clock_mhz    BIGINT   running count of samples of gpc_clock_mhz
--   n_nvlink_pct       BIGINT   running count of samples of nvlink_pct
--   n_pcie_pct         BIGINT   running count of samples of pcie_pct
--   n_sm_issue_pct     BIGINT   running count of samples of sm_issue_pct
SELECT run_id, device_id, ts_ns, sm_active_pct, dram_pct, gpc_clock_mhz, nvlink_pct, pcie_pct, sm_issue_pct,
       sum(sm_active_pct) OVER w AS cum_sm_active_pct, sum(dram_pct) OVER w AS cum_dram_pct,
       sum(gpc_clock_mhz) OVER w AS cum_gpc_clock_mhz, sum(nvlink_pct) OVER w AS cum_nvlink_pct,
       sum(pcie_pct) OVER w AS cum_pcie_pct, sum(sm_issue_pct) OVER w AS cum_sm_issue_pct,
       count(sm_active_pct) OVER w AS n_sm_active_pct, count(dram_pct) OVER w AS n_dram_pct,
       count(gpc_clock_mhz) OVER w AS n_gpc_clock_mhz, count(nvlink_pct) OVER w AS n_nvlink_pct,
       count(pcie_pct) OVER w AS n_pcie_pct, count(sm_issue_pct) OVER w AS n_sm_issue_pct
FROM _metric_wide
WINDOW w AS (PARTITION BY run_id, device_id ORDER BY ts_ns ROWS UNBOUNDED PRECEDING)
