-- _activity_rows: every GPU activity (kernels of every kind, copies, sets), each a possible victim and co-runner,
-- without its names: those belong to its signature (_signatures); _activities joins the two.
-- Kind labels a row; it never decides whether a row is analysed. The signature identifies the same work:
-- (name, grid, block, dynamic shared memory) for kernels, (copy kind, bytes) for copies and sets.
-- The engine (traceql.engine) numbers the activities of _activity_list as one scan in their order streams by, and
-- keeps them in that order; this SQL is the reference.
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
SELECT run_id, device_id,
       row_number() OVER (PARTITION BY run_id ORDER BY device_id, start_ns, end_ns, activity, global_pid,
                          correlation_id, sig) AS activity_id,
       activity, global_pid, correlation_id, stream_id, start_ns, end_ns, dur_ns, dynamic_smem_bytes, bytes, ctas,
       threads_per_block, regs_per_thread, static_smem_bytes, kind, corunner_kind, sm_held, launch_occupancy,
       sm_exclusive, sig
FROM _activity_list
