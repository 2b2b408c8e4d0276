-- kernel_instances: kernel_overlap joined with its GPU metrics and its NVTX group.
-- columns:
--   run_id              VARCHAR  run
--   device_id           INTEGER  physical GPU
--   global_pid          BIGINT   launching process
--   correlation_id      BIGINT   launch correlation id (unique within global_pid)
--   nvtx                VARCHAR  NVTX group (NULL unless grouping by NVTX)
--   name                VARCHAR  demangled kernel name
--   short_name          VARCHAR  base function name
--   grid                VARCHAR  grid as XxYxZ
--   block               VARCHAR  block as XxYxZ
--   dynamic_smem_bytes  BIGINT   dynamic shared memory (bytes)
--   ctas                BIGINT   CTAs in the grid
--   threads_per_block   INTEGER  threads per CTA
--   regs_per_thread     INTEGER  registers per thread
--   static_smem_bytes   BIGINT   static shared memory (bytes)
--   start_ns            BIGINT   start (ns)
--   dur_ns              BIGINT   duration (ns)
--   overlap_ns          BIGINT   time overlapped by any other activity (ns)
--   comm_overlap_ns     BIGINT   time overlapped by communication (ns)
--   overlap_fraction    DOUBLE   overlap_ns / dur_ns
--   corunner_kind       VARCHAR  kind that overlapped it longest
--   corunner_sms        DOUBLE   SMs held by co-running kernels while overlapped
--   sm_share            DOUBLE   co-runner SM share over the kernel's duration
--   comm_sm_share       DOUBLE   communication SM share over the kernel's duration
--   sm_count            INTEGER  SMs on the device
--   sm_active_pct       DOUBLE   SMs Active during the kernel (%)
--   dram_pct            DOUBLE   DRAM read + write bandwidth during the kernel (% of peak)
--   gpc_clock_mhz       DOUBLE   GPC clock during the kernel (MHz)
--   nvlink_pct          DOUBLE   NVLink user data during the kernel (% of peak)
--   pcie_pct            DOUBLE   PCIe during the kernel (% of peak)
--   co_dram_pct         DOUBLE   co-runners' isolated DRAM rate while overlapping it (% of peak)
--   co_working_set_bytes DOUBLE  profiled co-runners' working sets while overlapping it (bytes, Nsight Compute)
SELECT o.run_id, o.device_id, o.global_pid, o.correlation_id, g.nvtx, o.name, o.short_name, o.grid, o.block,
       o.dynamic_smem_bytes, o.ctas, o.threads_per_block, o.regs_per_thread, o.static_smem_bytes, o.start_ns,
       o.dur_ns, o.overlap_ns, o.comm_overlap_ns, o.overlap_fraction, o.corunner_kind, o.corunner_sms, o.sm_share,
       o.comm_sm_share, o.sm_count, m.sm_active_pct, m.dram_pct, m.gpc_clock_mhz, m.nvlink_pct, m.pcie_pct,
       c.co_dram_pct, c.co_working_set_bytes
FROM kernel_overlap o
LEFT JOIN kernel_metrics m USING (run_id, device_id, global_pid, correlation_id)
LEFT JOIN _corunner_dram c USING (run_id, global_pid, correlation_id)
LEFT JOIN _kernel_groups g USING (run_id, global_pid, correlation_id)
