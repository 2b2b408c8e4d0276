-- instance_facts: one row per GPU activity instance (every kernel whatever its kind, every copy and set), with the
-- facts attribution aggregates: its duration and cycles, the exact time each class of co-runner overlapped it, the
-- SMs co-running kernels held, the GPU metrics and the NVML sample during it, and where in its step it was launched.
-- columns:
--   run_id              VARCHAR  run
--   device_id           INTEGER  physical GPU
--   activity_id         BIGINT   activity number in the run (_activities)
--   activity            VARCHAR  kernel, memcpy or memset
--   kind                VARCHAR  compute, comm, memory, other (kernels); copy or comm (copies, sets): a label only
--   activity_class      VARCHAR  the class it belongs to as a co-runner: comm, compute or copy
--   global_pid          BIGINT   launching process
--   correlation_id      BIGINT   launch correlation id (unique within global_pid)
--   stream_id           BIGINT   stream (unique within global_pid)
--   nvtx                VARCHAR  NVTX group (NULL unless grouping by NVTX)
--   name                VARCHAR  demangled kernel name, or [CUDA memcpy KIND] / [CUDA memset]
--   short_name          VARCHAR  base function name
--   grid                VARCHAR  grid as XxYxZ (kernels)
--   block               VARCHAR  block as XxYxZ (kernels)
--   dynamic_smem_bytes  BIGINT   dynamic shared memory (bytes; kernels)
--   bytes               BIGINT   bytes moved or set (copies and sets)
--   ctas                BIGINT   CTAs in the grid (kernels)
--   threads_per_block   INTEGER  threads per CTA (kernels)
--   regs_per_thread     INTEGER  registers per thread (kernels)
--   static_smem_bytes   BIGINT   static shared memory (bytes; kernels)
--   launch_occupancy    BIGINT   CTAs per SM the launch configuration allows (kernels)
--   sm_exclusive        BIGINT   its own SMs when its CTAs take more than half an SM, else 0
--   sig                 UBIGINT  signature id (_activities)
--   step_start_ns       BIGINT   start of the innermost NVTX range around the launch (ns; NULL outside ranges)
--   step_text           VARCHAR  that range's text
--   occurrence          BIGINT   launches of the same signature before it in that range instance
--   start_ns            BIGINT   start (ns)
--   end_ns              BIGINT   end (ns)
--   dur_ns              BIGINT   duration (ns)
--   comm_overlap_ns     BIGINT   time overlapped by other communication (ns)
--   compute_overlap_ns  BIGINT   time overlapped by other non-communication kernels (ns)
--   copy_overlap_ns     BIGINT   time overlapped by other copies and sets (ns)
--   overlap_ns          BIGINT   time overlapped by any other activity (ns)
--   overlap_fraction    DOUBLE   overlap_ns / dur_ns
--   comm_fraction       DOUBLE   comm_overlap_ns / dur_ns
--   corunner_kind       VARCHAR  the co-runner class that overlapped it longest (ties: comm, compute, copy), or NULL
--   corunner_sms        DOUBLE   SMs held by other kernels, averaged over the overlapped time
--   exclusive_sms       DOUBLE   of those, the SMs they took from it, averaged: those of co-runners beside whose
--                                CTAs (resident) not one of its own fits (_instance_overlap)
--   exclusive_sms_start DOUBLE   the same, of the kernels already running when it started, averaged over the
--                                overlapped time
--   slots_sms           DOUBLE   of those, SMs' worth of its CTA slots they took: of each co-runner's SMs, the share
--                                of its CTA slots lost there (averaged; _instance_overlap)
--   slots_sms_start     DOUBLE   the same, of the kernels already running when it started (averaged)
--   sm_share            DOUBLE   SMs held by other kernels over its duration / SM count
--   comm_sm_share       DOUBLE   the same, communication kernels only
--   sm_count            INTEGER  SMs on the device
--   samples             BIGINT   GPU metric samples inside it (0: the sample around it was used; NULL: no metrics)
--   sm_active_pct       DOUBLE   SMs Active during it (%), device-wide
--   dram_pct            DOUBLE   DRAM read + write bandwidth during it (% of peak), device-wide
--   gpc_clock_mhz       DOUBLE   GPC clock during it (MHz)
--   nvlink_pct          DOUBLE   NVLink user data during it (% of peak)
--   pcie_pct            DOUBLE   PCIe during it (% of peak)
--   sm_issue_pct        DOUBLE   SM Issue during it: issue slots used, averaged over every SM (% of peak)
--   cycles              DOUBLE   duration in GPC clock cycles: dur_ns x gpc_clock_mhz / 1000
--   co_dram_pct         DOUBLE   co-runners' isolated DRAM rate while overlapping it (% of peak)
--   co_kernel_dram_pct  DOUBLE   the same, of the co-running kernels alone (copies and sets left out; % of peak)
--   co_working_set_bytes DOUBLE  profiled co-runners' working sets while overlapping it (bytes, Nsight Compute)
--   co_sm_issue_pct     DOUBLE   co-runners' isolated SM Issue while overlapping it (% of peak, averaged over the
--                                device's SMs; NULL where one's is unknown)
--   power_w             DOUBLE   NVML power sample at its midpoint (W; traceql collect --power)
--   nvml_sm_clock_mhz   DOUBLE   NVML SM clock sample at its midpoint (MHz)
--   throttle_reasons    BIGINT   NVML clock throttle reasons bitmask at its midpoint
SELECT f.run_id, f.device_id, f.activity_id, f.activity, f.kind, f.activity_class, f.global_pid, f.correlation_id,
       f.stream_id, f.nvtx, s.name, s.short_name, s.grid, s.block, f.dynamic_smem_bytes, f.bytes, f.ctas,
       f.threads_per_block, f.regs_per_thread, f.static_smem_bytes, f.launch_occupancy, f.sm_exclusive, f.sig,
       f.step_start_ns,
       f.step_text, f.occurrence, f.start_ns, f.end_ns, f.dur_ns, f.comm_overlap_ns, f.compute_overlap_ns,
       f.copy_overlap_ns, f.overlap_ns, f.overlap_fraction, f.comm_fraction, f.corunner_kind, f.corunner_sms,
       f.exclusive_sms, f.exclusive_sms_start, f.slots_sms, f.slots_sms_start,
       f.sm_share, f.comm_sm_share, f.sm_count, f.samples, f.sm_active_pct, f.dram_pct, f.gpc_clock_mhz,
       f.nvlink_pct, f.pcie_pct, f.sm_issue_pct, f.cycles, f.co_dram_pct, f.co_kernel_dram_pct,
       f.co_working_set_bytes, f.co_sm_issue_pct,
       f.power_w, f.nvml_sm_clock_mhz,
       f.throttle_reasons
FROM _instance_facts f LEFT JOIN _signatures s USING (sig)
