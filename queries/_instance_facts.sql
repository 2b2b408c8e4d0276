-- _instance_facts: instance_facts without the names of each signature (_signatures; instance_facts joins them):
-- one row per GPU activity instance (every kernel whatever its kind, every copy and set), with the facts attribution
-- aggregates: its duration and cycles, the exact time each class of co-runner overlapped it, the SMs co-running
-- kernels held, the GPU metrics and the NVML sample during it, and where in its step it was launched.
-- It reads _instance_parts: each activity's row of _activity_rows beside its row of _instance_sweeps.
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
SELECT run_id, device_id, activity_id, activity, kind, corunner_kind AS activity_class,
       global_pid, correlation_id, stream_id, nvtx,
       dynamic_smem_bytes, bytes, ctas, threads_per_block, regs_per_thread, static_smem_bytes,
       launch_occupancy, sm_exclusive, sig,
       step_start_ns, step_text, occurrence, start_ns, end_ns, dur_ns, comm_overlap_ns, compute_overlap_ns,
       copy_overlap_ns, overlap_ns,
       CASE WHEN dur_ns > 0 THEN overlap_ns / dur_ns END AS overlap_fraction,
       CASE WHEN dur_ns > 0 THEN comm_overlap_ns / dur_ns END AS comm_fraction,
       CASE WHEN overlap_ns = 0 THEN NULL
            WHEN comm_overlap_ns >= greatest(compute_overlap_ns, copy_overlap_ns) THEN 'comm'
            WHEN compute_overlap_ns >= copy_overlap_ns THEN 'compute'
            ELSE 'copy' END AS corunner_kind,
       CASE WHEN overlap_ns > 0 THEN corunner_sm_ns::DOUBLE / overlap_ns END AS corunner_sms,
       CASE WHEN overlap_ns > 0 THEN exclusive_sm_ns::DOUBLE / overlap_ns END AS exclusive_sms,
       CASE WHEN overlap_ns > 0 THEN exclusive_start_sm_ns::DOUBLE / overlap_ns END AS exclusive_sms_start,
       CASE WHEN overlap_ns > 0 THEN slots_sm_ns::DOUBLE / overlap_ns END AS slots_sms,
       CASE WHEN overlap_ns > 0 THEN slots_start_sm_ns::DOUBLE / overlap_ns END AS slots_sms_start,
       CASE WHEN dur_ns > 0 AND sm_count > 0
            THEN least(1.0, corunner_sm_ns::DOUBLE / dur_ns / sm_count) END AS sm_share,
       CASE WHEN dur_ns > 0 AND sm_count > 0
            THEN least(1.0, comm_sm_ns::DOUBLE / dur_ns / sm_count) END AS comm_sm_share,
       sm_count, samples, sm_active_pct, dram_pct, gpc_clock_mhz, nvlink_pct, pcie_pct, sm_issue_pct,
       dur_ns * gpc_clock_mhz / 1000 AS cycles, co_dram_pct, co_kernel_dram_pct, co_working_set_bytes,
       co_sm_issue_pct,
       power_w, nvml_sm_clock_mhz, throttle_reasons
FROM _instance_parts
