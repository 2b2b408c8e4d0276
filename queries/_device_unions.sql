-- _device_unions: per device, how long compute kernels, communication and both were running (interval unions).
-- Reference SQL: traceql.attribution.prepare replaces it with the engine's exact sweep (traceql/engine).
-- columns:
--   run_id      VARCHAR  run
--   device_id   INTEGER  physical GPU
--   compute_ns  BIGINT   time with a non-communication kernel running (ns)
--   comm_ns     BIGINT   time with communication running: NCCL kernels, peer copies (ns)
--   overlap_ns  BIGINT   time with both running (ns)
SELECT run_id, device_id, arg_max(compute_ns, t)::BIGINT AS compute_ns, arg_max(comm_ns, t)::BIGINT AS comm_ns,
       arg_max(comm_compute_ns, t)::BIGINT AS overlap_ns
FROM _activity_steps GROUP BY ALL
