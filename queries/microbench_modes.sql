-- microbench_modes: the overlap microbenchmark's four modes side by side (compute only, communication only,
-- overlapped, sequential), one row per (run, device, configuration, mode), from the NVTX ranges
-- case:overlap;mode=...;op=...;dtype=...;bytes=...;max_ctas=... that `traceql bench overlap` writes.
-- Each case range is synchronized at both ends, so its duration is GPU time; kernels belong to the range of their
-- launching thread (runtime_api correlation).
-- columns:
--   run_id              VARCHAR  run
--   device_id           INTEGER  physical GPU
--   op                  VARCHAR  collective: all_reduce, all_gather, reduce_scatter
--   dtype               VARCHAR  data type: bf16, fp16, tf32, fp32
--   bytes               BIGINT   message size (bytes)
--   max_ctas            VARCHAR  NCCL_MAX_CTAS in force (default when unset)
--   mode                VARCHAR  compute, comm, overlapped or sequential
--   iters               BIGINT   iterations in the range
--   wall_ns             BIGINT   duration of the case range (ns)
--   iter_ns             DOUBLE   wall_ns / iters (ns)
--   compute_ns          BIGINT   summed duration of its compute kernels (ns)
--   comm_ns             BIGINT   summed duration of its communication kernels (ns)
--   compute_per_iter_ns DOUBLE   compute_ns / iters (ns)
--   comm_per_iter_ns    DOUBLE   comm_ns / iters (ns)
WITH cases AS (
    SELECT run_id, global_pid, global_tid, start_ns, end_ns, dur_ns, labels['op'] AS op, labels['dtype'] AS dtype,
           TRY_CAST(labels['bytes'] AS BIGINT) AS bytes, coalesce(labels['max_ctas'], 'default') AS max_ctas,
           labels['mode'] AS mode
    FROM nvtx WHERE case_name = 'overlap' AND labels['mode'] IS NOT NULL AND end_ns IS NOT NULL
), iters AS (
    SELECT c.run_id, c.global_tid, c.start_ns, count(*) AS iters
    FROM cases c JOIN nvtx i
      ON i.run_id = c.run_id AND i.global_tid = c.global_tid AND i.start_ns >= c.start_ns AND i.end_ns <= c.end_ns
    WHERE i.text LIKE 'iter%'
    GROUP BY ALL
), launched AS (
    SELECT c.run_id, c.global_tid, c.start_ns, any_value(k.device_id) AS device_id,
           sum(k.dur_ns) FILTER (k.kind = 'compute') AS compute_ns, sum(k.dur_ns) FILTER (k.kind = 'comm') AS comm_ns
    FROM cases c
    JOIN runtime_api r
      ON r.run_id = c.run_id AND r.global_tid = c.global_tid AND r.start_ns BETWEEN c.start_ns AND c.end_ns
    JOIN kernels k ON k.run_id = r.run_id AND k.global_pid = r.global_pid AND k.correlation_id = r.correlation_id
    GROUP BY ALL
)
SELECT c.run_id, l.device_id, c.op, c.dtype, c.bytes, c.max_ctas, c.mode, coalesce(i.iters, 1) AS iters,
       c.dur_ns AS wall_ns, c.dur_ns / coalesce(i.iters, 1) AS iter_ns,
       coalesce(l.compute_ns, 0)::BIGINT AS compute_ns, coalesce(l.comm_ns, 0)::BIGINT AS comm_ns,
       coalesce(l.compute_ns, 0) / coalesce(i.iters, 1) AS compute_per_iter_ns,
       coalesce(l.comm_ns, 0) / coalesce(i.iters, 1) AS comm_per_iter_ns
FROM cases c
LEFT JOIN iters i USING (run_id, global_tid, start_ns)
LEFT JOIN launched l USING (run_id, global_tid, start_ns)
