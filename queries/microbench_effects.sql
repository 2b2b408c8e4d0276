-- microbench_effects: per overlap-microbenchmark configuration, the research's two numbers: how much slower the
-- compute kernels ran when overlapped than in the compute-only mode (sum of compute kernel time, all GPUs), and how
-- much longer running one after the other (sequential) took than overlapping (wall time per iteration).
-- columns:
--   run_id                      VARCHAR  run
--   op                          VARCHAR  collective
--   dtype                       VARCHAR  data type
--   bytes                       BIGINT   message size (bytes)
--   max_ctas                    VARCHAR  NCCL_MAX_CTAS in force
--   gpus                        BIGINT   GPUs measured
--   compute_only_iter_ns        DOUBLE   compute mode: time per iteration, mean over GPUs (ns)
--   comm_only_iter_ns           DOUBLE   comm mode: time per iteration, mean over GPUs (ns)
--   sequential_iter_ns          DOUBLE   sequential mode: time per iteration, mean over GPUs (ns)
--   overlapped_iter_ns          DOUBLE   overlapped mode: time per iteration, mean over GPUs (ns)
--   compute_slowdown            DOUBLE   compute kernel time overlapped / compute only - 1
--   sequential_over_overlapped  DOUBLE   sequential / overlapped time per iteration - 1
--   overlap_efficiency          DOUBLE   (T_seq - T_ovl) / (T_seq - max(T_compute, T_comm)): 1 = perfectly hidden
--   gpu_busy_fraction_min       DOUBLE   lowest gpu_busy_fraction of the configuration's mode ranges
--   mostly_idle                 BOOLEAN  a mode range of the configuration is mostly idle (microbench_modes): its
--                                        times are not GPU work, and the numbers above mislead
WITH m AS (
    SELECT run_id, op, dtype, bytes, max_ctas, count(DISTINCT device_id) AS gpus,
           avg(iter_ns) FILTER (mode = 'compute') AS compute_only_iter_ns,
           avg(iter_ns) FILTER (mode = 'comm') AS comm_only_iter_ns,
           avg(iter_ns) FILTER (mode = 'sequential') AS sequential_iter_ns,
           avg(iter_ns) FILTER (mode = 'overlapped') AS overlapped_iter_ns,
           sum(compute_per_iter_ns) FILTER (mode = 'overlapped') AS compute_ovl,
           sum(compute_per_iter_ns) FILTER (mode = 'compute') AS compute_alone,
           min(gpu_busy_fraction) AS gpu_busy_fraction_min, bool_or(mostly_idle) AS mostly_idle
    FROM microbench_modes WHERE device_id IS NOT NULL GROUP BY ALL
)
SELECT run_id, op, dtype, bytes, max_ctas, gpus, compute_only_iter_ns, comm_only_iter_ns, sequential_iter_ns,
       overlapped_iter_ns, compute_ovl / nullif(compute_alone, 0) - 1 AS compute_slowdown,
       sequential_iter_ns / nullif(overlapped_iter_ns, 0) - 1 AS sequential_over_overlapped,
       (sequential_iter_ns - overlapped_iter_ns)
           / nullif(sequential_iter_ns - greatest(compute_only_iter_ns, comm_only_iter_ns), 0) AS overlap_efficiency,
       gpu_busy_fraction_min, mostly_idle
FROM m
