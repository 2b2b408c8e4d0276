-- device_overlap: per device, how long compute and communication ran alone, together and not at all, from the
-- device's first kernel (or peer copy) to its last: the overlap numbers of `traceql overlap`.
-- Exact interval unions (traceql.engine sweeps them; _device_unions is the reference SQL).
-- columns:
--   run_id              VARCHAR  run
--   device_id           INTEGER  physical GPU
--   span_ns             BIGINT   first start to last end of the device's kernels and peer copies (ns)
--   compute_only_ns     BIGINT   compute kernels running, no communication (ns)
--   comm_only_ns        BIGINT   communication running (NCCL kernels, peer copies), no compute kernel (ns)
--   overlap_ns          BIGINT   both running (ns)
--   idle_ns             BIGINT   neither running, within the span (ns)
--   compute_ns          BIGINT   compute kernels running (ns)
--   comm_ns             BIGINT   communication running (ns)
--   comm_overlapped     DOUBLE   share of communication time with compute beside it
--   compute_overlapped  DOUBLE   share of compute time with communication beside it
--   compute_kernels     BIGINT   compute kernels
--   comm_kernels        BIGINT   communication kernels
--   peer_copies         BIGINT   peer-to-peer copies
SELECT u.run_id, u.device_id, s.span_ns, u.compute_ns - u.overlap_ns AS compute_only_ns,
       u.comm_ns - u.overlap_ns AS comm_only_ns, u.overlap_ns,
       s.span_ns - (u.compute_ns + u.comm_ns - u.overlap_ns) AS idle_ns, u.compute_ns, u.comm_ns,
       u.overlap_ns / nullif(u.comm_ns, 0) AS comm_overlapped, u.overlap_ns / nullif(u.compute_ns, 0) AS compute_overlapped,
       s.compute_kernels, s.comm_kernels, s.peer_copies
FROM _device_unions u
JOIN (SELECT run_id, device_id, max(end_ns) - min(start_ns) AS span_ns,
             count(*) FILTER (WHERE activity = 'kernel' AND cls = 1) AS compute_kernels,
             count(*) FILTER (WHERE activity = 'kernel' AND cls = 0) AS comm_kernels,
             count(*) FILTER (WHERE activity = 'memcpy') AS peer_copies
      FROM _union_intervals GROUP BY ALL) s USING (run_id, device_id)
