-- kernel_signatures: per kernel signature (name, grid, block, dynamic shared memory) and NVTX group:
-- the isolated baseline t0, the overlapped duration t1, and the evidence attribution weighs.
-- columns:
--   run_id              VARCHAR  run
--   device_id           INTEGER  physical GPU
--   nvtx                VARCHAR  NVTX group (NULL unless grouping by NVTX)
--   name                VARCHAR  demangled kernel name
--   short_name          VARCHAR  base function name
--   grid                VARCHAR  grid as XxYxZ
--   block               VARCHAR  block as XxYxZ
--   dynamic_smem_bytes  BIGINT   dynamic shared memory (bytes)
--   ctas                BIGINT   CTAs in the grid
--   occupancy           BIGINT   CTAs per SM the launch configuration allows
--   sm_count            INTEGER  SMs on the device
--   n                   BIGINT   instances
--   n_overlapped        BIGINT   instances overlapped by another activity
--   n_isolated          BIGINT   baseline instances
--   t0_ns               DOUBLE   isolated baseline: median duration (ns)
--   t0_spread           DOUBLE   baseline interquartile range / median
--   t1_ns               DOUBLE   median duration of the overlapped instances (ns)
--   sum_t1_ns           HUGEINT  total duration of the overlapped instances (ns)
--   overlap_fraction    DOUBLE   overlapped time / duration, over the overlapped instances
--   comm_fraction       DOUBLE   communication-overlapped time / duration, over the overlapped instances
--   corunner_kind       VARCHAR  kind that overlapped these instances longest
--   corunner_sms        DOUBLE   SMs held by co-runners while overlapped, overlap-weighted
--   sm_share            DOUBLE   co-runner SM share over the overlapped instances, duration-weighted
--   comm_sm_share       DOUBLE   communication SM share over the overlapped instances, duration-weighted
--   dram_pct_iso        DOUBLE   DRAM bandwidth during isolated instances (% of peak)
--   dram_pct_ovl        DOUBLE   DRAM bandwidth during overlapped instances (% of peak)
--   gpc_clock_mhz_iso   DOUBLE   GPC clock during isolated instances (MHz)
--   gpc_clock_mhz_ovl   DOUBLE   GPC clock during overlapped instances (MHz)
--   sm_active_pct_iso   DOUBLE   SMs Active during isolated instances (%)
--   sm_active_pct_ovl   DOUBLE   SMs Active during overlapped instances (%)
--   nvlink_pct_ovl      DOUBLE   NVLink during overlapped instances (% of peak)
--   pcie_pct_ovl        DOUBLE   PCIe during overlapped instances (% of peak)
--   co_dram_pct         DOUBLE   co-runners' isolated DRAM rate while overlapping, overlap-weighted (% of peak)
--   co_working_set_bytes DOUBLE  profiled co-runners' working sets while overlapping, overlap-weighted (bytes)
WITH ovl AS (
    SELECT run_id, device_id, nvtx, name, grid, block, dynamic_smem_bytes,
           any_value(short_name) AS short_name, any_value(ctas) AS ctas, any_value(sm_count) AS sm_count,
           any_value(threads_per_block) AS threads_per_block, any_value(regs_per_thread) AS regs_per_thread,
           any_value(static_smem_bytes) AS static_smem_bytes,
           count(*) AS n, count(*) FILTER (overlap_ns > 0) AS n_overlapped,
           median(dur_ns) FILTER (overlap_ns > 0)::DOUBLE AS t1_ns,
           sum(dur_ns) FILTER (overlap_ns > 0)::HUGEINT AS sum_t1_ns,
           sum(overlap_ns) FILTER (overlap_ns > 0) / sum(dur_ns) FILTER (overlap_ns > 0) AS overlap_fraction,
           sum(comm_overlap_ns) FILTER (overlap_ns > 0) / sum(dur_ns) FILTER (overlap_ns > 0) AS comm_fraction,
           mode(corunner_kind) FILTER (overlap_ns > 0) AS corunner_kind,
           sum(corunner_sms * overlap_ns) FILTER (overlap_ns > 0) / sum(overlap_ns) FILTER (overlap_ns > 0)
               AS corunner_sms,
           sum(sm_share * dur_ns) FILTER (overlap_ns > 0) / sum(dur_ns) FILTER (overlap_ns > 0) AS sm_share,
           sum(comm_sm_share * dur_ns) FILTER (overlap_ns > 0) / sum(dur_ns) FILTER (overlap_ns > 0) AS comm_sm_share,
           sum(dram_pct * dur_ns) FILTER (overlap_ns > 0) / sum(dur_ns) FILTER (overlap_ns > 0 AND dram_pct IS NOT NULL)
               AS dram_pct_ovl,
           sum(gpc_clock_mhz * dur_ns) FILTER (overlap_ns > 0)
               / sum(dur_ns) FILTER (overlap_ns > 0 AND gpc_clock_mhz IS NOT NULL) AS gpc_clock_mhz_ovl,
           sum(sm_active_pct * dur_ns) FILTER (overlap_ns > 0)
               / sum(dur_ns) FILTER (overlap_ns > 0 AND sm_active_pct IS NOT NULL) AS sm_active_pct_ovl,
           sum(nvlink_pct * dur_ns) FILTER (overlap_ns > 0)
               / sum(dur_ns) FILTER (overlap_ns > 0 AND nvlink_pct IS NOT NULL) AS nvlink_pct_ovl,
           sum(pcie_pct * dur_ns) FILTER (overlap_ns > 0)
               / sum(dur_ns) FILTER (overlap_ns > 0 AND pcie_pct IS NOT NULL) AS pcie_pct_ovl,
           sum(co_dram_pct * overlap_ns) FILTER (overlap_ns > 0)
               / sum(overlap_ns) FILTER (overlap_ns > 0 AND co_dram_pct IS NOT NULL) AS co_dram_pct,
           sum(co_working_set_bytes * overlap_ns) FILTER (overlap_ns > 0)
               / sum(overlap_ns) FILTER (overlap_ns > 0 AND co_working_set_bytes IS NOT NULL) AS co_working_set_bytes
    FROM kernel_instances GROUP BY run_id, device_id, nvtx, name, grid, block, dynamic_smem_bytes
)
SELECT o.run_id, o.device_id, o.nvtx, o.name, o.short_name, o.grid, o.block, o.dynamic_smem_bytes, o.ctas,
       -- CTAs per SM: the tightest of the block, warp, register and shared-memory limits
       greatest(1, least(
           coalesce(d.max_blocks_per_sm, 32),
           coalesce(d.max_warps_per_sm, 64) // greatest(1, ceil(o.threads_per_block / 32.0))::BIGINT,
           CASE WHEN o.regs_per_thread > 0 THEN coalesce(d.max_regs_per_sm, 65536)
                // (o.regs_per_thread * 32 * ceil(o.threads_per_block / 32.0))::BIGINT END,
           CASE WHEN o.dynamic_smem_bytes + o.static_smem_bytes > 0 THEN coalesce(d.max_smem_per_sm_bytes, 233472)
                // (o.dynamic_smem_bytes + o.static_smem_bytes) END))::BIGINT AS occupancy,
       o.sm_count, o.n, o.n_overlapped, coalesce(b.n_isolated, 0) AS n_isolated, b.t0_ns, b.t0_spread,
       o.t1_ns, o.sum_t1_ns, o.overlap_fraction, o.comm_fraction, o.corunner_kind, o.corunner_sms, o.sm_share,
       o.comm_sm_share, b.dram_pct_iso, o.dram_pct_ovl, b.gpc_clock_mhz_iso, o.gpc_clock_mhz_ovl,
       b.sm_active_pct_iso, o.sm_active_pct_ovl, o.nvlink_pct_ovl, o.pcie_pct_ovl, o.co_dram_pct,
       o.co_working_set_bytes
FROM ovl o
LEFT JOIN _baselines b ON b.run_id = o.run_id AND b.device_id = o.device_id AND b.name = o.name
     AND b.grid = o.grid AND b.block = o.block AND b.dynamic_smem_bytes = o.dynamic_smem_bytes
LEFT JOIN devices d ON d.run_id = o.run_id AND d.device_id = o.device_id
