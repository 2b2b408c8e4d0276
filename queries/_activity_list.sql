-- _activity_list: every GPU activity (kernels of every kind, copies, sets), not yet numbered (_activity_rows numbers
-- them), without its names: those belong to its signature (_signatures).
-- Kind labels a row; it never decides whether a row is analysed. The signature identifies the same work:
-- (name, grid, block, dynamic shared memory) for kernels, (copy kind, bytes) for copies and sets.
-- columns:
--   run_id              VARCHAR  run
--   device_id           INTEGER  physical GPU
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
SELECT k.run_id, k.device_id, 'kernel' AS activity, k.global_pid, k.correlation_id, k.stream_id, k.start_ns,
       k.end_ns, k.dur_ns, k.dynamic_smem_bytes, NULL::BIGINT AS bytes,
       k.ctas, k.threads_per_block, k.regs_per_thread, k.static_smem_bytes, k.kind,
       CASE WHEN k.kind = 'comm' THEN 'comm' ELSE 'compute' END AS corunner_kind,
       least(k.ctas, coalesce(d.sm_count, k.ctas))::BIGINT AS sm_held,
       -- CTAs per SM: the tightest of the block, warp, register and shared-memory limits
       greatest(1, least(
           coalesce(d.max_blocks_per_sm, 32),
           coalesce(d.max_warps_per_sm, 64) // greatest(1, ceil(k.threads_per_block / 32.0))::BIGINT,
           CASE WHEN k.regs_per_thread > 0 THEN coalesce(d.max_regs_per_sm, 65536)
                // (k.regs_per_thread * 32 * ceil(k.threads_per_block / 32.0))::BIGINT END,
           CASE WHEN k.dynamic_smem_bytes + k.static_smem_bytes > 0 THEN coalesce(d.max_smem_per_sm_bytes, 233472)
                // (k.dynamic_smem_bytes + k.static_smem_bytes) END))::BIGINT AS launch_occupancy,
       CASE WHEN 2 * ceil(k.threads_per_block / 32.0) > coalesce(d.max_warps_per_sm, 64)
                 OR 2 * k.regs_per_thread * 32 * ceil(k.threads_per_block / 32.0) > coalesce(d.max_regs_per_sm, 65536)
                 OR 2 * (k.dynamic_smem_bytes + k.static_smem_bytes) > coalesce(d.max_smem_per_sm_bytes, 233472)
            THEN least(k.ctas, coalesce(d.sm_count, k.ctas)) ELSE 0 END::BIGINT AS sm_exclusive,
       k.sig
FROM kernels k LEFT JOIN devices d USING (run_id, device_id)
UNION ALL
SELECT run_id, device_id, 'memcpy', global_pid, correlation_id, stream_id, start_ns, end_ns, dur_ns,
       NULL, bytes, NULL, NULL, NULL, NULL, CASE WHEN is_peer THEN 'comm' ELSE 'copy' END,
       CASE WHEN is_peer THEN 'comm' ELSE 'copy' END, 0, NULL, 0, sig
FROM memcpy
UNION ALL
SELECT run_id, device_id, 'memset', global_pid, correlation_id, stream_id, start_ns, end_ns, dur_ns,
       NULL, bytes, NULL, NULL, NULL, NULL, 'copy', 'copy', 0, NULL, 0, sig
FROM memset
