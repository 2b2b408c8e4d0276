-- _activities: every GPU activity (kernels of every kind, copies, sets), each a possible victim and co-runner
-- (_activity_rows with its signature's names from _signatures).
-- Kind labels a row; it never decides whether a row is analysed. The signature identifies the same work:
-- (name, grid, block, dynamic shared memory) for kernels, (copy kind, bytes) for copies and sets.
-- columns:
--   run_id              VARCHAR  run
--   device_id           INTEGER  physical GPU
--   activity_id         BIGINT   the activity's number in its run (ordered by device, start, end, type, process)
--   activity            VARCHAR  kernel, memcpy or memset
--   global_pid          BIGINT   launching process
--   correlation_id      BIGINT   launch correlation id (unique within global_pid)
--   stream_id           BIGINT   stream (unique within global_pid)
--   start_ns            BIGINT   start (ns)
--   end_ns              BIGINT   end (ns)
--   dur_ns              BIGINT   duration (ns)
--   name                VARCHAR  demangled kernel name, or [CUDA memcpy KIND] / [CUDA memset]
--   short_name          VARCHAR  base function name (kernels), else the name
--   grid                VARCHAR  grid as XxYxZ (kernels)
--   block               VARCHAR  block as XxYxZ (kernels)
--   dynamic_smem_bytes  BIGINT   dynamic shared memory (bytes; kernels)
--   bytes               BIGINT   bytes moved or set (copies and sets)
--   ctas                BIGINT   CTAs in the grid (kernels)
--   threads_per_block   INTEGER  threads per CTA (kernels)
--   regs_per_thread     INTEGER  registers per thread (kernels)
--   static_smem_bytes   BIGINT   static shared memory (bytes; kernels)
--   kind                VARCHAR  compute, comm, memory, other (kernels, from the name); copy or comm (copies, sets)
--   corunner_kind       VARCHAR  the class it counts in as a co-runner: comm (communication kernels, peer copies),
--                                compute (every other kernel), copy (other copies, sets)
--   sm_held             BIGINT   SMs the activity occupies: min(SM count, CTAs) for kernels, 0 for copy engines
--   launch_occupancy    BIGINT   CTAs per SM the launch configuration and the device's limits allow (kernels)
--   sm_exclusive        BIGINT   sm_held when each of its CTAs takes more than half of an SM's warps, registers or
--                                shared memory (no other such CTA fits beside one), else 0
--   sig                 UBIGINT  signature id (the store's: the same work has the same sig)
SELECT r.run_id, r.device_id, r.activity_id, r.activity, r.global_pid, r.correlation_id, r.stream_id, r.start_ns,
       r.end_ns, r.dur_ns, s.name, s.short_name, s.grid, s.block, r.dynamic_smem_bytes, r.bytes, r.ctas,
       r.threads_per_block, r.regs_per_thread, r.static_smem_bytes, r.kind, r.corunner_kind, r.sm_held,
       r.launch_occupancy, r.sm_exclusive, r.sig
FROM _activity_rows r LEFT JOIN _signatures s USING (sig)
