-- _instance_facts: instance_facts without the names of each signature (_signatures; instance_facts joins them):
-- one row per GPU activity instance (every kernel whatever its kind, every copy and set), with the facts attribution
-- aggregates: its duration and cycles, the exact time each class of co-runner overlapped it, the SMs co-running
-- kernels held, the GPU metrics and the NVML sample during it, and where in its step it was launched.
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
--   sig                 UBIGINT  signature hash (_activities)
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
--   sm_share            DOUBLE   SMs held by other kernels over its duration / SM count
--   comm_sm_share       DOUBLE   the same, communication kernels only
--   sm_count            INTEGER  SMs on the device
--   samples             BIGINT   GPU metric samples inside it (0: the sample around it was used; NULL: no metrics)
--   sm_active_pct       DOUBLE   SMs Active during it (%), device-wide
--   dram_pct            DOUBLE   DRAM read + write bandwidth during it (% of peak), device-wide
--   gpc_clock_mhz       DOUBLE   GPC clock during it (MHz)
--   nvlink_pct          DOUBLE   NVLink user data during it (% of peak)
--   pcie_pct            DOUBLE   PCIe during it (% of peak)
--   cycles              DOUBLE   duration in GPC clock cycles: dur_ns x gpc_clock_mhz / 1000
--   co_dram_pct         DOUBLE   co-runners' isolated DRAM rate while overlapping it (% of peak)
--   co_working_set_bytes DOUBLE  profiled co-runners' working sets while overlapping it (bytes, Nsight Compute)
--   power_w             DOUBLE   NVML power sample at its midpoint (W; traceql collect --power)
--   nvml_sm_clock_mhz   DOUBLE   NVML SM clock sample at its midpoint (MHz)
--   throttle_reasons    BIGINT   NVML clock throttle reasons bitmask at its midpoint
WITH facts AS (
    SELECT a.run_id, a.device_id, a.activity_id, a.activity, a.kind, a.corunner_kind AS activity_class,
           a.global_pid, a.correlation_id, a.stream_id, g.nvtx,
           a.dynamic_smem_bytes, a.bytes, a.ctas, a.threads_per_block, a.regs_per_thread, a.static_smem_bytes,
           a.launch_occupancy, a.sig,
           c.step_start_ns, c.step_text, c.occurrence, a.start_ns, a.end_ns, a.dur_ns, o.comm_overlap_ns, o.compute_overlap_ns,
           o.copy_overlap_ns, o.overlap_ns,
           CASE WHEN a.dur_ns > 0 THEN o.overlap_ns / a.dur_ns END AS overlap_fraction,
           CASE WHEN a.dur_ns > 0 THEN o.comm_overlap_ns / a.dur_ns END AS comm_fraction,
           CASE WHEN o.overlap_ns = 0 THEN NULL
                WHEN o.comm_overlap_ns >= greatest(o.compute_overlap_ns, o.copy_overlap_ns) THEN 'comm'
                WHEN o.compute_overlap_ns >= o.copy_overlap_ns THEN 'compute'
                ELSE 'copy' END AS corunner_kind,
           CASE WHEN o.overlap_ns > 0 THEN o.corunner_sm_ns::DOUBLE / o.overlap_ns END AS corunner_sms,
           CASE WHEN a.dur_ns > 0 AND o.sm_count > 0
                THEN least(1.0, o.corunner_sm_ns::DOUBLE / a.dur_ns / o.sm_count) END AS sm_share,
           CASE WHEN a.dur_ns > 0 AND o.sm_count > 0
                THEN least(1.0, o.comm_sm_ns::DOUBLE / a.dur_ns / o.sm_count) END AS comm_sm_share,
           o.sm_count, m.samples, m.sm_active_pct, m.dram_pct, m.gpc_clock_mhz, m.nvlink_pct, m.pcie_pct,
           a.dur_ns * m.gpc_clock_mhz / 1000 AS cycles, d.co_dram_pct, d.co_working_set_bytes
    FROM _activity_rows a
    JOIN _instance_overlap o USING (run_id, device_id, activity_id)
    LEFT JOIN _instance_metrics m USING (run_id, device_id, activity_id)
    LEFT JOIN _corunner_dram d USING (run_id, device_id, activity_id)
    LEFT JOIN _activity_occurrence c USING (run_id, activity_id)
    LEFT JOIN _activity_groups g USING (run_id, activity_id)
), sampled AS (
    -- the NVML sample at each midpoint, joined on the keys alone and only on devices with samples: an ASOF join
    -- sorts its whole left side, which the wide facts would make the dearest step here
    SELECT a.run_id, a.device_id, a.activity_id, (a.start_ns + a.end_ns) // 2 AS mid_ns
    FROM _activity_rows a SEMI JOIN (SELECT DISTINCT run_id, device_id FROM power) d USING (run_id, device_id)
), power_at AS (
    SELECT s.run_id, s.activity_id, p.power_w, p.sm_clock_mhz AS nvml_sm_clock_mhz, p.throttle_reasons
    FROM sampled s ASOF JOIN power p ON p.run_id = s.run_id AND p.device_id = s.device_id AND p.ts_ns <= s.mid_ns
)
SELECT f.*, p.power_w, p.nvml_sm_clock_mhz, p.throttle_reasons
FROM facts f LEFT JOIN power_at p USING (run_id, activity_id)
