-- paper_power: per (mode range, GPU) of paper_iterations, its GPU span and the NVML samples inside it (one row per
-- sample; one row with NULL sample columns when none fell inside). NVML's energy counter and power reading change
-- only every ~100 ms on H200 (run_update_ns says how often in this run), far less often than they are sampled, so
-- energy over a range needs counter updates inside it: a sample whose energy differs from the sample before it is
-- an update, taken to have happened midway between the two samples. traceql.paper turns these rows into energy,
-- mean and peak power per mode, with intervals.
-- columns:
--   run_id           VARCHAR  run
--   workload         VARCHAR  case name, or 'mode'
--   op               VARCHAR  collective label, or NULL
--   dtype            VARCHAR  data type label, or NULL
--   bytes            BIGINT   message size label (bytes), or NULL
--   max_ctas         VARCHAR  NCCL_MAX_CTAS in force
--   config           VARCHAR  other labels
--   mode             VARCHAR  compute, comm, overlapped or sequential
--   global_pid       BIGINT   process
--   device_id        INTEGER  physical GPU
--   mode_start_ns    BIGINT   start of the mode range
--   span_start_ns    BIGINT   first GPU activity of the mode range on this GPU (ns)
--   span_end_ns      BIGINT   last GPU activity's end (ns)
--   iterations       BIGINT   iterations in the mode range
--   run_samples      BIGINT   NVML samples of this GPU in the whole run (0: no power data)
--   run_update_ns    DOUBLE   median time between energy counter updates in the run (ns)
--   ts_ns            BIGINT   sample time (ns), NULL when no sample fell inside the span
--   power_w          DOUBLE   power reading (W)
--   energy_j         DOUBLE   energy counter (J)
--   energy_update    BOOLEAN  the energy counter changed since the sample before
--   update_ns        BIGINT   when it changed: the midpoint between this sample and the one before (ns)
--   power_limit_w    DOUBLE   enforced power limit (W)
--   sm_clock_mhz     DOUBLE   SM clock of the sample (MHz)
WITH spans AS (
    SELECT run_id, workload, op, dtype, bytes, max_ctas, config, mode, global_pid, device_id, mode_start_ns,
           min(first_start_ns) AS span_start_ns, max(last_end_ns) AS span_end_ns, count(*) AS iterations
    FROM paper_iterations GROUP BY ALL
), samples AS (
    SELECT run_id, device_id, ts_ns, power_w, energy_j, power_limit_w, sm_clock_mhz,
           energy_j IS DISTINCT FROM lag(energy_j) OVER w AND lag(energy_j) OVER w IS NOT NULL AS energy_update,
           (ts_ns + lag(ts_ns) OVER w) // 2 AS update_ns
    FROM power
    WINDOW w AS (PARTITION BY run_id, device_id ORDER BY ts_ns)
), updates AS (
    SELECT run_id, device_id, ts_ns - lag(ts_ns) OVER (PARTITION BY run_id, device_id ORDER BY ts_ns) AS gap_ns
    FROM samples WHERE energy_update
)
SELECT sp.run_id, sp.workload, sp.op, sp.dtype, sp.bytes, sp.max_ctas, sp.config, sp.mode, sp.global_pid,
       sp.device_id, sp.mode_start_ns, sp.span_start_ns, sp.span_end_ns, sp.iterations,
       coalesce(d.run_samples, 0) AS run_samples, u.run_update_ns::DOUBLE AS run_update_ns, s.ts_ns, s.power_w,
       s.energy_j, s.energy_update, CASE WHEN s.energy_update THEN s.update_ns END AS update_ns, s.power_limit_w,
       s.sm_clock_mhz
FROM spans sp
LEFT JOIN (SELECT run_id, device_id, count(*) AS run_samples FROM samples GROUP BY ALL) d
       ON d.run_id = sp.run_id AND d.device_id = sp.device_id
LEFT JOIN (SELECT run_id, device_id, median(gap_ns) AS run_update_ns FROM updates GROUP BY ALL) u
       ON u.run_id = sp.run_id AND u.device_id = sp.device_id
LEFT JOIN samples s ON s.run_id = sp.run_id AND s.device_id = sp.device_id
     AND s.ts_ns >= sp.span_start_ns AND s.ts_ns <= sp.span_end_ns
