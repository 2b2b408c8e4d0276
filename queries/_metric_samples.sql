-- _metric_samples: the nsys GPU metrics attribution uses, under stable keys, with running sums.
-- A kernel's average of a metric is (sum at its end - sum at its start) / (count difference),
-- found with two ASOF joins; a kernel shorter than one sampling period takes the sample around it.
-- columns:
--   run_id     VARCHAR  run
--   device_id  INTEGER  physical GPU
--   key        VARCHAR  sm_active_pct, dram_pct (read + write), gpc_clock_mhz, nvlink_pct, pcie_pct
--   ts_ns      BIGINT   sample time (ns)
--   value      DOUBLE   sample value (percent of peak, or MHz)
--   cum_value  DOUBLE   running sum of value up to and including this sample
--   cum_count  BIGINT   running count of samples up to and including this sample
WITH keyed AS (
    SELECT run_id, device_id, ts_ns,
           CASE WHEN metric LIKE 'SMs Active%' THEN 'sm_active_pct'
                WHEN metric LIKE 'DRAM Read Bandwidth%' OR metric LIKE 'DRAM Write Bandwidth%' THEN 'dram_pct'
                WHEN metric LIKE 'GPC Clock Frequency%' THEN 'gpc_clock_mhz'
                WHEN metric LIKE 'NVLink%User Data%' THEN 'nvlink_pct'
                WHEN metric LIKE 'PCIe%Throughput%' THEN 'pcie_pct' END AS key,
           value
    FROM gpu_metrics
), per_sample AS (
    -- read and write share the DRAM interface: add them; NVLink/PCIe: the busier direction
    SELECT run_id, device_id, key, ts_ns,
           CASE WHEN any_value(key) = 'dram_pct' THEN sum(value) ELSE max(value) END AS value
    FROM keyed WHERE key IS NOT NULL GROUP BY run_id, device_id, key, ts_ns
)
SELECT run_id, device_id, key, ts_ns, value,
       sum(value) OVER w AS cum_value, count(*) OVER w AS cum_count
FROM per_sample
WINDOW w AS (PARTITION BY run_id, device_id, key ORDER BY ts_ns ROWS UNBOUNDED PRECEDING)
