-- instance_predictions: per overlapped GPU activity instance with a baseline, what each contended resource
-- predicts for its slowdown, as an interval [lo, hi] and a point, in units of the instance's own slowdown
-- (t/t0 - 1). A model predicts from what the co-runners demand and what the device shows it can supply; none of
-- them takes "what is left" of the observed slowdown. Thresholds: _thresholds; device limits: _device_calibration.
-- SM: the co-runners' SMs (their CTAs, capped at the SM count); the bracket
--     between the throughput form S/(S-N) - 1 and the wave form ceil(B/(occ(S-N)))/ceil(B/(occ S)) - 1, no loss
--     when the CTAs fit in the free SMs; for a bandwidth-bound victim a roofline: loss only when the free SMs,
--     at the best per-SM DRAM rate the trace shows (+-10%), cannot pull the victim's isolated rate. When the
--     co-runners leave less than one SM free (on average over the overlap), the victim's CTAs run beside theirs
--     and share issue slots: from no loss to 2x.
-- DRAM: only when the device rate during the instance reaches dram_busy_frac of saturation; from the demand
--     alone of victim and co-runners: proportional sharing (lo) up to the victim getting only what the co-runners
--     leave (hi); the point divides the demand by the rate measured.
-- cache: only beside a co-runner with a footprint (DRAM traffic or a profiled working set); the witness is DRAM
--     traffic beyond what victim and co-runners move alone; the victim's share of it, over its own bytes, is the
--     time it costs at its bandwidth share (+-5% of the measured rate; co-runners stretched like the victim, or not). Without GPU metrics, a profiled working set
--     that fits in L2 alone but not beside the co-runners' brackets the loss between none and all L2 hits missing.
-- clock: the isolated clock over the instance's clock (its cycles unchanged), down to no effect: how much of a
--     kernel's time follows the SM clock is not measured; the point is the full effect for a kernel that does not
--     wait on DRAM, none for a bandwidth-bound one, a collective or a copy.
-- The cache witness needs 2+ metric samples inside the instance and a victim the SM model predicts no loss for.
-- link: communication beside other communication may share links: up to doubling while they overlap.
-- SM and DRAM predictions are for the overlapped time and scale with the overlap fraction f.
-- columns:
--   run_id              VARCHAR  run
--   device_id           INTEGER  physical GPU
--   activity_id         BIGINT   activity (_activities)
--   group_id            BIGINT   its group (_signature_stats)
--   observed            DOUBLE   its slowdown: dur_ns / t0_ns - 1
--   f                   DOUBLE   overlap fraction
--   held_sms            DOUBLE   SMs co-running kernels held while overlapping it (capped at the SM count)
--   free_sms            DOUBLE   SMs left to it
--   occupancy           BIGINT   CTAs per SM (Nsight Compute's, else the launch configuration's)
--   memory_bound        BOOLEAN  isolated DRAM rate >= memory_bound_frac of saturation
--   dram_iso_pct        DOUBLE   the victim's isolated DRAM rate (% of peak; GPU metrics, else Nsight Compute)
--   co_dram_pct         DOUBLE   co-runners' isolated DRAM rate while overlapping it (% of peak)
--   dram_pct            DOUBLE   device DRAM rate measured during it (% of peak)
--   dram_sat_pct        DOUBLE   the device's DRAM saturation (_device_calibration)
--   extra_bytes_frac    DOUBLE   DRAM traffic during it beyond what victim and co-runners move alone, relative
--   footprint           BOOLEAN  a co-runner has a cache footprint
--   sm_lo               DOUBLE   SM prediction, low
--   sm_pt               DOUBLE   SM prediction, point
--   sm_hi               DOUBLE   SM prediction, high
--   dram_lo             DOUBLE   DRAM prediction, low
--   dram_pt             DOUBLE   DRAM prediction, point
--   dram_hi             DOUBLE   DRAM prediction, high
--   cache_lo            DOUBLE   cache prediction, low
--   cache_pt            DOUBLE   cache prediction, point
--   cache_hi            DOUBLE   cache prediction, high
--   clock_lo            DOUBLE   clock prediction, low
--   clock_pt            DOUBLE   clock prediction, point
--   clock_hi            DOUBLE   clock prediction, high
--   link_lo             DOUBLE   link prediction, low
--   link_pt             DOUBLE   link prediction, point
--   link_hi             DOUBLE   link prediction, high
--   clock_power         BOOLEAN  the clock dropped while the device drew more power than in isolation (NVML)
--   cache_evidence      VARCHAR  dram_bytes (traffic beyond the alone rates), ncu_working_set (profiles), or NULL
WITH inst AS (
    SELECT i.run_id, i.device_id, i.activity_id, b.group_id, i.activity, i.activity_class, i.dur_ns, b.t0_ns,
           i.samples,
           i.overlap_fraction AS f, i.comm_fraction, i.ctas, i.sm_count AS s_count,
           coalesce(n.ctas_per_sm, i.launch_occupancy) AS occ,
           least(coalesce(i.corunner_sms, 0), i.sm_count) AS held,
           coalesce(p.dram_pct_iso, n.dram_pct) AS r_v, i.co_dram_pct AS r_c, i.dram_pct AS c_dram,
           p.gpc_clock_mhz_iso AS clock_iso, i.gpc_clock_mhz AS clock, p.power_w_iso AS power_iso, i.power_w,
           n.l2_hit_pct, n.working_set_bytes, i.co_working_set_bytes, d.l2_bytes,
           -- the victim's own alone rate is evidently achievable (Nsight Compute's scale may differ a little)
           greatest(c.dram_sat_pct, coalesce(p.dram_pct_iso, n.dram_pct, 0)) AS sat, c.dram_per_sm_pct AS per_sm,
           t.memory_bound_frac, t.dram_busy_frac, t.footprint_min_pct, t.cache_extra_min
    FROM instance_facts i JOIN _instance_baselines b USING (run_id, activity_id)
    -- the medians over the isolated instances of its pool (traceql.baselines)
    LEFT JOIN _signature_stats p ON p.group_id = b.group_id
    LEFT JOIN _ncu_demand n ON n.run_id = i.run_id AND n.device_id = i.device_id AND n.sig = i.sig
    LEFT JOIN _device_calibration c ON c.run_id = i.run_id AND c.device_id = i.device_id
    LEFT JOIN devices d ON d.run_id = i.run_id AND d.device_id = i.device_id
    CROSS JOIN _thresholds t
    WHERE i.overlap_ns > 0 AND b.t0_ns > 0
), shaped AS (
    SELECT *,
           s_count - held AS free,
           coalesce(r_v >= memory_bound_frac * sat, false) AS memory_bound,
           -- bytes the victim's work needs, plus what the co-runners move while beside it: at their alone rate
           -- for as long as their own work would take (co-runners stretched like the victim), or for the whole
           -- overlap (co-runners not stretched at all): the two ends of the cache interval
           r_v * t0_ns + coalesce(r_c, 0) * f * t0_ns AS bytes_alone,
           r_v * t0_ns + coalesce(r_c, 0) * f * dur_ns AS bytes_alone_max,
           coalesce(r_c >= footprint_min_pct, false) OR coalesce(co_working_set_bytes > 0, false) AS footprint
    FROM inst
), sm AS (
    SELECT *,
        -- co-runners on every SM: the victim's CTAs run beside theirs, sharing issue slots: up to twice as long
        CASE WHEN activity <> 'kernel' OR held <= 0 OR ctas <= occ * free THEN 0
             WHEN free < 1 THEN 1 ELSE s_count / free - 1 END AS sm_tput,
        CASE WHEN activity <> 'kernel' OR held <= 0 OR ctas <= occ * free THEN 0
             WHEN free < 1 THEN 0
             ELSE ceil(ctas / (occ * free)) / ceil(ctas / (occ * s_count)) - 1 END AS sm_wave,
        CASE WHEN free >= 1 THEN greatest(0, r_v / least(sat, per_sm * 1.1 * free) - 1) END AS roof_lo,
        CASE WHEN free >= 1 THEN greatest(0, r_v / least(sat, per_sm * free) - 1) END AS roof_pt,
        CASE WHEN free >= 1 THEN greatest(0, r_v / least(sat, per_sm * 0.9 * free) - 1) END AS roof_hi,
        coalesce(c_dram >= dram_busy_frac * sat, r_v + r_c > sat) AS dram_busy,
        c_dram * dur_ns - bytes_alone AS extra_bytes
    FROM shaped
), predicted AS (
    SELECT *,
        f * CASE WHEN memory_bound AND sm_tput > 0 AND free >= 1 THEN roof_lo ELSE least(sm_tput, sm_wave) END AS sm_lo,
        f * CASE WHEN memory_bound AND sm_tput > 0 AND free >= 1 THEN roof_pt
                 WHEN free < 1 THEN (sm_tput + sm_wave) / 2
                 WHEN ctas < occ * s_count THEN sm_wave ELSE sm_tput END AS sm_pt,
        f * CASE WHEN memory_bound AND sm_tput > 0 AND free >= 1 THEN roof_hi ELSE greatest(sm_tput, sm_wave) END
            AS sm_hi,
        CASE WHEN dram_busy AND r_v IS NOT NULL AND r_c IS NOT NULL
             THEN f * greatest(0, (r_v + r_c) / sat - 1) ELSE 0 END AS dram_lo,
        CASE WHEN dram_busy AND r_v IS NOT NULL AND r_c IS NOT NULL
             -- the victim gets what the co-runners leave of the rate measured (at least a twentieth of saturation)
             THEN f * greatest(0, (r_v + r_c) / sat - 1,
                               r_v / greatest(coalesce(least(c_dram, sat), sat) - r_c, 0.05 * sat) - 1) ELSE 0 END
            AS dram_hi,
        CASE WHEN dram_busy AND r_v IS NOT NULL AND r_c IS NOT NULL
             THEN f * greatest(0, (r_v + r_c) / coalesce(least(c_dram, sat), sat) - 1) ELSE 0 END AS dram_raw,
        -- the witness needs the rate measured inside the activity (2+ samples), and a victim that keeps its SMs:
        -- a victim that loses SMs re-fetches data as its waves change (extra bytes without any cache footprint)
        footprint AND extra_bytes >= cache_extra_min * bytes_alone AND r_v > 0 AND samples >= 2
            AND coalesce(sm_tput, 0) = 0 AND coalesce(sm_wave, 0) = 0 AS cache_measured,
        c_dram IS NULL AND l2_hit_pct IS NOT NULL AND working_set_bytes <= l2_bytes
            AND working_set_bytes + co_working_set_bytes > l2_bytes AS cache_profiled,
        -- without clock samples there is no clock evidence: no clock effect
        CASE WHEN clock > 0 AND clock_iso > 0 THEN clock_iso / clock - 1 ELSE 0 END AS clock_e
    FROM sm
)
SELECT run_id, device_id, activity_id, group_id, dur_ns / t0_ns - 1 AS observed, f, held AS held_sms,
       free AS free_sms, occ AS occupancy, memory_bound, r_v AS dram_iso_pct, r_c AS co_dram_pct, c_dram AS dram_pct,
       sat AS dram_sat_pct, extra_bytes / nullif(bytes_alone, 0) AS extra_bytes_frac, footprint,
       sm_lo, sm_pt, sm_hi,
       dram_lo, least(dram_hi, greatest(dram_lo, dram_raw)) AS dram_pt, dram_hi,
       -- the victim's share of the extra bytes (in proportion to the alone rates) costs at least their time at the
       -- best rate the co-runners leave it
       CASE WHEN cache_measured THEN greatest(0, 0.95 * c_dram * dur_ns - bytes_alone_max) * r_v
                                     / (r_v + coalesce(r_c, 0)) / (greatest(r_v, sat - coalesce(r_c, 0)) * t0_ns)
            ELSE 0 END AS cache_lo,
       CASE WHEN cache_measured THEN extra_bytes * r_v / (r_v + coalesce(r_c, 0)) / (r_v * t0_ns)
            WHEN cache_profiled THEN f * (1 / (1 - l2_hit_pct / 100) - 1) / 2
            ELSE 0 END AS cache_pt,
       -- which kernel missed more is unknown: at most every extra byte is the victim's
       CASE WHEN cache_measured THEN (1.05 * c_dram * dur_ns - bytes_alone) / (r_v * t0_ns)
            WHEN cache_profiled THEN f * (1 / (1 - l2_hit_pct / 100) - 1)
            ELSE 0 END AS cache_hi,
       -- the share of its time a victim waits on DRAM (its isolated rate over saturation) does not scale with clock
       -- how much of its time follows the SM clock is not measured: from none of it to all of it; the point is all
       -- of it for a kernel that does not wait on DRAM, none for collectives and copies (links and memory)
       least(0, clock_e) AS clock_lo,
       CASE WHEN memory_bound OR activity_class <> 'compute' THEN 0 ELSE clock_e END AS clock_pt,
       greatest(0, clock_e) AS clock_hi,
       0.0::DOUBLE AS link_lo,
       CASE WHEN activity_class = 'comm' THEN comm_fraction / 2 ELSE 0 END AS link_pt,
       CASE WHEN activity_class = 'comm' THEN comm_fraction ELSE 0 END AS link_hi,
       coalesce(clock_e > 0 AND power_w > power_iso, false) AS clock_power,
       CASE WHEN cache_measured THEN 'dram_bytes' WHEN cache_profiled THEN 'ncu_working_set' END AS cache_evidence
FROM predicted
