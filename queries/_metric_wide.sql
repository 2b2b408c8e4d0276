-- _metric_wide: the nsys GPU metrics attribution uses, one row per device and sample time (wide). This SQL is the
-- reference, over the long view: where the store holds GPU metrics (stored wide), the view is replaced when the store
-- is opened by a projection of their columns that _metric_keys names (traceql.queries_loader.metric_projection).
-- columns:
--   run_id             VARCHAR  run
--   device_id          INTEGER  physical GPU
--   ts_ns              BIGINT   sample time (ns)
--   sm_active_pct      DOUBLE   SMs Active (% of peak), device-wide
--   dram_pct           DOUBLE   DRAM read + write bandwidth (% of peak): they share the interface
--   gpc_clock_mhz      DOUBLE   GPC clock (MHz)
--   nvlink_pct         DOUBLE   NVLink user data, busier direction (% of peak)
--   pcie_pct           DOUBLE   PCIe throughput, busier direction (% of peak)
WITH names AS (
    SELECT n.metric, arg_min(k.key, k.rank) AS key, arg_min(k.combine, k.rank) AS combine
    FROM (SELECT DISTINCT metric FROM gpu_metrics) n JOIN _metric_keys k ON n.metric LIKE k.pattern
    GROUP BY n.metric
), keyed AS (
    SELECT m.run_id, m.device_id, m.ts_ns, n.key, n.combine, m.value
    FROM gpu_metrics m JOIN names n USING (metric)
)
SELECT run_id, device_id, ts_ns,
       CASE WHEN any_value(combine) FILTER (key = 'sm_active_pct') = 'sum'
            THEN sum(value) FILTER (key = 'sm_active_pct')
            ELSE max(value) FILTER (key = 'sm_active_pct') END::DOUBLE AS sm_active_pct,
       CASE WHEN any_value(combine) FILTER (key = 'dram_pct') = 'sum'
            THEN sum(value) FILTER (key = 'dram_pct')
            ELSE max(value) FILTER (key = 'dram_pct') END::DOUBLE AS dram_pct,
       CASE WHEN any_value(combine) FILTER (key = 'gpc_clock_mhz') = 'sum'
            THEN sum(value) FILTER (key = 'gpc_clock_mhz')
            ELSE max(value) FILTER (key = 'gpc_clock_mhz') END::DOUBLE AS gpc_clock_mhz,
       CASE WHEN any_value(combine) FILTER (key = 'nvlink_pct') = 'sum'
            THEN sum(value) FILTER (key = 'nvlink_pct')
            ELSE max(value) FILTER (key = 'nvlink_pct') END::DOUBLE AS nvlink_pct,
       CASE WHEN any_value(combine) FILTER (key = 'pcie_pct') = 'sum'
            THEN sum(value) FILTER (key = 'pcie_pct')
            ELSE max(value) FILTER (key = 'pcie_pct') END::DOUBLE AS pcie_pct
FROM keyed GROUP BY run_id, device_id, ts_ns
