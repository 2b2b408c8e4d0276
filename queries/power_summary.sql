-- power_summary: per device, NVML power over the collection: mean power from the energy counter (the accurate
-- figure: the counter integrates every millisecond, samples do not), the peak sample, both against the enforced
-- limit, and the SM clock range (clock events under a power or thermal cap show as a lower minimum).
-- columns:
--   run_id              VARCHAR  run
--   device_id           INTEGER  physical GPU
--   samples             BIGINT   NVML samples
--   span_ns             BIGINT   last minus first sample time (ns)
--   energy_j            DOUBLE   energy counter difference over the span (J)
--   mean_power_w        DOUBLE   energy_j / span (W); NULL without an energy counter
--   mean_sample_power_w DOUBLE   mean of the power samples (W)
--   peak_power_w        DOUBLE   highest power sample (W)
--   power_limit_w       DOUBLE   enforced power limit (W)
--   peak_of_limit       DOUBLE   peak_power_w / power_limit_w
--   mean_of_limit       DOUBLE   mean power (energy counter, else samples) / power_limit_w
--   sm_clock_mhz_min    DOUBLE   lowest SM clock sample (MHz)
--   sm_clock_mhz_max    DOUBLE   highest SM clock sample (MHz)
--   throttled_samples   BIGINT   samples with any clock event (throttle) reason other than idle
SELECT run_id, device_id, count(*) AS samples, (max(ts_ns) - min(ts_ns))::BIGINT AS span_ns,
       arg_max(energy_j, ts_ns) - arg_min(energy_j, ts_ns) AS energy_j,
       (arg_max(energy_j, ts_ns) - arg_min(energy_j, ts_ns)) / nullif((max(ts_ns) - min(ts_ns)) / 1e9, 0)
           AS mean_power_w,
       avg(power_w) AS mean_sample_power_w, max(power_w) AS peak_power_w, max(power_limit_w) AS power_limit_w,
       max(power_w) / nullif(max(power_limit_w), 0) AS peak_of_limit,
       coalesce((arg_max(energy_j, ts_ns) - arg_min(energy_j, ts_ns)) / nullif((max(ts_ns) - min(ts_ns)) / 1e9, 0),
                avg(power_w)) / nullif(max(power_limit_w), 0) AS mean_of_limit,
       min(sm_clock_mhz) AS sm_clock_mhz_min, max(sm_clock_mhz) AS sm_clock_mhz_max,
       count(*) FILTER (coalesce(throttle_reasons, 0) & ~1 <> 0) AS throttled_samples
FROM power GROUP BY ALL
