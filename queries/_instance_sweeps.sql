-- _instance_sweeps: per GPU activity (every kernel, copy and set), what the interval sweeps and the launch contexts
-- give it: the exact time each class of co-runner overlapped it and the SMs co-running kernels held
-- (_instance_overlap), the GPU metrics during it (_instance_metrics), its own isolated DRAM rate and its co-runners'
-- (_corunner_dram), its launch context (_activity_occurrence, _activity_groups) and the NVML sample at its midpoint.
-- instance_facts reads it beside _activity_rows (_instance_parts). traceql.engine computes it in one pass per device,
-- in the order of _activity_rows; this is its reference definition.
-- columns:
--   run_id              VARCHAR  run
--   device_id           INTEGER  physical GPU
--   activity_id         BIGINT   activity (_activities)
--   comm_overlap_ns     BIGINT   time overlapped by other communication (ns)
--   compute_overlap_ns  BIGINT   time overlapped by other non-communication kernels (ns)
--   copy_overlap_ns     BIGINT   time overlapped by other copies and sets (ns)
--   overlap_ns          BIGINT   time overlapped by any other activity (ns)
--   corunner_sm_ns      BIGINT   integral of the SMs held by other kernels over the activity (SM·ns)
--   comm_sm_ns          BIGINT   the same, communication kernels only (SM·ns)
--   exclusive_sm_ns     BIGINT   of those, the SMs taken from it: those of co-runners beside whose resident CTAs not one
--                                of its CTAs fits (SM·ns; _instance_overlap)
--   exclusive_start_sm_ns BIGINT the same, of the kernels already running when it started (SM·ns)
--   slots_sm_ns         BIGINT   of each co-runner's SMs, the share of its CTA slots lost there (SM·ns; _instance_overlap)
--   slots_start_sm_ns   BIGINT   the same, of the kernels already running when it started (SM·ns)
--   sm_count            INTEGER  SMs on the device
--   samples             BIGINT   GPU metric samples inside it (0: the sample around it was used; NULL: no metrics)
--   sm_active_pct       DOUBLE   SMs Active during it (%), device-wide
--   dram_pct            DOUBLE   DRAM read + write bandwidth during it (% of peak), device-wide
--   gpc_clock_mhz       DOUBLE   GPC clock during it (MHz)
--   nvlink_pct          DOUBLE   NVLink user data during it (% of peak)
--   pcie_pct            DOUBLE   PCIe during it (% of peak)
--   sm_issue_pct        DOUBLE   SM Issue during it: issue slots used, averaged over every SM (% of peak)
--   own_dram_pct        DOUBLE   its own isolated DRAM rate (% of peak; _activity_dram)
--   working_set_bytes   DOUBLE   its working set (bytes, Nsight Compute; _activity_dram)
--   co_dram_pct         DOUBLE   co-runners' isolated DRAM rate while overlapping it (% of peak)
--   co_kernel_dram_pct  DOUBLE   the same, of the co-running kernels alone (copies and sets left out; % of peak)
--   co_working_set_bytes DOUBLE  profiled co-runners' working sets while overlapping it (bytes, Nsight Compute)
--   own_sm_issue_pct    DOUBLE   its own isolated SM Issue (% of peak, averaged over every SM; _activity_dram)
--   co_sm_issue_pct     DOUBLE   co-runners' isolated SM Issue while overlapping it (% of peak, averaged over the
--                                device's SMs; NULL where one's is unknown)
--   step_start_ns       BIGINT   start of the innermost NVTX range around the launch (ns; NULL outside ranges)
--   step_text           VARCHAR  that range's text
--   occurrence          BIGINT   launches of the same signature before it in that range instance
--   nvtx                VARCHAR  NVTX group (NULL unless grouping by NVTX)
--   power_w             DOUBLE   NVML power sample at its midpoint (W; traceql collect --power)
--   nvml_sm_clock_mhz   DOUBLE   NVML SM clock sample at its midpoint (MHz)
--   throttle_reasons    BIGINT   NVML clock throttle reasons bitmask at its midpoint
WITH sampled AS (
    -- the NVML sample at each midpoint, joined on the keys alone and only on devices with samples: an ASOF join
    -- sorts its whole left side
    SELECT a.run_id, a.device_id, a.activity_id, (a.start_ns + a.end_ns) // 2 AS mid_ns
    FROM _activity_rows a SEMI JOIN (SELECT DISTINCT run_id, device_id FROM power) d USING (run_id, device_id)
), power_at AS (
    SELECT s.run_id, s.activity_id, p.power_w, p.sm_clock_mhz AS nvml_sm_clock_mhz, p.throttle_reasons
    FROM sampled s ASOF JOIN power p ON p.run_id = s.run_id AND p.device_id = s.device_id AND p.ts_ns <= s.mid_ns
)
SELECT a.run_id, a.device_id, a.activity_id, o.comm_overlap_ns, o.compute_overlap_ns, o.copy_overlap_ns,
       o.overlap_ns, o.corunner_sm_ns, o.comm_sm_ns, o.exclusive_sm_ns, o.exclusive_start_sm_ns, o.slots_sm_ns,
       o.slots_start_sm_ns, o.sm_count, m.samples,
       m.sm_active_pct, m.dram_pct, m.gpc_clock_mhz, m.nvlink_pct, m.pcie_pct, m.sm_issue_pct, d.own_dram_pct,
       r.working_set_bytes, d.co_dram_pct, d.co_kernel_dram_pct, d.co_working_set_bytes,
       r.sm_issue_pct AS own_sm_issue_pct, d.co_sm_issue_pct, c.step_start_ns, c.step_text, c.occurrence, g.nvtx,
       p.power_w, p.nvml_sm_clock_mhz, p.throttle_reasons
FROM _activity_rows a
JOIN _instance_overlap o USING (run_id, device_id, activity_id)
LEFT JOIN _instance_metrics m USING (run_id, device_id, activity_id)
LEFT JOIN _corunner_dram d USING (run_id, device_id, activity_id)
LEFT JOIN _activity_dram r USING (run_id, device_id, activity_id)
LEFT JOIN _activity_occurrence c USING (run_id, activity_id)
LEFT JOIN _activity_groups g USING (run_id, activity_id)
LEFT JOIN power_at p USING (run_id, activity_id)
