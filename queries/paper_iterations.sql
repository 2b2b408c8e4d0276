-- paper_iterations: one row per (mode range, GPU, iteration) of paper_ranges: the GPU work its process launched
-- during the iteration (any thread of the process; launch time from runtime_api; what an iteration is: _paper_work),
-- as the paper counts it. Compute is every non-communication kernel; communication is communication kernels and
-- peer copies (instance_facts' activity_class). Times are GPU times: wall_ns runs from the end of the iteration's
-- last GPU activity back to the end of the iteration that finished before it (the first: back to the mode range's
-- first GPU activity), so the iterations of a mode range add up to its GPU span however far the CPU ran ahead, and
-- in a steady state each is the time between completions, whichever stream finishes last.
-- columns:
--   run_id           VARCHAR  run
--   workload         VARCHAR  case name, or 'mode' (paper_ranges)
--   op               VARCHAR  collective label, or NULL
--   dtype            VARCHAR  data type label, or NULL
--   bytes            BIGINT   message size label (bytes), or NULL
--   max_ctas         VARCHAR  NCCL_MAX_CTAS in force
--   config           VARCHAR  other labels (paper_ranges)
--   mode             VARCHAR  compute, comm, overlapped or sequential
--   global_pid       BIGINT   process
--   device_id        INTEGER  physical GPU
--   sm_count         INTEGER  SMs on the GPU
--   mode_start_ns    BIGINT   start of the mode range (identifies it within the process)
--   iteration        VARCHAR  iteration label, or the nested range's text
--   iter_start_ns    BIGINT   iteration range start, CPU side (ns)
--   first_start_ns   BIGINT   start of its first GPU activity (ns)
--   last_end_ns      BIGINT   end of its last GPU activity (ns)
--   wall_ns          BIGINT   GPU time of the iteration (ns; see above)
--   compute_ns       BIGINT   summed duration of its compute kernels (ns)
--   comm_ns          BIGINT   summed duration of its communication kernels and peer copies (ns)
--   hidden_comm_ns   BIGINT   communication time that compute kernels overlapped (ns)
--   compute_ovl_ns   BIGINT   compute time that communication overlapped (ns)
--   comm_sm_ns       DOUBLE   communication time x SMs its CTAs held (SM-ns; / comm_ns = mean SMs held)
--   kernels          BIGINT   GPU activities (kernels, copies, sets)
--   compute_clock_mhz_ns DOUBLE sum over its compute kernels with a GPU-metric clock of duration x clock (MHz ns)
--   compute_clocked_ns BIGINT  summed duration of those kernels (ns): the ratio is the clock its compute ran at
WITH per_iter AS (
    SELECT run_id, workload, op, dtype, bytes, max_ctas, config, mode, global_pid, mode_start_ns, iteration,
           iter_start_ns, device_id, any_value(sm_count) AS sm_count,
           min(start_ns) AS first_start_ns, max(end_ns) AS last_end_ns,
           coalesce(sum(dur_ns) FILTER (activity = 'kernel' AND activity_class <> 'comm'), 0)::BIGINT AS compute_ns,
           coalesce(sum(dur_ns) FILTER (activity_class = 'comm'), 0)::BIGINT AS comm_ns,
           coalesce(sum(compute_overlap_ns) FILTER (activity_class = 'comm'), 0)::BIGINT AS hidden_comm_ns,
           coalesce(sum(comm_overlap_ns) FILTER (activity = 'kernel' AND activity_class <> 'comm'), 0)::BIGINT
               AS compute_ovl_ns,
           coalesce(sum(dur_ns * least(coalesce(ctas, 0), sm_count)) FILTER (activity_class = 'comm'), 0)::DOUBLE
               AS comm_sm_ns,
           count(*) AS kernels,
           sum(dur_ns * gpc_clock_mhz) FILTER (activity = 'kernel' AND activity_class <> 'comm')::DOUBLE
               AS compute_clock_mhz_ns,
           coalesce(sum(dur_ns) FILTER (activity = 'kernel' AND activity_class <> 'comm'
                                        AND gpc_clock_mhz IS NOT NULL), 0)::BIGINT AS compute_clocked_ns
    FROM _paper_work GROUP BY ALL
)
SELECT run_id, workload, op, dtype, bytes, max_ctas, config, mode, global_pid, device_id, sm_count, mode_start_ns,
       iteration, iter_start_ns, first_start_ns, last_end_ns,
       (last_end_ns - coalesce(lag(last_end_ns) OVER w,
                               min(first_start_ns) OVER (PARTITION BY run_id, global_pid, mode_start_ns, device_id)))
           ::BIGINT AS wall_ns,
       compute_ns, comm_ns, hidden_comm_ns, compute_ovl_ns, comm_sm_ns, kernels, compute_clock_mhz_ns,
       compute_clocked_ns
FROM per_iter
WINDOW w AS (PARTITION BY run_id, global_pid, mode_start_ns, device_id ORDER BY last_end_ns, iter_start_ns)
