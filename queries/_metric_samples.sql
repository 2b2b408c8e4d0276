-- _metric_samples: the nsys GPU metrics attribution uses, one row per device and sample time, with running sums.
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
--   cum_sm_active_pct  DOUBLE   running sum of sm_active_pct up to and including this sample
--   cum_dram_pct       DOUBLE   running sum of dram_pct
--   cum_gpc_clock_mhz  DOUBLE   running sum of gpc_clock_mhz
--   cum_nvlink_pct     DOUBLE   running sum of nvlink_pct
--   cum_pcie_pct       DOUBLE   running sum of pcie_pct
--   n_sm_active_pct    BIGINT   running count of samples of sm_active_pct
--   n_dram_pct         BIGINT   running count of samples of dram_pct
--   n_gpc_clock_mhz    BIGINT   running count of samples of gpc_clock_mhz
--   n_nvlink_pct       BIGINT   running count of samples of nvlink_pct
--   n_pcie_pct         BIGINT   running count of samples of pcie_pct
WITH keyed AS (
    SELECT run_id, device_id, ts_ns,
           CASE WHEN metric LIKE 'SMs Active%' THEN 'sm_active_pct'
                WHEN metric LIKE 'DRAM Read Bandwidth%' OR metric LIKE 'DRAM Write Bandwidth%' THEN 'dram_pct'
                WHEN metric LIKE 'GPC Clock Frequency%' THEN 'gpc_clock_mhz'
                WHEN metric LIKE 'NVLink%User Data%' THEN 'nvlink_pct'
                WHEN metric LIKE 'PCIe%Throughput%' THEN 'pcie_pct' END AS key,
           value
    FROM gpu_metrics
), wide AS (
    -- NVLink/PCIe: the busier direction
    SELECT run_id, device_id, ts_ns,
           max(value) FILTER (key = 'sm_active_pct') AS sm_active_pct,
           sum(value) FILTER (key = 'dram_pct') AS dram_pct,
           max(value) FILTER (key = 'gpc_clock_mhz') AS gpc_clock_mhz,
           max(value) FILTER (key = 'nvlink_pct') AS nvlink_pct,
           max(value) FILTER (key = 'pcie_pct') AS pcie_pct
    FROM keyed WHERE key IS NOT NULL GROUP BY run_id, device_id, ts_ns
)
SELECT run_id, device_id, ts_ns, sm_active_pct, dram_pct, gpc_clock_mhz, nvlink_pct, pcie_pct,
       sum(sm_active_pct) OVER w AS cum_sm_active_pct, sum(dram_pct) OVER w AS cum_dram_pct,
       sum(gpc_clock_mhz) OVER w AS cum_gpc_clock_mhz, sum(nvlink_pct) OVER w AS cum_nvlink_pct,
       sum(pcie_pct) OVER w AS cum_pcie_pct,
       count(sm_active_pct) OVER w AS n_sm_active_pct, count(dram_pct) OVER w AS n_dram_pct,
       count(gpc_clock_mhz) OVER w AS n_gpc_clock_mhz, count(nvlink_pct) OVER w AS n_nvlink_pct,
       count(pcie_pct) OVER w AS n_pcie_pct
FROM wide
WINDOW w AS (PARTITION BY run_id, device_id ORDER BY ts_ns ROWS UNBOUNDED PRECEDING)
