-- kernel_metrics: one row per compute kernel instance: GPU metrics averaged over its run time (_instance_metrics).
-- Empty when the trace was collected without GPU metrics sampling (nsys --gpu-metrics-devices).
-- columns:
--   run_id          VARCHAR  run
--   device_id       INTEGER  physical GPU
--   global_pid      BIGINT   launching process
--   correlation_id  BIGINT   launch correlation id (unique within global_pid)
--   samples         BIGINT   metric samples inside the kernel (0: the sample around it was used)
--   sm_active_pct   DOUBLE   SMs Active (% of peak), device-wide
--   dram_pct        DOUBLE   DRAM read + write bandwidth (% of peak), device-wide
--   gpc_clock_mhz   DOUBLE   GPC clock (MHz)
--   nvlink_pct      DOUBLE   NVLink user data, busier direction (% of peak)
--   pcie_pct        DOUBLE   PCIe, busier direction (% of peak)
SELECT a.run_id, a.device_id, a.global_pid, a.correlation_id, m.samples, m.sm_active_pct, m.dram_pct,
       m.gpc_clock_mhz, m.nvlink_pct, m.pcie_pct
FROM _instance_metrics m JOIN _activity_rows a USING (run_id, device_id, activity_id)
WHERE a.activity = 'kernel' AND a.kind = 'compute'
