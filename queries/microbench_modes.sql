-- microbench_modes: the overlap microbenchmark's four modes side by side (compute only, communication only,
-- overlapped, sequential), one row per (run, device, configuration, mode), from the NVTX ranges
-- case:overlap;mode=...;op=...;dtype=...;bytes=...;max_ctas=... that `traceql bench overlap` writes.
-- Each case range is synchronized at both ends, so its duration is GPU time; kernels belong to the range of their
-- launching thread (runtime_api correlation).
-- A range whose GPU was idle most of the time measured something else than its GPU work (cuBLAS or NCCL first use,
-- host launch overhead): mostly_idle flags gpu_busy_fraction < 0.25. Measured: cases of tests/data/h200/suite whose
-- configuration was never warmed up (cuBLAS first use in their first GEMM) 0.046-0.071; every warmed-up case of
-- tests/data/h200x2 (collectors/reproduction.sh) 0.50 and above (the lowest: collectives of 16 MiB alone, whose
-- iterations are host-launch bound, 0.50-0.95; GEMM modes 0.956-0.998). Ranges of a first use whose kernels are
-- long enough to dominate anyway (fp32 GEMMs, 0.60-0.67 in the suite) are not flagged.
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
--   gpu_busy_fraction   DOUBLE   share of the range during which its GPU ran anything (union of kernels, copies, sets)
--   mostly_idle         BOOLEAN  gpu_busy_fraction < 0.25: the range timed mostly host work or first use
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
), activity AS (
    SELECT run_id, device_id, start_ns, end_ns FROM kernels
    UNION ALL SELECT run_id, device_id, start_ns, end_ns FROM memcpy
    UNION ALL SELECT run_id, device_id, start_ns, end_ns FROM memset
), clipped AS (
    SELECT c.run_id, c.global_tid, c.start_ns, greatest(a.start_ns, c.start_ns) AS s, least(a.end_ns, c.end_ns) AS e
    FROM cases c JOIN launched l USING (run_id, global_tid, start_ns)
    JOIN activity a
      ON a.run_id = c.run_id AND a.device_id = l.device_id AND a.start_ns < c.end_ns AND a.end_ns > c.start_ns
), busy AS (
    -- the union's length: sorted by start, each interval adds what reaches past the furthest end before it
    SELECT run_id, global_tid, start_ns, sum(greatest(0, e - greatest(s, coalesce(reach, s)))) AS busy_ns
    FROM (SELECT *, max(e) OVER (PARTITION BY run_id, global_tid, start_ns ORDER BY s, e
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach FROM clipped)
    GROUP BY ALL
)
SELECT c.run_id, l.device_id, c.op, c.dtype, c.bytes, c.max_ctas, c.mode, coalesce(i.iters, 1) AS iters,
       c.dur_ns AS wall_ns, c.dur_ns / coalesce(i.iters, 1) AS iter_ns,
       coalesce(l.compute_ns, 0)::BIGINT AS compute_ns, coalesce(l.comm_ns, 0)::BIGINT AS comm_ns,
       coalesce(l.compute_ns, 0) / coalesce(i.iters, 1) AS compute_per_iter_ns,
       coalesce(l.comm_ns, 0) / coalesce(i.iters, 1) AS comm_per_iter_ns,
       coalesce(b.busy_ns, 0) / nullif(c.dur_ns, 0) AS gpu_busy_fraction,
       coalesce(b.busy_ns, 0) / nullif(c.dur_ns, 0) < 0.25 AS mostly_idle
FROM cases c
LEFT JOIN iters i USING (run_id, global_tid, start_ns)
LEFT JOIN launched l USING (run_id, global_tid, start_ns)
LEFT JOIN busy b USING (run_id, global_tid, start_ns)
