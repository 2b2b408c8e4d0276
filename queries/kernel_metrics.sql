-- kernel_metrics: one row per compute kernel instance: GPU metrics averaged over its run time.
-- Empty when the trace was collected without GPU metrics sampling (nsys --gpu-metrics-devices).
-- columns:
--   run_id          VARCHAR  run
--   device_id       INTEGER  physical GPU
--   global_pid      BIGINT   launching process
--   correlation_id  BIGINT   launch correlation id (unique within global_pid)
--   samples         BIGINT   metric samples inside the kernel (0: the sample around it was used)
--   sm_active_pct   DOUBLE   SMs Active (% of peak), device-wide
--   dram_pct        DOUBLE   DRAM read + write bandwidth (% of peak), device-wide
--   gpc_clock_mhz   DOUBLE   GPC clock (MHz)
--   nvlink_pct      DOUBLE   NVLink user data, busier direction (% of peak)
--   pcie_pct        DOUBLE   PCIe, busier direction (% of peak)
WITH inst AS (
    SELECT run_id, device_id, global_pid, correlation_id, start_ns, end_ns FROM kernels WHERE kind = 'compute'
), keys AS (
    SELECT DISTINCT run_id, device_id, key FROM _metric_samples
), ik AS (
    SELECT i.*, k.key FROM inst i JOIN keys k USING (run_id, device_id)
), at_start AS (
    SELECT ik.*, m.cum_value AS v0, m.cum_count AS c0, m.value AS around
    FROM ik ASOF LEFT JOIN _metric_samples m
      ON m.run_id = ik.run_id AND m.device_id = ik.device_id AND m.key = ik.key AND m.ts_ns <= ik.start_ns
), at_end AS (
    SELECT a.*, m.cum_value AS v1, m.cum_count AS c1
    FROM at_start a ASOF LEFT JOIN _metric_samples m
      ON m.run_id = a.run_id AND m.device_id = a.device_id AND m.key = a.key AND m.ts_ns <= a.end_ns
), valued AS (
    SELECT run_id, device_id, global_pid, correlation_id, key,
           coalesce(c1, 0) - coalesce(c0, 0) AS n,
           CASE WHEN coalesce(c1, 0) - coalesce(c0, 0) > 0
                THEN (v1 - coalesce(v0, 0)) / (c1 - coalesce(c0, 0)) ELSE around END AS value
    FROM at_end
)
SELECT run_id, device_id, global_pid, correlation_id, max(n) AS samples,
       max(value) FILTER (key = 'sm_active_pct') AS sm_active_pct,
       max(value) FILTER (key = 'dram_pct') AS dram_pct,
       max(value) FILTER (key = 'gpc_clock_mhz') AS gpc_clock_mhz,
       max(value) FILTER (key = 'nvlink_pct') AS nvlink_pct,
       max(value) FILTER (key = 'pcie_pct') AS pcie_pct
FROM valued GROUP BY ALL
