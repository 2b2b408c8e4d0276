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
--   sm_issue_pct       DOUBLE   SM Issue: the share of issue slots used, averaged over every SM (% of peak)
WITH names AS (
    SELECT n.metric, arg_min(k.key, k.rank) AS key, arg_min(k.combine, k.rank) AS combine
    FROM (SELECT DISTINCT metric FROM gpu_metrics) n JOIN _metric_keys k ON n.metric LIKE k.pattern
    GROUP BY n.metric
), keyed AS (  -- one value per sample and key: its metrics combined as _metric_keys says
    SELECT m.run_id, m.device_id, m.ts_ns, n.key,
           CASE WHEN any_value(n.combine) = 'sum' THEN sum(m.value) ELSE max(m.value) END AS value
    FROM gpu_metrics m JOIN names n USING (metric)
    GROUP BY m.run_id, m.device_id, m.ts_ns, n.key
)
SELECT run_id, device_id, ts_ns,
       any_value(value) FILTER (key = 'sm_active_pct')::DOUBLE AS sm_active_pct,
       any_value(value) FILTER (key = 'dram_pct')::DOUBLE AS dram_pct,
       any_value(value) FILTER (key = 'gpc_clock_mhz')::DOUBLE AS gpc_clock_mhz,
       any_value(value) FILTER (key = 'nvlink_pct')::DOUBLE AS nvlink_pct,
       any_value(value) FILTER (key = 'pcie_pct')::DOUBLE AS pcie_pct,
       any_value(value) FILTER (key = 'sm_issue_pct')::DOUBLE AS sm_issue_pct
FROM keyed GROUP BY run_id, device_id, ts_ns
