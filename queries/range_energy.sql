-- range_energy: the energy each NVTX range's GPU used during the range, from the NVML energy counter
-- (traceql collect --power), also for ranges shorter than the sampling period.
-- The counter is cumulative but the GPU updates it in steps: on an H200 about every 100 ms (steps of 7.8 J at
-- 78 W idle in tests/data/h200/suite, sampled every 25 ms), so consecutive samples often repeat a value. Each step
-- (a sample whose value differs from the one before) happened between those two samples: its time is taken as their
-- midpoint, and the counter is interpolated linearly between steps at the range's start and end. The bounds hold
-- whatever the power did between steps (the counter never decreases): energy_lo_j is the difference between the
-- first step surely after the start and the last step surely before the end (0 when there are fewer than two),
-- energy_hi_j between the last step surely before the start and the first surely after the end. A range much
-- shorter than the step period gets a point estimate (the step's mean power times its duration) and a wide
-- interval. Ranges outside the sampled span get NULLs. The energy is the GPU's, whatever ran on it.
-- columns:
--   run_id              VARCHAR  run
--   device_id           INTEGER  physical GPU of the range's process
--   global_pid          BIGINT   process
--   global_tid          BIGINT   thread
--   depth               INTEGER  nesting depth on its thread (0 = outermost)
--   text                VARCHAR  range text
--   case_name           VARCHAR  NAME of a case:NAME;key=value range
--   start_ns            BIGINT   start (ns)
--   end_ns              BIGINT   end (ns)
--   dur_ns              BIGINT   duration (ns)
--   counter_steps       BIGINT   energy-counter steps surely inside the range
--   energy_j            DOUBLE   counter interpolated between its steps at the range's end minus at its start (J)
--   energy_lo_j         DOUBLE   lower bound of the energy (J)
--   energy_hi_j         DOUBLE   upper bound of the energy (J)
--   mean_power_w        DOUBLE   energy_j / duration (W)
--   mean_power_lo_w     DOUBLE   energy_lo_j / duration (W)
--   mean_power_hi_w     DOUBLE   energy_hi_j / duration (W)
WITH samples AS (
    SELECT run_id, device_id, ts_ns, energy_j, lag(ts_ns) OVER w AS prev_ns, lag(energy_j) OVER w AS prev_j
    FROM power WHERE energy_j IS NOT NULL AND device_id IS NOT NULL
    WINDOW w AS (PARTITION BY run_id, device_id ORDER BY ts_ns)
), steps AS (
    -- lo_ns..hi_ns: when the step happened; t_ns: the time taken for it
    SELECT run_id, device_id, prev_ns AS lo_ns, ts_ns AS hi_ns, (prev_ns + ts_ns) // 2 AS t_ns, energy_j,
           row_number() OVER (PARTITION BY run_id, device_id ORDER BY ts_ns) AS k
    FROM samples WHERE energy_j <> prev_j
), ranges AS (
    SELECT * FROM nvtx_device_ranges
    WHERE device_id IS NOT NULL AND (run_id, device_id) IN (SELECT DISTINCT run_id, device_id FROM steps)
), bounds AS (
    SELECT r.*,
           sb.t_ns AS t_sb, sb.energy_j AS e_sb, sa.t_ns AS t_sa, sa.energy_j AS e_sa,  -- steps around the start
           eb.t_ns AS t_eb, eb.energy_j AS e_eb, ea.t_ns AS t_ea, ea.energy_j AS e_ea,  -- and around the end
           li.k AS k_li, li.energy_j AS e_li, lj.k AS k_lj, lj.energy_j AS e_lj,      -- surely inside
           ui.energy_j AS e_ui, uj.energy_j AS e_uj                                     -- surely outside
    FROM ranges r
    ASOF LEFT JOIN steps sb ON sb.run_id = r.run_id AND sb.device_id = r.device_id AND sb.t_ns <= r.start_ns
    ASOF LEFT JOIN steps sa ON sa.run_id = r.run_id AND sa.device_id = r.device_id AND sa.t_ns >= r.start_ns
    ASOF LEFT JOIN steps eb ON eb.run_id = r.run_id AND eb.device_id = r.device_id AND eb.t_ns <= r.end_ns
    ASOF LEFT JOIN steps ea ON ea.run_id = r.run_id AND ea.device_id = r.device_id AND ea.t_ns >= r.end_ns
    ASOF LEFT JOIN steps li ON li.run_id = r.run_id AND li.device_id = r.device_id AND li.lo_ns >= r.start_ns
    ASOF LEFT JOIN steps lj ON lj.run_id = r.run_id AND lj.device_id = r.device_id AND lj.hi_ns <= r.end_ns
    ASOF LEFT JOIN steps ui ON ui.run_id = r.run_id AND ui.device_id = r.device_id AND ui.hi_ns <= r.start_ns
    ASOF LEFT JOIN steps uj ON uj.run_id = r.run_id AND uj.device_id = r.device_id AND uj.lo_ns >= r.end_ns
), energy AS (
    SELECT *, t_sb IS NOT NULL AND t_ea IS NOT NULL AS sampled,
           CASE WHEN t_sa = t_sb THEN e_sb ELSE e_sb + (e_sa - e_sb) * (start_ns - t_sb) / (t_sa - t_sb) END AS e_start,
           CASE WHEN t_ea = t_eb THEN e_eb ELSE e_eb + (e_ea - e_eb) * (end_ns - t_eb) / (t_ea - t_eb) END AS e_end,
           CASE WHEN k_li < k_lj THEN e_lj - e_li ELSE 0.0 END AS e_lo,
           e_uj - e_ui AS e_hi
    FROM bounds
)
SELECT run_id, device_id, global_pid, global_tid, depth, text, case_name, start_ns, end_ns, dur_ns,
       CASE WHEN sampled THEN greatest(coalesce(k_lj - k_li + 1, 0), 0) END AS counter_steps,
       CASE WHEN sampled THEN e_end - e_start END AS energy_j,
       CASE WHEN sampled THEN e_lo END AS energy_lo_j,
       CASE WHEN sampled THEN e_hi END AS energy_hi_j,
       CASE WHEN sampled THEN (e_end - e_start) / nullif(dur_ns / 1e9, 0) END AS mean_power_w,
       CASE WHEN sampled THEN e_lo / nullif(dur_ns / 1e9, 0) END AS mean_power_lo_w,
       CASE WHEN sampled THEN e_hi / nullif(dur_ns / 1e9, 0) END AS mean_power_hi_w
FROM energy
