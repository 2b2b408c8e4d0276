-- kernel_attribution: per (sub-)signature group of GPU activity (kernels of every kind, copies, sets; and NVTX
-- group): the observed slowdown with its interval, what each contended resource predicts for it (instance_predictions,
-- medians over the overlapped instances: _group_predictions; none reads the observed durations), and the class.
-- Predictions combine multiplicatively: 1 + predicted = (1+sm)(1+memory)(1+clock)(1+link), where memory is DRAM
-- bandwidth or lost L2 reuse (two explanations of one busy DRAM: the one under which the observation is likelier is
-- taken); each factor's part of the prediction is predicted·ln(1+p)/ln(1+predicted), so the parts add up to it. The
-- band is the root sum of squares of the present factors' calibrated error bands (_calibration).
-- Class: with the observed interval within the band of the prediction, the factor with at least half of it (else
-- mixed); a single present factor that misses its band is still named, its error in the reason; several that miss
-- name the largest when together they predict between half and twice the observation; unexplained is loss that no
-- present factor accounts for.
-- columns:
--   run_id               VARCHAR  run
--   device_id            INTEGER  physical GPU
--   nvtx                 VARCHAR  NVTX group (NULL unless grouping by NVTX)
--   group_id             BIGINT   (sub-)signature group (_signature_stats)
--   activity             VARCHAR  kernel, memcpy or memset
--   kind                 VARCHAR  compute, comm, memory, other, copy: a label only
--   name                 VARCHAR  demangled kernel name, or [CUDA memcpy KIND] / [CUDA memset]
--   short_name           VARCHAR  base function name
--   grid                 VARCHAR  grid as XxYxZ
--   block                VARCHAR  block as XxYxZ
--   dynamic_smem_bytes   BIGINT   dynamic shared memory (bytes)
--   bytes                BIGINT   bytes moved or set (copies and sets)
--   mode                 BIGINT   duration mode (0 = shortest) when the signature was split, else NULL
--   split                VARCHAR  duration mode when the signature was split, else NULL
--   n                    BIGINT   instances
--   n_overlapped         BIGINT   instances overlapped by another activity
--   n_isolated           BIGINT   isolated instances of the baseline pool in the trace itself
--   t0_ns                DOUBLE   baseline, median (ns)
--   t0_lo_ns             DOUBLE   its 95% interval, lower bound (ns)
--   t0_hi_ns             DOUBLE   its 95% interval, upper bound (ns)
--   t0_spread            DOUBLE   baseline interquartile range / median
--   t1_ns                DOUBLE   overlapped instances, median (ns)
--   t1_lo_ns             DOUBLE   its 95% interval, lower bound (ns)
--   t1_hi_ns             DOUBLE   its 95% interval, upper bound (ns)
--   sum_t1_ns            BIGINT   total time of the overlapped instances (ns; a collective that waited for another
--                                 rank: its transfer)
--   sum_t0_ns            DOUBLE   total baseline duration of the overlapped instances (ns)
--   wait_excluded_ns     BIGINT   time its overlapped collectives waited for another rank, left out of sum_t1_ns (ns)
--   slowdown             DOUBLE   t1/t0 - 1 (or the median per-instance ratio - 1 under a drifting baseline)
--   slowdown_lo          DOUBLE   its 95% interval, lower bound (bootstrap of both medians; order statistics of the
--                                 per-instance ratios under drift; for one overlapped instance, where it falls
--                                 among the isolated ones)
--   slowdown_hi          DOUBLE   its 95% interval, upper bound
--   baseline             VARCHAR  where t0 comes from: isolated, isolated nearest in time, baseline run, ncu
--   baseline_drift       BOOLEAN  the isolated durations drift over time (then each instance has a nearby baseline)
--   conflated            BOOLEAN  isolated durations mix different work that could not be split: left out of sums
--   in_overlap_slowdown  DOUBLE   slowdown while actually overlapped, 1/rho - 1 with rho = (1/(1+s) - (1-f))/f (f >= 0.2)
--   overlap_fraction     DOUBLE   overlapped time / duration of the overlapped instances
--   comm_fraction        DOUBLE   communication-overlapped time / duration of the overlapped instances
--   sm_share             DOUBLE   co-runners' SM share over the overlapped instances
--   comm_sm_share        DOUBLE   communication kernels' SM share over the overlapped instances
--   corunner_kind        VARCHAR  co-runner class with the most overlap time: comm, compute, copy
--   corunner_sms         DOUBLE   SMs held by co-runners while overlapped
--   occupancy            BIGINT   CTAs per SM in the SM model: Nsight Compute's, else the launch configuration's
--   sm_predicted         DOUBLE   SM model's point prediction for the overlapped time (median over instances)
--   significant          BOOLEAN  the slowdown interval excludes 0 and |slowdown| >= 1%
--   predicted            DOUBLE   the slowdown all factors predict together (point)
--   predicted_lo         DOUBLE   predicted - predicted_band
--   predicted_hi         DOUBLE   predicted + predicted_band
--   agreement            VARCHAR  agrees (intervals meet), under (the models predict less), over (more)
--   sm                   DOUBLE   part of the prediction from SMs taken
--   dram_bw              DOUBLE   part from DRAM bandwidth
--   cache                DOUBLE   part from L2 cache interference
--   clock                DOUBLE   part from a lower clock (negative: a higher clock helped)
--   link                 DOUBLE   part from NVLink/PCIe sharing
--   residual             DOUBLE   slowdown - predicted: what no model predicts
--   sm_lo                DOUBLE   SM prediction interval, low (slowdown units)
--   sm_hi                DOUBLE   SM prediction interval, high
--   dram_bw_lo           DOUBLE   DRAM prediction interval, low
--   dram_bw_hi           DOUBLE   DRAM prediction interval, high
--   cache_lo             DOUBLE   cache prediction interval, low
--   cache_hi             DOUBLE   cache prediction interval, high
--   clock_lo             DOUBLE   clock prediction interval, low
--   clock_hi             DOUBLE   clock prediction interval, high
--   link_lo              DOUBLE   link prediction interval, low
--   link_hi              DOUBLE   link prediction interval, high
--   class                VARCHAR  sm, dram_bw, cache, clock, link, mixed, unexplained, none, conflated
--   reason               VARCHAR  why the class is none/unexplained, a present cause's error when it misses its band,
--                                 or why a number is missing; unexplained loss beyond what the overlapped time can
--                                 account for (f/(1-f)) says so
--   predicted_band       DOUBLE   the prediction's error band: root sum of squares of its present factors' calibrated
--                                 bands (predicted_lo/hi = predicted -/+ it)
--   memory_explanation   VARCHAR  dram_bw or cache: the explanation of a busy DRAM taken (NULL: neither present)
--   dram_pct_iso         DOUBLE   witness: DRAM bandwidth, isolated instances (% of peak)
--   dram_pct_ovl         DOUBLE   witness: DRAM bandwidth, overlapped instances (% of peak)
--   gpc_clock_mhz_iso    DOUBLE   witness: GPC clock, isolated instances (MHz)
--   gpc_clock_mhz_ovl    DOUBLE   witness: GPC clock, overlapped instances (MHz)
--   sm_active_pct_iso    DOUBLE   witness: SMs Active, isolated instances (%)
--   sm_active_pct_ovl    DOUBLE   witness: SMs Active, overlapped instances (%)
--   nvlink_pct_ovl       DOUBLE   witness: NVLink, overlapped instances (% of peak)
--   pcie_pct_ovl         DOUBLE   witness: PCIe, overlapped instances (% of peak)
--   co_dram_pct          DOUBLE   witness: co-runners' isolated DRAM rate while overlapping (% of peak)
--   dram_sat_pct         DOUBLE   witness: the device's DRAM saturation (_device_calibration, % of peak)
--   dram_busy            DOUBLE   witness: DRAM rate during the overlapped instances / saturation
--   memory_bound         BOOLEAN  witness: isolated DRAM rate >= memory_bound_frac of saturation (roofline SM model)
--   extra_bytes_frac     DOUBLE   witness only (read by no model): DRAM traffic beyond what victim and co-runners
--                                 move alone (relative)
--   footprint            BOOLEAN  witness: a co-runner has a cache footprint
--   clock_power          BOOLEAN  witness: the clock dropped while the device drew more power than in isolation
--   occupancy_source     VARCHAR  where occupancy comes from: ncu or launch
--   launch_occupancy     BIGINT   CTAs per SM the launch configuration and device limits allow
--   ncu_match            VARCHAR  Nsight Compute profile of the signature: exact, name or unmatched (ncu_match)
--   ncu_ctas_per_sm      INTEGER  witness: CTAs per SM measured by Nsight Compute (NULL if none applies)
--   ncu_dram_pct         DOUBLE   witness: isolated DRAM throughput under Nsight Compute (% of peak)
--   ncu_l2_hit_pct       DOUBLE   witness: isolated L2 hit rate under Nsight Compute (%)
--   ncu_working_set_bytes DOUBLE  witness: DRAM bytes read + written alone under Nsight Compute (bytes)
--   co_working_set_bytes DOUBLE   witness: profiled co-runners' working sets while overlapping (bytes)
--   l2_bytes             BIGINT   witness: the device's L2 size (bytes)
--   cache_evidence       VARCHAR  cache evidence found: ncu_working_set (profiles), footprint (co-runners' traffic),
--                                 extra_traffic (DRAM traffic beyond the demand alone), NULL
--   sm_issue_pct_iso     DOUBLE   SM Issue during isolated instances (% of peak, averaged over every SM): with
--                                 sm_active_pct_iso, the issue slots the victim uses alone (co-resident SM model)
--   co_sm_issue_pct      DOUBLE   co-runners' isolated SM Issue while overlapping (% of peak; co-resident SM model)
--   gpc_clock_mhz_base   DOUBLE   the GPC clock the clock factor compares with: the isolated instances' its baseline
--                                 duration comes from (the nearest in time where the baseline drifts; median, MHz)
--   co_kernel_dram_pct   DOUBLE   witness: co-running kernels' isolated DRAM rate while overlapping (% of peak; copies
--                                 and sets left out: the demand a kernel shares DRAM with, and copies yield to)
WITH demand AS (
    SELECT k.*, p.* EXCLUDE (group_id), k.occupancy AS launch_occupancy, coalesce(n.ctas_per_sm, k.occupancy) AS occ,
           CASE WHEN n.ctas_per_sm IS NOT NULL THEN 'ncu' ELSE 'launch' END AS occupancy_source,
           coalesce(n.match, 'unmatched') AS ncu_match, n.ctas_per_sm AS ncu_ctas_per_sm, n.dram_pct AS ncu_dram_pct,
           n.l2_hit_pct AS ncu_l2_hit_pct, n.working_set_bytes AS ncu_working_set_bytes, d.l2_bytes,
           c.sm_band, CASE WHEN k.activity = 'kernel' THEN c.dram_bw_band ELSE c.dram_bw_copy_band END AS dram_bw_band, c.cache_band, c.clock_band, c.link_band
    FROM kernel_signatures k
    LEFT JOIN _group_predictions p USING (group_id)
    LEFT JOIN _ncu_demand n ON k.activity = 'kernel' AND n.run_id = k.run_id AND n.device_id = k.device_id
         AND n.name = k.name AND n.grid = k.grid AND n.block = k.block
         AND n.dynamic_smem_bytes IS NOT DISTINCT FROM k.dynamic_smem_bytes
    LEFT JOIN devices d ON d.run_id = k.run_id AND d.device_id = k.device_id
    CROSS JOIN _calibration c
), present AS (
    -- a factor is present (a cause) when it predicts a loss of at least PRACTICAL_FLOOR (1%); a higher clock that
    -- helps is not a cause, but stays in the prediction. A band is the calibrated one, else the prediction's own size
    -- (the clock's: half its interval, the medians of its instances' own sizes, which may differ in sign)
    SELECT *, slowdown AS s, overlap_fraction AS f, significant_stat AND NOT conflated AS sig,
           coalesce(sm_pt >= 0.01, false) AS sm_on, coalesce(dram_pt >= 0.01, false) AS dram_on,
           coalesce(cache_pt >= 0.01, false) AS cache_on, coalesce(clock_pt >= 0.01, false) AS clock_on,
           coalesce(link_pt >= 0.01, false) AS link_on,
           (1 + sm_pt) * (1 + clock_pt) * (1 + link_pt) AS base,
           -- the squared band of the factors outside memory: present ones, and the clock whenever it predicts
           CASE WHEN sm_on THEN coalesce(sm_band, sm_pt) ^ 2 ELSE 0 END
               + coalesce(clock_band, (clock_hi - clock_lo) / 2, 0) ^ 2
               + CASE WHEN link_on THEN coalesce(link_band, link_pt) ^ 2 ELSE 0 END AS base_var
    FROM demand
), alternatives AS (
    -- DRAM bandwidth and lost L2 reuse explain one busy DRAM two ways: each gives a total prediction and its band
    SELECT *,
           base * (1 + dram_pt) - 1 AS total_dram, sqrt(base_var + coalesce(dram_bw_band, dram_pt) ^ 2) AS band_dram,
           base * (1 + cache_pt) - 1 AS total_cache, sqrt(base_var + coalesce(cache_band, cache_pt) ^ 2) AS band_cache
    FROM present
), chosen AS (
    SELECT *,
        -- the memory explanation: the only one present, or of two, the one under which the observation is likelier
        -- (each total's error taken as normal with its band as the deviation: the smaller (e/band)^2/2 + ln band; a
        -- wide band excuses a large error only at the price of its width)
        CASE WHEN dram_on AND cache_on
             THEN CASE WHEN ((s - total_cache) / band_cache) ^ 2 / 2 + ln(band_cache)
                            < ((s - total_dram) / band_dram) ^ 2 / 2 + ln(band_dram)
                       THEN 'cache' ELSE 'dram_bw' END
             WHEN cache_on THEN 'cache' WHEN dram_on THEN 'dram_bw' END AS memory
    FROM alternatives
), combined AS (
    SELECT *,
        CASE memory WHEN 'cache' THEN total_cache WHEN 'dram_bw' THEN total_dram ELSE base - 1 END AS p,
        CASE memory WHEN 'cache' THEN band_cache WHEN 'dram_bw' THEN band_dram ELSE sqrt(base_var) END AS band,
        CASE memory WHEN 'dram_bw' THEN dram_pt ELSE 0 END AS dram_used,
        CASE memory WHEN 'cache' THEN cache_pt ELSE 0 END AS cache_used,
        sm_on::INT + clock_on::INT + link_on::INT + (memory IS NOT NULL)::INT AS n_present
    FROM chosen
), parts AS (
    SELECT *, p - band AS p_lo, p + band AS p_hi,
        -- each factor's share of the prediction, in the prediction's own units (the parts add up to p)
        CASE WHEN abs(ln(1 + p)) > 1e-12 THEN p / ln(1 + p) END AS to_part,
        CASE WHEN s IS NULL OR p IS NULL THEN NULL
             WHEN coalesce(slowdown_hi, s) >= p - band AND coalesce(slowdown_lo, s) <= p + band THEN 'agrees'
             WHEN coalesce(slowdown_hi, s) < p - band THEN 'over' ELSE 'under' END AS agreement
    FROM combined
), attributed AS (
    SELECT *,
        coalesce(to_part * ln(1 + sm_pt), 0) AS p_sm, coalesce(to_part * ln(1 + dram_used), 0) AS p_dram,
        coalesce(to_part * ln(1 + cache_used), 0) AS p_cache, coalesce(to_part * ln(1 + clock_pt), 0) AS p_clock,
        coalesce(to_part * ln(1 + link_pt), 0) AS p_link
    FROM parts
), classed AS (
    SELECT *,
        greatest(p_sm, p_dram, p_cache, p_clock, p_link) AS p_max,
        CASE WHEN p_sm >= greatest(p_dram, p_cache, p_clock, p_link) THEN 'sm'
             WHEN p_dram >= greatest(p_cache, p_clock, p_link) THEN 'dram_bw'
             WHEN p_cache >= greatest(p_clock, p_link) THEN 'cache'
             WHEN p_clock >= p_link THEN 'clock' ELSE 'link' END AS top,
        -- the one present factor, when only one is
        CASE WHEN n_present = 1 THEN CASE WHEN sm_on THEN 'sm' WHEN clock_on THEN 'clock' WHEN link_on THEN 'link'
                                          ELSE memory END END AS single
    FROM attributed
), judged AS (
    SELECT *,
        CASE WHEN conflated THEN 'conflated'
             WHEN n_overlapped = 0 OR t0_ns IS NULL THEN 'none'
             WHEN NOT sig OR s <= 0 THEN 'none'
             WHEN p IS NULL OR n_present = 0 THEN 'unexplained'
             WHEN agreement = 'agrees' AND p > 0 AND p_max >= 0.5 * p THEN top
             WHEN agreement = 'agrees' AND p > 0 THEN 'mixed'
             -- a single present cause is named, with its error where it misses its band (the reason), also where
             -- a factor that is no cause (a clock that rose) brings the whole prediction to no loss
             WHEN single IS NOT NULL THEN single
             -- several present: the largest, when together they predict between half and twice the observation
             WHEN p > 0 AND p >= 0.5 * s AND p <= 2 * s THEN top
             ELSE 'unexplained' END AS class_
    FROM classed
)
SELECT run_id, device_id, nvtx, group_id, activity, kind, name, short_name, grid, block, dynamic_smem_bytes, bytes,
       mode, split, n, n_overlapped, n_isolated, t0_ns, t0_lo_ns, t0_hi_ns, t0_spread, t1_ns, t1_lo_ns, t1_hi_ns,
       sum_t1_ns, sum_t0_ns, wait_excluded_ns, s AS slowdown, slowdown_lo, slowdown_hi, baseline, baseline_drift, conflated,
       CASE WHEN f >= 0.2 AND s IS NOT NULL THEN 1 / ((1 / (1 + s) - (1 - f)) / f) - 1 END AS in_overlap_slowdown,
       overlap_fraction, comm_fraction, sm_share, comm_sm_share, corunner_kind, corunner_sms, occ AS occupancy,
       sm_predicted, coalesce(sig, false) AS significant, p AS predicted, p_lo AS predicted_lo, p_hi AS predicted_hi,
       agreement, p_sm AS sm, p_dram AS dram_bw, p_cache AS cache, p_clock AS clock, p_link AS link,
       CASE WHEN s IS NOT NULL THEN s - coalesce(p, 0) END AS residual,
       sm_lo, sm_hi, dram_lo AS dram_bw_lo, dram_hi AS dram_bw_hi, cache_lo, cache_hi, clock_lo, clock_hi, link_lo,
       link_hi,
       class_ AS class,
       CASE WHEN conflated THEN note
            WHEN n_overlapped = 0 THEN 'never overlapped'
            WHEN t0_ns IS NULL THEN coalesce(note, 'no baseline to compare with (give --baseline or --ncu)')
            WHEN NOT sig AND slowdown_lo IS NULL THEN 'too few instances for an interval'
            WHEN NOT sig THEN 'the slowdown interval includes 0 or stays under 1%'
            WHEN s <= 0 THEN 'faster when overlapped'
            WHEN p IS NULL THEN 'no model could be applied'
            -- without GPU metrics, DRAM, L2 and the clock were not tested: the sentence says so, not that they held
            WHEN n_present = 0 THEN 'no factor is present: '
                 || CASE WHEN dram_pct_ovl IS NULL AND ncu_dram_pct IS NULL
                         THEN 'no SMs taken, links unchanged; DRAM, L2 cache and clock not tested '
                              || '(no GPU metrics: only the SM model could be applied)'
                         WHEN dram_pct_ovl IS NULL THEN 'no SMs taken, DRAM not contended by the profiled demand, links '
                              || 'unchanged; clock not tested (no GPU metrics: only the SM model and Nsight Compute '
                              || 'demand could be applied)'
                         ELSE 'no SMs taken, DRAM not contended, clock and links unchanged' END
            WHEN agreement = 'agrees' AND p > 0 AND class_ <> 'unexplained' THEN NULL
            ELSE printf('%s%+.1f%% ± %.1f was predicted but %+.1f%% [%+.1f%%, %+.1f%%] was observed: %s by %.0f points%s',
                        CASE WHEN class_ <> 'unexplained' THEN class_ || ' is present, ' ELSE '' END,
                        100 * p, 100 * band, 100 * s, 100 * coalesce(slowdown_lo, s), 100 * coalesce(slowdown_hi, s),
                        CASE WHEN p > s THEN 'over-predicted' ELSE 'under-predicted' END, 100 * abs(s - p),
                        CASE WHEN dram_pct_ovl IS NULL AND ncu_dram_pct IS NULL
                             THEN ' (no GPU metrics: only the SM model could be applied)'
                             WHEN dram_pct_ovl IS NULL THEN ' (no GPU metrics: only the SM model and Nsight Compute '
                                                            || 'demand could be applied)'
                             WHEN dram_busy < 1 AND dram_busy IS NOT NULL
                             THEN printf(' (device DRAM at %.0f%% of saturation during the overlap)', 100 * dram_busy)
                             ELSE '' END)
       END
       -- an exact bound, no model: loss from overlap is at most the overlapped time, t1 - t0 <= f t1
       || CASE WHEN class_ = 'unexplained' AND f < 1 AND coalesce(slowdown_lo, s) > f / (1 - f)
               THEN printf('; it overlapped other work for %.1f%% of its time, so the overlap can account for at most '
                           || '%+.1f%%: the rest of the loss comes from elsewhere (another clock, other data, '
                           || 'run-to-run variation)', 100 * f, 100 * f / (1 - f))
               ELSE '' END AS reason,
       band AS predicted_band, memory AS memory_explanation,
       dram_pct_iso, dram_pct_ovl, gpc_clock_mhz_iso, gpc_clock_mhz_ovl, sm_active_pct_iso, sm_active_pct_ovl,
       nvlink_pct_ovl, pcie_pct_ovl, co_dram_pct, dram_sat_pct, dram_busy, memory_bound, extra_bytes_frac, footprint,
       clock_power, occupancy_source, launch_occupancy, ncu_match, ncu_ctas_per_sm, ncu_dram_pct, ncu_l2_hit_pct,
       ncu_working_set_bytes, co_working_set_bytes, l2_bytes, cache_evidence, sm_issue_pct_iso, co_sm_issue_pct,
       clock_base_mhz AS gpc_clock_mhz_base, co_kernel_dram_pct
FROM judged
