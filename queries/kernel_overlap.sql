-- kernel_overlap: one row per compute kernel instance: how much of it other GPU work overlapped, by kind.
-- columns:
--   run_id              VARCHAR  run
--   device_id           INTEGER  physical GPU
--   global_pid          BIGINT   launching process
--   correlation_id      BIGINT   launch correlation id (unique within global_pid)
--   stream_id           BIGINT   stream (unique within global_pid)
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
--   end_ns              BIGINT   end (ns)
--   dur_ns              BIGINT   duration (ns)
--   comm_overlap_ns     BIGINT   time overlapped by communication (NCCL kernels, peer copies) (ns)
--   compute_overlap_ns  BIGINT   time overlapped by other kernels (ns)
--   copy_overlap_ns     BIGINT   time overlapped by copies and sets on the device (ns)
--   overlap_ns          BIGINT   time overlapped by any other activity (ns)
--   overlap_fraction    DOUBLE   overlap_ns / dur_ns
--   comm_fraction       DOUBLE   comm_overlap_ns / dur_ns
--   corunner_kind       VARCHAR  the kind that overlapped it longest: comm, compute, copy, or NULL
--   corunner_sms        DOUBLE   SMs held by co-running kernels, averaged over the overlapped time
--   sm_share            DOUBLE   SMs held by co-running kernels over the kernel's duration / SM count
--   comm_sm_share       DOUBLE   the same, for communication kernels only
--   sm_count            INTEGER  SMs on the device
SELECT k.run_id, k.device_id, k.global_pid, k.correlation_id, k.stream_id, k.name, k.short_name,
       concat_ws('x', k.grid_x, k.grid_y, k.grid_z) AS grid, concat_ws('x', k.block_x, k.block_y, k.block_z) AS block,
       k.dynamic_smem_bytes, k.ctas, k.threads_per_block, k.regs_per_thread, k.static_smem_bytes,
       k.start_ns, k.end_ns, k.dur_ns,
       (e.comm_ns - s.comm_ns)::BIGINT AS comm_overlap_ns,
       (e.compute2_ns - s.compute2_ns)::BIGINT AS compute_overlap_ns,
       (e.copy_ns - s.copy_ns)::BIGINT AS copy_overlap_ns,
       (e.any2_ns - s.any2_ns)::BIGINT AS overlap_ns,
       CASE WHEN k.dur_ns > 0 THEN (e.any2_ns - s.any2_ns)::DOUBLE / k.dur_ns END AS overlap_fraction,
       CASE WHEN k.dur_ns > 0 THEN (e.comm_ns - s.comm_ns)::DOUBLE / k.dur_ns END AS comm_fraction,
       CASE WHEN e.any2_ns = s.any2_ns THEN NULL
            WHEN e.comm_ns - s.comm_ns >= greatest(e.compute2_ns - s.compute2_ns, e.copy_ns - s.copy_ns) THEN 'comm'
            WHEN e.compute2_ns - s.compute2_ns >= e.copy_ns - s.copy_ns THEN 'compute'
            ELSE 'copy' END AS corunner_kind,
       CASE WHEN e.any2_ns > s.any2_ns THEN
            ((e.sm_comm - s.sm_comm) + (e.sm_compute - s.sm_compute) - least(k.ctas, d.sm_count) * k.dur_ns)::DOUBLE
            / (e.any2_ns - s.any2_ns) END AS corunner_sms,
       CASE WHEN k.dur_ns > 0 AND d.sm_count > 0 THEN least(1.0,
            ((e.sm_comm - s.sm_comm) + (e.sm_compute - s.sm_compute) - least(k.ctas, d.sm_count) * k.dur_ns)::DOUBLE
            / k.dur_ns / d.sm_count) END AS sm_share,
       CASE WHEN k.dur_ns > 0 AND d.sm_count > 0 THEN least(1.0, (e.sm_comm - s.sm_comm)::DOUBLE / k.dur_ns
            / d.sm_count) END AS comm_sm_share,
       d.sm_count
FROM kernels k
JOIN _activity_steps s ON s.run_id = k.run_id AND s.device_id = k.device_id AND s.t = k.start_ns
JOIN _activity_steps e ON e.run_id = k.run_id AND e.device_id = k.device_id AND e.t = k.end_ns
LEFT JOIN devices d ON d.run_id = k.run_id AND d.device_id = k.device_id
WHERE k.kind = 'compute'
