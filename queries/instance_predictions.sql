-- instance_predictions: per overlapped GPU activity instance with a baseline, what each contended resource
-- predicts for its slowdown (t/t0 - 1): a point, and a band that is the model's error measured on the calibration set
-- (_calibration). No prediction reads the instance's own duration, nor anything computed from it: the inputs are the
-- victim's isolated behaviour (its pool's isolated DRAM rate, its launch configuration and occupancy), the
-- co-runners' demand (SMs their CTAs hold, their isolated DRAM rates and profiled working sets), the device (SM
-- count, L2 size, the DRAM saturation and per-SM rate the trace shows) and the GPC clock measured during the
-- instance. Device-wide DRAM traffic measured during the instance is a witness only: it says whether DRAM was busy.
-- Each factor first predicts the slowdown while overlapped (x); with overlap fraction f, a victim that runs 1+x
-- times slower while overlapped and at its own speed otherwise is slowed by f*x / (1 + x - f*x) in all.
-- SM: co-running kernels' CTAs spread one per SM (the block scheduler places breadth-first), so they hold
--     min(S, CTAs) SMs. Per (victim, co-runner) pair (_instance_overlap), the co-runner's resident CTAs leave room for
--     some of the victim's CTAs on each of those SMs (CTA slots, warps, registers, shared memory). A victim bound by
--     DRAM alone (isolated rate >= memory_bound_frac of saturation) pulls on an SM what its warps keep in flight: it
--     loses the share of its CTA slots taken there (slots_sms). Any other victim's CTA keeps an SM's pipes busy: it
--     loses the SMs where not one of its CTAs fits (exclusive_sms). A grid that fits in one wave keeps the SMs it
--     starts on, so it loses only what co-runners took as it started, for as long as they kept it (*_sms_start); a
--     grid of more waves, what they took while it ran. With F = S - taken free, the victim loses nothing while
--     its CTAs fit (B <= occ*F). Otherwise its throughput follows the SMs it can use: x = min(B, occ*S) / (occ*F) - 1
--     (many waves: S/F - 1; less than a wave: the part of the grid that no longer fits). A bandwidth-bound victim
--     (isolated rate >= memory_bound_frac of saturation) loses only what its free SMs cannot pull at the device's
--     best per-SM rate. When co-runners whose CTAs fit beside its own sit on every SM, the victim's CTAs run beside
--     theirs and share each SM's issue slots. With u_v the share of issue slots the victim uses on its SMs alone (its
--     isolated SM Issue over its isolated SMs Active) and u_c the co-runners' alone (their isolated SM Issue, on
--     every SM): an instruction of the victim ready to issue finds the slot taken by a co-runner's with probability
--     u_c each cycle and waits u_c / (1 - u_c) cycles on average; the victim, which issues u_v per cycle alone, is
--     slowed by x = u_v u_c / (1 - u_c) (its waits not hidden by its other warps; this is never less than sharing the
--     slots in proportion to demand, u_v + u_c - 1), at most x = 1 (an equal share of the slots for a victim that
--     issues every cycle). x = 1 when either side's SM Issue is unknown.
-- DRAM: copy engines (copies and sets) yield DRAM to the SMs' traffic: a DMA engine keeps a few requests in flight
--     where the SMs of a kernel keep thousands. A copy or set beside kernels with memory traffic (r_k, the co-running
--     kernels' isolated rates, above 0: L2 traffic starves a copy too, and shows in DRAM only in part, so any DRAM
--     traffic alone counts) keeps at most copy_rate_pct (calibrated) of the DRAM bandwidth, shared with the other
--     copies beside it (r_c - r_k) in proportion to demand; no witness gates it (the DRAM measured then is low because
--     the copy waits). A kernel shares DRAM with the co-running kernels and with the copies at the rate they keep
--     (at most copy_rate_pct together): when its and their rates together exceed saturation, and the rate measured
--     during the instance shows DRAM busy (dram_busy_frac of saturation; no metrics: the demand alone), the bandwidth
--     is shared in proportion to demand: the victim keeps
--     sat * r_v / (r_v + r_d), x = (r_v + r_d) / sat - 1 (every stream waits on the same queue, so each is slowed by
--     the demand's excess over what DRAM serves). Copies beside copies alone share DRAM the same way, with every
--     co-runner (r_d = r_c).
-- cache: for kernels (a copy engine streams, with no reuse to lose), beside co-runners with a footprint (the DRAM rate
--     they bring, r_d, >= footprint_min_pct, or a profiled working set), with DRAM busy where the demand alone
--     saturates it (else busy DRAM is the demand's own traffic): the victim's L2 reuse lost. Co-runners
--     that live in L2 show no DRAM rate alone; their footprint shows as traffic neither side makes alone: the DRAM
--     rate measured during the instance at least extra_traffic_min_pct above the victim's and co-runners' rates alone
--     together, when every co-runner's rate alone is known (a witness that opens the model, never its numerator). With a Nsight Compute profile whose working set fits in L2 alone
--     but not beside the co-runners', every hit becomes a miss: x = 1/(1 - hit rate) - 1 times the victim's share
--     of DRAM under sharing; without one, the calibrated in-overlap loss (_calibration.cache_in_overlap).
--     `dram_bw` and `cache` explain the same busy DRAM two ways: kernel_attribution takes one of them.
-- clock: the isolated clock over the instance's clock (its cycles unchanged), weighted by the share of its time
--     the victim does not wait on DRAM (1 - r_v/sat), for every kernel (collectives too: their CTAs move the data at
--     the SM clock); none for copies and sets (copy engines). The isolated clock is that of the instances its baseline
--     duration comes from: where a drifting baseline compares it with its nearest isolated instances in time, their
--     clock (a device that throttled over the run slowed those too), else the pool's.
-- link: communication beside other communication may share links: half of doubling while they overlap.
-- columns:
--   run_id              VARCHAR  run
--   device_id           INTEGER  physical GPU
--   activity_id         BIGINT   activity (_activities)
--   group_id            BIGINT   its group (_signature_stats)
--   observed            DOUBLE   its slowdown: work_ns / t0_ns - 1 (its duration; a collective that waited for another
--                                rank: its transfer, _collective_arrivals; for comparison only: no prediction reads it)
--   f                   DOUBLE   overlap fraction
--   held_sms            DOUBLE   SMs co-running kernels held while overlapping it (capped at the SM count)
--   free_sms            DOUBLE   SMs left to it: the SM count less those taken (see SM above)
--   occupancy           BIGINT   CTAs per SM (Nsight Compute's, else the launch configuration's)
--   memory_bound        BOOLEAN  isolated DRAM rate >= memory_bound_frac of saturation
--   dram_iso_pct        DOUBLE   the victim's isolated DRAM rate (% of peak; GPU metrics, else Nsight Compute)
--   co_dram_pct         DOUBLE   co-runners' isolated DRAM rate while overlapping it (% of peak)
--   co_kernel_dram_pct  DOUBLE   the same, of the co-running kernels alone (% of peak)
--   dram_pct            DOUBLE   device DRAM rate measured during it (% of peak): a witness
--   dram_sat_pct        DOUBLE   the device's DRAM saturation (_device_calibration)
--   extra_bytes_frac    DOUBLE   witness only: DRAM traffic during it beyond what victim and co-runners move alone
--   footprint           BOOLEAN  a co-runner has a cache footprint
--   sm_lo               DOUBLE   SM prediction, point minus its band
--   sm_pt               DOUBLE   SM prediction, point
--   sm_hi               DOUBLE   SM prediction, point plus its band
--   dram_lo             DOUBLE   DRAM prediction, point minus its band
--   dram_pt             DOUBLE   DRAM prediction, point
--   dram_hi             DOUBLE   DRAM prediction, point plus its band
--   cache_lo            DOUBLE   cache prediction, point minus its band
--   cache_pt            DOUBLE   cache prediction, point
--   cache_hi            DOUBLE   cache prediction, point plus its band
--   clock_lo            DOUBLE   clock prediction, point minus its band
--   clock_pt            DOUBLE   clock prediction, point
--   clock_hi            DOUBLE   clock prediction, point plus its band
--   link_lo             DOUBLE   link prediction, point minus its band
--   link_pt             DOUBLE   link prediction, point
--   link_hi             DOUBLE   link prediction, point plus its band
--   clock_power         BOOLEAN  the clock dropped while the device drew more power than in isolation (NVML)
--   clock_base_mhz      DOUBLE   the GPC clock the clock factor compares with: its baseline instances' (MHz)
--   cache_evidence      VARCHAR  ncu_working_set (profiles), footprint (co-runners with DRAM traffic), extra_traffic
--                                (traffic beyond the demand alone), or NULL
WITH inst AS (
    SELECT i.run_id, i.device_id, i.activity_id, b.group_id, i.activity, i.activity_class, i.start_ns, i.end_ns,
           i.dur_ns, b.t0_ns,
           coalesce(w.work_ns, i.dur_ns) AS work_ns,
           i.overlap_fraction AS f, i.comm_fraction, i.ctas, i.sm_count AS s_count,
           coalesce(n.ctas_per_sm, i.launch_occupancy) AS occ,
           least(coalesce(i.corunner_sms, 0), i.sm_count) AS held,
           -- SMs taken from it: those of co-runners beside whose CTAs not one of its own fits (the rest of their
           -- SMs it shares); a grid that fits in one wave is placed as it starts and keeps its SMs, so only those
           -- taken then count; more waves, those taken while it ran
           least(CASE WHEN i.ctas <= coalesce(n.ctas_per_sm, i.launch_occupancy) * i.sm_count
                      THEN coalesce(i.exclusive_sms_start, 0) ELSE coalesce(i.exclusive_sms, 0) END, i.sm_count)
               AS taken_whole,
           least(coalesce(i.exclusive_sms, 0), i.sm_count) AS held_whole,
           -- the same in CTA slots: of each SM a co-runner holds, the share of its CTA slots lost there
           least(CASE WHEN i.ctas <= coalesce(n.ctas_per_sm, i.launch_occupancy) * i.sm_count
                      THEN coalesce(i.slots_sms_start, 0) ELSE coalesce(i.slots_sms, 0) END, i.sm_count)
               AS taken_slots,
           least(coalesce(i.slots_sms, 0), i.sm_count) AS held_slots,
           coalesce(p.dram_pct_iso, n.dram_pct) AS r_v, i.co_dram_pct AS r_c, i.co_kernel_dram_pct AS r_k,
           i.dram_pct AS c_dram,
           coalesce(b.clock0_mhz, p.gpc_clock_mhz_iso) AS clock_iso, i.gpc_clock_mhz AS clock, p.power_w_iso AS power_iso, i.power_w,
           -- issue slots used alone: the victim's on the SMs it ran on, its co-runners' on every SM
           least(1, p.sm_issue_pct_iso / nullif(p.sm_active_pct_iso, 0)) AS u_v, i.co_sm_issue_pct / 100 AS u_c,
           n.l2_hit_pct, n.working_set_bytes, i.co_working_set_bytes, d.l2_bytes,
           -- the victim's own alone rate is evidently achievable (Nsight Compute's scale may differ a little)
           greatest(c.dram_sat_pct, coalesce(p.dram_pct_iso, n.dram_pct, 0)) AS sat, c.dram_per_sm_pct AS per_sm,
           t.memory_bound_frac, t.dram_busy_frac, t.footprint_min_pct, t.extra_traffic_min_pct,
           k.sm_band, CASE WHEN i.activity = 'kernel' THEN k.dram_bw_band ELSE k.dram_bw_copy_band END AS dram_bw_band,
           k.cache_band, k.clock_band, k.link_band, k.cache_in_overlap, k.copy_rate_pct
    FROM instance_facts i JOIN _instance_baselines b USING (run_id, activity_id)
    -- the medians over the isolated instances of its pool (traceql.attribution.baselines)
    LEFT JOIN _signature_stats p ON p.group_id = b.group_id
    -- a collective that waited for another rank is compared on its transfer, as its baseline is
    LEFT JOIN _collective_arrivals w ON w.run_id = i.run_id AND w.activity_id = i.activity_id
    LEFT JOIN _ncu_demand n ON n.run_id = i.run_id AND n.device_id = i.device_id AND n.sig = i.sig
    LEFT JOIN _device_calibration c ON c.run_id = i.run_id AND c.device_id = i.device_id
    LEFT JOIN devices d ON d.run_id = i.run_id AND d.device_id = i.device_id
    CROSS JOIN _thresholds t CROSS JOIN _calibration k
    WHERE i.overlap_ns > 0 AND b.t0_ns > 0
), demand AS (
    -- the DRAM demand it shares with: a kernel's, the co-running kernels' and the copies' beside them at the rate
    -- they keep (at most copy_rate_pct together); a copy's, every co-runner's
    SELECT *, CASE WHEN activity = 'kernel'
                   THEN r_k + least(greatest(0, r_c - r_k), coalesce(copy_rate_pct, greatest(0, r_c - r_k)))
                   ELSE r_c END AS r_d
    FROM inst
), known_demand AS (
    -- signatures whose DRAM rate alone was measured: an isolated instance with GPU metrics, samples taken while one
    -- of its instances ran alone for a stretch, or a Nsight Compute profile
    SELECT DISTINCT run_id, device_id, sig FROM _instance_facts
    WHERE overlap_ns = 0 AND dur_ns > 0 AND dram_pct IS NOT NULL
    UNION
    SELECT run_id, device_id, sig FROM _solo_rates WHERE dram_pct IS NOT NULL
    UNION
    SELECT run_id, device_id, sig FROM _ncu_demand WHERE dram_pct IS NOT NULL
), unknown_demand AS (
    -- kernels whose DRAM rate alone nobody measured (_activity_dram counts them 0; a copy's or set's bytes give its)
    SELECT a.run_id, a.device_id, a.activity_id, a.start_ns, a.end_ns
    FROM _activity_rows a ANTI JOIN known_demand k USING (run_id, device_id, sig)
    WHERE a.activity = 'kernel'
), unknown_edges AS (
    -- per device and time, the unknown-demand kernels running after it and those started up to it (ends and starts
    -- at one time taken together: an end at a time is before a start there, so touching intervals do not overlap)
    SELECT run_id, device_id, t,
           sum(sum(started) - sum(ended)) OVER w AS running, sum(sum(started)) OVER w AS started_upto
    FROM (SELECT run_id, device_id, start_ns AS t, 1 AS started, 0 AS ended FROM unknown_demand
          UNION ALL SELECT run_id, device_id, end_ns AS t, 0 AS started, 1 AS ended FROM unknown_demand)
    GROUP BY run_id, device_id, t
    WINDOW w AS (PARTITION BY run_id, device_id ORDER BY t ROWS UNBOUNDED PRECEDING)
), candidates AS (
    -- the witness of lost reuse: DRAM traffic measured during the instance at least extra_traffic_min_pct above what
    -- it and its co-runners move alone
    SELECT i.run_id, i.device_id, i.activity_id, i.start_ns, i.end_ns,
           u.activity_id IS NOT NULL AS self_unknown
    FROM inst i LEFT JOIN unknown_demand u ON u.run_id = i.run_id AND u.activity_id = i.activity_id
    WHERE i.c_dram - i.r_v - coalesce(i.r_c, 0) >= i.extra_traffic_min_pct
), at_start AS (
    SELECT c.*, coalesce(e.running, 0) AS running_at_start, coalesce(e.started_upto, 0) AS started_at_start
    FROM candidates c ASOF LEFT JOIN unknown_edges e
      ON e.run_id = c.run_id AND e.device_id = c.device_id AND e.t <= c.start_ns
), extra_traffic AS (
    -- ... when every co-runner's demand alone is known (else the traffic may be theirs): no unknown-demand kernel
    -- other than itself runs at its start or starts before its end
    SELECT a.run_id, a.activity_id
    FROM at_start a ASOF LEFT JOIN unknown_edges e
      ON e.run_id = a.run_id AND e.device_id = a.device_id AND e.t < a.end_ns
    WHERE a.running_at_start - a.self_unknown::INT
          + (coalesce(e.started_upto, 0) - a.started_at_start) = 0
), shaped AS (
    SELECT demand.*,
           -- a victim bound by DRAM pulls on an SM what its warps keep in flight: it loses the share of its CTA slots
           -- a co-runner takes there; any other victim's CTA keeps an SM's pipes busy: it loses the SMs where not one
           -- of its CTAs fits
           s_count - CASE WHEN coalesce(r_v >= memory_bound_frac * sat, false) THEN taken_slots ELSE taken_whole END
               AS free,
           -- SMs co-runners that fit beside its CTAs held, on average while it ran
           greatest(0, held - CASE WHEN coalesce(r_v >= memory_bound_frac * sat, false) THEN held_slots
                                   ELSE held_whole END) AS shared,
           coalesce(r_v >= memory_bound_frac * sat, false) AS memory_bound,
           x.activity_id IS NOT NULL AS extra_traffic,
           coalesce(r_d >= footprint_min_pct, false) OR coalesce(co_working_set_bytes > 0, false) AS footprint_alone,
           coalesce(r_d >= footprint_min_pct, false) OR coalesce(co_working_set_bytes > 0, false)
               OR x.activity_id IS NOT NULL AS footprint,
           -- the witness: DRAM measured busy during the instance (NULL without GPU metrics)
           c_dram >= dram_busy_frac * sat AS measured_busy,
           -- a copy engine beside kernels with memory traffic (any DRAM traffic alone): it keeps at most copy_rate_pct
           coalesce(activity <> 'kernel' AND r_k > 0, false) AS yields
    FROM demand LEFT JOIN extra_traffic x USING (run_id, activity_id)
), kept AS (
    SELECT *,
           -- the victim's DRAM share: its demand, or past saturation its part of it in proportion to demand; a copy
           -- that yields: its part of copy_rate_pct, shared with the other copies
           CASE WHEN yields THEN least(r_v, copy_rate_pct * r_v / (r_v + greatest(0, coalesce(r_c, 0) - r_k)))
                WHEN r_v + coalesce(r_d, 0) > sat THEN sat * r_v / (r_v + coalesce(r_d, 0)) ELSE r_v END AS dram_kept
    FROM shaped
), in_overlap AS (
    -- each factor's slowdown while overlapped (x), from demand and the device alone
    SELECT *,
        CASE WHEN activity <> 'kernel' OR held <= 0 THEN 0
             -- co-runners that fit beside its CTAs, on every SM: they share its issue slots
             WHEN s_count - shared < 1 THEN
                  CASE WHEN u_v IS NULL OR u_c IS NULL OR u_c >= 1 THEN 1
                       ELSE least(1, u_v * u_c / (1 - u_c)) END
             WHEN ctas <= occ * free THEN 0
             WHEN free < 1 THEN 1
             WHEN memory_bound THEN greatest(0, r_v / least(sat, per_sm * free) - 1)
             ELSE least(ctas, occ * s_count) / (occ * free) - 1 END AS x_sm,
        -- a copy that yields moves at the rate it keeps (at most a millionfold slower while overlapped); else,
        -- without GPU metrics, the demand alone decides
        CASE WHEN yields AND r_v > 0 AND copy_rate_pct IS NOT NULL THEN r_v / greatest(dram_kept, 1e-6 * r_v) - 1
             WHEN coalesce(measured_busy, true) AND r_v > 0 AND r_d IS NOT NULL AND r_v + r_d > sat
             THEN r_v / dram_kept - 1 ELSE 0 END AS x_dram,
        -- a copy engine streams: it has no reuse in L2 to lose
        CASE WHEN activity <> 'kernel' OR NOT coalesce(footprint AND r_v > 0, false) THEN 0
             -- profiled: fits in L2 alone, not beside the co-runners: every hit becomes a miss, at its DRAM share
             WHEN l2_hit_pct IS NOT NULL AND working_set_bytes <= l2_bytes
                  AND working_set_bytes + co_working_set_bytes > l2_bytes
             THEN (1 / (1 - least(l2_hit_pct, 99) / 100)) * r_v / dram_kept - 1
             WHEN l2_hit_pct IS NOT NULL AND co_working_set_bytes IS NOT NULL THEN 0
             -- no profile: traffic beyond the demand opens the calibrated loss (lost reuse adds misses); a DRAM
             -- measured busy does where the demand alone saturates it (extra traffic cannot show there), never where
             -- the demand explains the traffic measured
             WHEN (coalesce(measured_busy, false) AND r_v + coalesce(r_d, 0) >= sat) OR extra_traffic
             THEN cache_in_overlap ELSE 0 END AS x_cache,
        CASE WHEN activity <> 'kernel' OR NOT coalesce(clock > 0 AND clock_iso > 0, false) THEN 0
             -- (+ 0.0: a clock above the isolated one times a zero weight is -0.0, which would print as such)
             ELSE (clock_iso / clock - 1) * (1 - least(1, coalesce(r_v, 0) / sat)) + 0.0 END AS x_clock,
        CASE WHEN activity_class = 'comm' AND f > 0 THEN 0.5 * comm_fraction / f ELSE 0 END AS x_link
    FROM kept
), predicted AS (
    -- over the whole instance: 1+x times slower for the overlapped share f of it
    SELECT *,
        f * x_sm / (1 + x_sm - f * x_sm) AS sm_pt, f * x_dram / (1 + x_dram - f * x_dram) AS dram_pt,
        f * x_cache / (1 + x_cache - f * x_cache) AS cache_pt,
        -- the clock is measured over the whole instance
        x_clock AS clock_pt,
        f * x_link / (1 + x_link - f * x_link) AS link_pt
    FROM in_overlap
)
SELECT run_id, device_id, activity_id, group_id, work_ns / t0_ns - 1 AS observed, f, held AS held_sms,
       free AS free_sms, occ AS occupancy, memory_bound, r_v AS dram_iso_pct, r_c AS co_dram_pct,
       r_k AS co_kernel_dram_pct, c_dram AS dram_pct,
       sat AS dram_sat_pct,
       (c_dram * dur_ns - (r_v * t0_ns + coalesce(r_c, 0) * f * t0_ns)) / nullif(r_v * t0_ns + coalesce(r_c, 0) * f
           * t0_ns, 0) AS extra_bytes_frac,
       footprint,
       -- a band where the calibration measured one; else the prediction's own size (none to twice the point)
       sm_pt - coalesce(sm_band, abs(sm_pt)) AS sm_lo, sm_pt, sm_pt + coalesce(sm_band, abs(sm_pt)) AS sm_hi,
       dram_pt - coalesce(dram_bw_band, abs(dram_pt)) AS dram_lo, dram_pt,
       dram_pt + coalesce(dram_bw_band, abs(dram_pt)) AS dram_hi,
       cache_pt - coalesce(cache_band, abs(cache_pt)) AS cache_lo, cache_pt,
       cache_pt + coalesce(cache_band, abs(cache_pt)) AS cache_hi,
       clock_pt - coalesce(clock_band, abs(clock_pt)) AS clock_lo, clock_pt,
       clock_pt + coalesce(clock_band, abs(clock_pt)) AS clock_hi,
       link_pt - coalesce(link_band, abs(link_pt)) AS link_lo, link_pt,
       link_pt + coalesce(link_band, abs(link_pt)) AS link_hi,
       coalesce(clock_pt > 0 AND power_w > power_iso, false) AS clock_power, clock_iso AS clock_base_mhz,
       CASE WHEN x_cache > 0 AND l2_hit_pct IS NOT NULL AND co_working_set_bytes IS NOT NULL THEN 'ncu_working_set'
            WHEN x_cache > 0 AND footprint_alone THEN 'footprint'
            WHEN x_cache > 0 THEN 'extra_traffic' END AS cache_evidence
FROM predicted
