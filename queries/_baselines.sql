-- _baselines: isolated baseline of each kernel signature: its instances that nothing overlapped.
-- traceql.attribute replaces this view when a separate baseline run is given (--baseline).
-- columns:
--   run_id              VARCHAR  run
--   device_id           INTEGER  physical GPU
--   name                VARCHAR  demangled kernel name
--   grid                VARCHAR  grid as XxYxZ
--   block               VARCHAR  block as XxYxZ
--   dynamic_smem_bytes  BIGINT   dynamic shared memory (bytes)
--   n_isolated          BIGINT   instances with no co-runner
--   t0_ns               DOUBLE   median duration of those (ns)
--   t0_spread           DOUBLE   their interquartile range / median
--   sm_active_pct_iso   DOUBLE   SMs Active during them (%), duration-weighted
--   dram_pct_iso        DOUBLE   DRAM bandwidth during them (% of peak), duration-weighted
--   gpc_clock_mhz_iso   DOUBLE   GPC clock during them (MHz), duration-weighted
SELECT run_id, device_id, name, grid, block, dynamic_smem_bytes,
       count(*) AS n_isolated, median(dur_ns)::DOUBLE AS t0_ns,
       (quantile_cont(dur_ns, 0.75) - quantile_cont(dur_ns, 0.25)) / median(dur_ns) AS t0_spread,
       sum(sm_active_pct * dur_ns) / sum(dur_ns) FILTER (sm_active_pct IS NOT NULL) AS sm_active_pct_iso,
       sum(dram_pct * dur_ns) / sum(dur_ns) FILTER (dram_pct IS NOT NULL) AS dram_pct_iso,
       sum(gpc_clock_mhz * dur_ns) / sum(dur_ns) FILTER (gpc_clock_mhz IS NOT NULL) AS gpc_clock_mhz_iso
FROM kernel_instances
WHERE overlap_ns = 0 AND dur_ns > 0
GROUP BY ALL
