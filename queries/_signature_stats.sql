-- _signature_stats: per (sub-)signature group, baseline and overlapped durations with intervals (traceql.attribution.baselines;
-- an error to read until computed, see _instance_baselines).
-- columns:
--   group_id       BIGINT   group
--   run_id         VARCHAR  run
--   device_id      INTEGER  physical GPU
--   nvtx           VARCHAR  NVTX group (NULL unless grouping by NVTX)
--   sig            UBIGINT  signature id (_activities)
--   mode           BIGINT   duration mode (0 = shortest) when the signature was split, else NULL
--   split          VARCHAR  duration mode when the signature's isolated durations were a mixture, else NULL
--   n              BIGINT   instances
--   n_overlapped   BIGINT   instances overlapped by another activity
--   n_isolated     BIGINT   isolated instances in the trace
--   t0_ns          DOUBLE   baseline duration, median (ns)
--   t0_lo_ns       DOUBLE   its 95% interval, lower bound (ns)
--   t0_hi_ns       DOUBLE   its 95% interval, upper bound (ns)
--   t0_spread      DOUBLE   baseline interquartile range / median
--   t1_ns          DOUBLE   overlapped duration, median (ns)
--   t1_lo_ns       DOUBLE   its 95% interval, lower bound (ns)
--   t1_hi_ns       DOUBLE   its 95% interval, upper bound (ns)
--   slowdown       DOUBLE   t1/t0 - 1 (medians), or the median per-instance ratio - 1 under a drifting baseline
--   slowdown_lo    DOUBLE   its 95% interval, lower bound
--   slowdown_hi    DOUBLE   its 95% interval, upper bound
--   significant    BOOLEAN  the interval excludes 0 and |slowdown| >= 1%
--   baseline       VARCHAR  isolated, isolated nearest in time, baseline run, ncu, or NULL
--   drift_tau      DOUBLE   Kendall tau of the isolated durations against time
--   drift_p        DOUBLE   its Mann-Kendall p-value
--   drift          DOUBLE   Theil-Sen change of the isolated durations over their span / median
--   baseline_drift BOOLEAN  the isolated durations drift (p < 0.01 and |drift| >= 1%)
--   conflated      BOOLEAN  isolated durations are a mixture that could not be split: left out of aggregates
--   note           VARCHAR  why a number is missing or left out
--   dram_pct_iso   DOUBLE   DRAM bandwidth (% of peak), median over the isolated instances of its baseline pool
--   gpc_clock_mhz_iso DOUBLE   GPC clock (MHz), median over the isolated instances of its baseline pool
--   cycles_iso     DOUBLE   duration in clock cycles, median over the isolated instances of its baseline pool
--   sm_active_pct_iso DOUBLE   SMs Active (%), median over the isolated instances of its baseline pool
--   power_w_iso    DOUBLE   NVML power (W), median over the isolated instances of its baseline pool
--   sm_issue_pct_iso DOUBLE   SM Issue (% of peak, averaged over every SM), median over the isolated instances of
--                  its baseline pool
--   dram_pct_ovl   DOUBLE   DRAM bandwidth (% of peak), median over its overlapped instances
--   gpc_clock_mhz_ovl DOUBLE   GPC clock (MHz), median over its overlapped instances
--   cycles_ovl     DOUBLE   duration in clock cycles, median over its overlapped instances
--   sm_active_pct_ovl DOUBLE   SMs Active (%), median over its overlapped instances
--   nvlink_pct_ovl DOUBLE   NVLink (% of peak), median over its overlapped instances
--   pcie_pct_ovl   DOUBLE   PCIe (% of peak), median over its overlapped instances
--   power_w_ovl    DOUBLE   NVML power (W), median over its overlapped instances
SELECT NULL::BIGINT AS group_id, NULL::VARCHAR AS run_id, NULL::INTEGER AS device_id, NULL::VARCHAR AS nvtx,
       NULL::UBIGINT AS sig, NULL::BIGINT AS mode, NULL::VARCHAR AS split, NULL::BIGINT AS n,
       NULL::BIGINT AS n_overlapped, NULL::BIGINT AS n_isolated, NULL::DOUBLE AS t0_ns, NULL::DOUBLE AS t0_lo_ns,
       NULL::DOUBLE AS t0_hi_ns, NULL::DOUBLE AS t0_spread, NULL::DOUBLE AS t1_ns, NULL::DOUBLE AS t1_lo_ns,
       NULL::DOUBLE AS t1_hi_ns, NULL::DOUBLE AS slowdown, NULL::DOUBLE AS slowdown_lo, NULL::DOUBLE AS slowdown_hi,
       NULL::BOOLEAN AS significant, NULL::VARCHAR AS baseline, NULL::DOUBLE AS drift_tau, NULL::DOUBLE AS drift_p,
       NULL::DOUBLE AS drift, NULL::BOOLEAN AS baseline_drift, NULL::BOOLEAN AS conflated, NULL::VARCHAR AS note,
       NULL::DOUBLE AS dram_pct_iso, NULL::DOUBLE AS gpc_clock_mhz_iso, NULL::DOUBLE AS cycles_iso,
       NULL::DOUBLE AS sm_active_pct_iso, NULL::DOUBLE AS power_w_iso, NULL::DOUBLE AS sm_issue_pct_iso,
       NULL::DOUBLE AS dram_pct_ovl,
       NULL::DOUBLE AS gpc_clock_mhz_ovl, NULL::DOUBLE AS cycles_ovl, NULL::DOUBLE AS sm_active_pct_ovl,
       NULL::DOUBLE AS nvlink_pct_ovl, NULL::DOUBLE AS pcie_pct_ovl, NULL::DOUBLE AS power_w_ovl
-- before prepare() a read is an error, never an empty table that would read as 'no baselines'
WHERE error('_signature_stats: computed by the attribution; call traceql.attribution.prepare(con) first (traceql attribute, report and sql do)') IS NULL
