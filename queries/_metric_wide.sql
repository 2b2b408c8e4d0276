-- _metric_wide: the nsys GPU metrics attribution uses, one row per device and sample time (wide).
-- columns:
--   run_id             VARCHAR  run
--   device_id          INTEGER  physical GPU
--   ts_ns              BIGINT   sample time (ns)
--   sm_active_pct      DOUBLE   SMs Active (% of peak), device-wide
--   dram_pct           DOUBLE   DRAM read + write bandwidth (% of peak): they share the interface
--   gpc_clock_mhz      DOUBLE   GPC clock (MHz)
--   nvlink_pct         DOUBLE   NVLink user data, busier direction (% of peak)
--   pcie_pct           DOUBLE   PCIe throughput, busier direction (% of peak)
WITH keyed AS (
    SELECT run_id, device_id, ts_ns,
           CASE WHEN metric LIKE 'SMs Active%' THEN 'sm_active_pct'
                WHEN metric LIKE 'DRAM Read Bandwidth%' OR metric LIKE 'DRAM Write Bandwidth%' THEN 'dram_pct'
                WHEN metric LIKE 'GPC Clock Frequency%' THEN 'gpc_clock_mhz'
                WHEN metric LIKE 'NVLink%User Data%' THEN 'nvlink_pct'
                WHEN metric LIKE 'PCIe%Throughput%' THEN 'pcie_pct' END AS key,
           value
    FROM gpu_metrics
)
-- NVLink/PCIe: the busier direction
SELECT run_id, device_id, ts_ns,
       max(value) FILTER (key = 'sm_active_pct')::DOUBLE AS sm_active_pct,
       sum(value) FILTER (key = 'dram_pct')::DOUBLE AS dram_pct,
       max(value) FILTER (key = 'gpc_clock_mhz')::DOUBLE AS gpc_clock_mhz,
       max(value) FILTER (key = 'nvlink_pct')::DOUBLE AS nvlink_pct,
       max(value) FILTER (key = 'pcie_pct')::DOUBLE AS pcie_pct
FROM keyed WHERE key IS NOT NULL GROUP BY run_id, device_id, ts_ns
