-- kernel_signatures: per (sub-)signature group of GPU activity — kernels of every kind, copies and sets; a
-- signature whose isolated durations mix different work is split into duration modes by launch context — t0,
-- the overlapped duration t1, each with an interval, and the evidence attribution weighs. Every per-instance
-- rate (DRAM, clock, SMs Active) is a median over instances; overlap and SM shares are time integrals.
-- columns:
--   run_id              VARCHAR  run
--   device_id           INTEGER  physical GPU
--   group_id            BIGINT   group (_signature_stats)
--   nvtx                VARCHAR  NVTX group (NULL unless grouping by NVTX)
--   activity            VARCHAR  kernel, memcpy or memset
--   kind                VARCHAR  compute, comm, memory, other, copy: a label only
--   name                VARCHAR  demangled kernel name, or [CUDA memcpy KIND] / [CUDA memset]
--   short_name          VARCHAR  base function name
--   grid                VARCHAR  grid as XxYxZ
--   block               VARCHAR  block as XxYxZ
--   dynamic_smem_bytes  BIGINT   dynamic shared memory (bytes)
--   bytes               BIGINT   bytes moved or set (copies and sets)
--   mode                BIGINT   duration mode (0 = shortest) when the signature was split, else NULL
--   split               VARCHAR  duration mode when the signature was split, else NULL
--   ctas                BIGINT   CTAs in the grid
--   occupancy           BIGINT   CTAs per SM the launch configuration allows
--   sm_count            INTEGER  SMs on the device
--   n                   BIGINT   instances
--   n_overlapped        BIGINT   instances overlapped by another activity
--   n_isolated          BIGINT   isolated instances
--   t0_ns               DOUBLE   baseline: median duration (ns)
--   t0_lo_ns            DOUBLE   its 95% interval, lower bound (ns)
--   t0_hi_ns            DOUBLE   its 95% interval, upper bound (ns)
--   t0_spread           DOUBLE   baseline interquartile range / median
--   t1_ns               DOUBLE   median duration of the overlapped instances (ns)
--   t1_lo_ns            DOUBLE   its 95% interval, lower bound (ns)
--   t1_hi_ns            DOUBLE   its 95% interval, upper bound (ns)
--   sum_t1_ns           BIGINT   total time of the overlapped instances (ns; a collective that waited for another
--                                rank: its transfer)
--   sum_t0_ns           DOUBLE   total baseline duration of the overlapped instances (ns)
--   wait_excluded_ns    BIGINT   time its overlapped collectives waited for another rank, left out of sum_t1_ns (ns)
--   slowdown            DOUBLE   t1/t0 - 1 (or the median per-instance ratio under a drifting baseline)
--   slowdown_lo         DOUBLE   its 95% interval, lower bound
--   slowdown_hi         DOUBLE   its 95% interval, upper bound
--   significant_stat    BOOLEAN  the slowdown interval excludes 0 and |slowdown| >= 1%
--   baseline            VARCHAR  where t0 comes from: isolated, isolated nearest in time, baseline run, ncu
--   baseline_drift      BOOLEAN  the isolated durations drift over time
--   drift               DOUBLE   that drift over the isolated instances' span / median
--   conflated           BOOLEAN  a mixture of different work that could not be split
--   note                VARCHAR  why a number is missing or left out
--   overlap_fraction    DOUBLE   overlapped time / duration, over the overlapped instances
--   comm_fraction       DOUBLE   communication-overlapped time / duration, over the overlapped instances
--   corunner_kind       VARCHAR  co-runner class with the most overlap time (ties: comm, compute, copy)
--   corunner_sms        DOUBLE   SMs held by co-running kernels, averaged over the overlapped time
--   sm_share            DOUBLE   co-runner SM share over the overlapped instances (time average)
--   comm_sm_share       DOUBLE   communication kernels' SM share over the overlapped instances (time average)
--   dram_pct_iso        DOUBLE   DRAM bandwidth during isolated instances (% of peak), median
--   dram_pct_ovl        DOUBLE   DRAM bandwidth during overlapped instances (% of peak), median
--   gpc_clock_mhz_iso   DOUBLE   GPC clock during isolated instances (MHz), median
--   gpc_clock_mhz_ovl   DOUBLE   GPC clock during overlapped instances (MHz), median
--   cycles_iso          DOUBLE   isolated duration in clock cycles, median
--   cycles_ovl          DOUBLE   overlapped duration in clock cycles, median
--   sm_active_pct_iso   DOUBLE   SMs Active during isolated instances (%), median
--   sm_active_pct_ovl   DOUBLE   SMs Active during overlapped instances (%), median
--   nvlink_pct_ovl      DOUBLE   NVLink during overlapped instances (% of peak), median
--   pcie_pct_ovl        DOUBLE   PCIe during overlapped instances (% of peak), median
--   power_w_iso         DOUBLE   NVML power around isolated instances (W), median
--   power_w_ovl         DOUBLE   NVML power around overlapped instances (W), median
--   co_dram_pct         DOUBLE   co-runners' isolated DRAM rate while overlapping (% of peak), time average
--   co_kernel_dram_pct  DOUBLE   the same, of the co-running kernels alone (copies and sets left out), time average
--   co_working_set_bytes DOUBLE  profiled co-runners' working sets while overlapping (bytes), time average
--   sm_issue_pct_iso    DOUBLE   SM Issue during isolated instances (% of peak, averaged over every SM), median
--   co_sm_issue_pct     DOUBLE   co-runners' isolated SM Issue while overlapping (% of peak), time average
-- The medians of the rates (*_iso over the isolated instances of the group's pool, *_ovl over its overlapped
-- instances) are SQL's median of instance_facts' columns, taken by traceql.attribution.baselines (_signature_stats), which holds
-- each pool's instances already: here they would hold every instance's values at once.
WITH inst AS (
    -- a collective that waited for another rank counts its transfer (_collective_arrivals), as its baseline does
    SELECT i.*, coalesce(c.work_ns, i.dur_ns) AS work_ns, b.group_id, b.pool_id, b.t0_ns AS t0_inst,
           i.overlap_ns > 0 AS ovl
    FROM _instance_facts i JOIN _instance_baselines b USING (run_id, activity_id)
    LEFT JOIN _collective_arrivals c USING (run_id, activity_id)
), agg AS (
    -- the weighted sums are exact (fixed point: 1e-6 of a unit; bytes x ns, up to 1e23, whole), so they do not
    -- depend on the order in which parallel threads add them, without buffering and sorting each group's values
    SELECT group_id, any_value(pool_id) AS pool_id, any_value(activity) AS activity, any_value(kind) AS kind,
           any_value(dynamic_smem_bytes) AS dynamic_smem_bytes, any_value(bytes) AS bytes, any_value(ctas) AS ctas,
           any_value(sm_count) AS sm_count, any_value(launch_occupancy) AS occupancy,
           sum(work_ns) FILTER (ovl)::BIGINT AS sum_t1_ns,
           sum(dur_ns - work_ns) FILTER (ovl)::BIGINT AS wait_excluded_ns,
           (sum((t0_inst)::DECIMAL(38, 6)) FILTER (ovl))::DOUBLE AS sum_t0_ns,
           sum(overlap_ns) FILTER (ovl) / sum(dur_ns) FILTER (ovl) AS overlap_fraction,
           sum(comm_overlap_ns) FILTER (ovl) / sum(dur_ns) FILTER (ovl) AS comm_fraction,
           sum(comm_overlap_ns) FILTER (ovl) AS comm_ov, sum(compute_overlap_ns) FILTER (ovl) AS compute_ov,
           sum(copy_overlap_ns) FILTER (ovl) AS copy_ov,
           (sum((corunner_sms * overlap_ns)::DECIMAL(38, 6)) FILTER (ovl))::DOUBLE / sum(overlap_ns) FILTER (ovl) AS corunner_sms,
           (sum((sm_share * dur_ns)::DECIMAL(38, 6)) FILTER (ovl))::DOUBLE / sum(dur_ns) FILTER (ovl) AS sm_share,
           (sum((comm_sm_share * dur_ns)::DECIMAL(38, 6)) FILTER (ovl))::DOUBLE / sum(dur_ns) FILTER (ovl) AS comm_sm_share,
           (sum((co_dram_pct * overlap_ns)::DECIMAL(38, 6)) FILTER (ovl))::DOUBLE / sum(overlap_ns) FILTER (ovl AND co_dram_pct IS NOT NULL)
               AS co_dram_pct,
           (sum((co_kernel_dram_pct * overlap_ns)::DECIMAL(38, 6)) FILTER (ovl))::DOUBLE
               / sum(overlap_ns) FILTER (ovl AND co_kernel_dram_pct IS NOT NULL) AS co_kernel_dram_pct,
           (sum((co_working_set_bytes * overlap_ns)::DECIMAL(38, 0)) FILTER (ovl))::DOUBLE
               / sum(overlap_ns) FILTER (ovl AND co_working_set_bytes IS NOT NULL) AS co_working_set_bytes,
           (sum((co_sm_issue_pct * overlap_ns)::DECIMAL(38, 6)) FILTER (ovl))::DOUBLE
               / sum(overlap_ns) FILTER (ovl AND co_sm_issue_pct IS NOT NULL) AS co_sm_issue_pct
    FROM inst GROUP BY group_id
)
SELECT s.run_id, s.device_id, s.group_id, s.nvtx, a.activity, a.kind, n.name, n.short_name, n.grid, n.block,
       a.dynamic_smem_bytes, a.bytes, s.mode, s.split, a.ctas, a.occupancy, a.sm_count, s.n, s.n_overlapped, s.n_isolated, s.t0_ns, s.t0_lo_ns, s.t0_hi_ns, s.t0_spread, s.t1_ns,
       s.t1_lo_ns, s.t1_hi_ns, a.sum_t1_ns, a.sum_t0_ns, a.wait_excluded_ns, s.slowdown, s.slowdown_lo, s.slowdown_hi,
       s.significant AS significant_stat, s.baseline, s.baseline_drift, s.drift, s.conflated, s.note,
       a.overlap_fraction, a.comm_fraction,
       CASE WHEN coalesce(a.comm_ov, 0) + coalesce(a.compute_ov, 0) + coalesce(a.copy_ov, 0) = 0 THEN NULL
            WHEN a.comm_ov >= greatest(a.compute_ov, a.copy_ov) THEN 'comm'
            WHEN a.compute_ov >= a.copy_ov THEN 'compute' ELSE 'copy' END AS corunner_kind,
       a.corunner_sms, a.sm_share, a.comm_sm_share, s.dram_pct_iso, s.dram_pct_ovl, s.gpc_clock_mhz_iso,
       s.gpc_clock_mhz_ovl, s.cycles_iso, s.cycles_ovl, s.sm_active_pct_iso, s.sm_active_pct_ovl, s.nvlink_pct_ovl,
       s.pcie_pct_ovl, s.power_w_iso, s.power_w_ovl, a.co_dram_pct, a.co_kernel_dram_pct, a.co_working_set_bytes,
       s.sm_issue_pct_iso,
       a.co_sm_issue_pct
-- a group is one signature's (_signature_stats.sig): its names are the signature's
FROM _signature_stats s JOIN agg a USING (group_id) LEFT JOIN _signatures n ON n.sig = s.sig
