-- kernel_attribution: per (sub-)signature group of GPU activity (kernels of every kind, copies, sets; and NVTX
-- group): observed slowdown under overlap with its interval, and the part of it explained by each contended resource. Factors combine multiplicatively
-- (t1/t0 = (1+clock)(1+sm)(1+dram_bw)(1+cache)(1+link)·(1+residual)); each factor's part of the
-- slowdown is s·ln(1+e)/ln(1+s), so the parts and the residual add up to the slowdown s.
-- Models (docs/attribution.md): clock f0/f1-1 first; SM: wave model with the co-runners' SMs;
-- DRAM: combined isolated demand over 90% of peak, plus the remaining loss when both victim and co-runners move
-- DRAM traffic (>= 10% of peak each) without extra bytes; cache: DRAM bytes that appear only under overlap
-- (>= 25% more than victim and co-runners move alone); link: NVLink/PCIe busy (>= 30%) while nothing else explains.
-- Nsight Compute demand (_ncu_demand), where a profile matches the signature: its CTAs per SM are the occupancy of
-- the wave model; its isolated DRAM rate stands in for the victim's when GPU metrics did not measure one; without
-- GPU metrics, cache evidence is an isolated L2 hit rate >= 50% with a working set that fits in L2 alone but not
-- beside the profiled co-runners' working sets.
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
--   n_isolated           BIGINT   baseline instances
--   t0_ns                DOUBLE   baseline, median (ns)
--   t0_lo_ns             DOUBLE   its 95% interval, lower bound (ns)
--   t0_hi_ns             DOUBLE   its 95% interval, upper bound (ns)
--   t0_spread            DOUBLE   baseline interquartile range / median
--   t1_ns                DOUBLE   overlapped instances, median (ns)
--   t1_lo_ns             DOUBLE   its 95% interval, lower bound (ns)
--   t1_hi_ns             DOUBLE   its 95% interval, upper bound (ns)
--   sum_t1_ns            HUGEINT  total duration of the overlapped instances (ns)
--   sum_t0_ns            DOUBLE   total baseline duration of the overlapped instances (ns)
--   slowdown             DOUBLE   t1/t0 - 1 (or the median per-instance ratio - 1 under a drifting baseline)
--   slowdown_lo          DOUBLE   its 95% interval (bootstrap), lower bound
--   slowdown_hi          DOUBLE   its 95% interval (bootstrap), upper bound
--   baseline             VARCHAR  where t0 comes from: isolated, isolated nearest in time, baseline run, ncu
--   baseline_drift       BOOLEAN  the isolated durations drift over time (then each instance has a nearby baseline)
--   conflated            BOOLEAN  isolated durations mix different work that could not be split: left out of sums
--   in_overlap_slowdown  DOUBLE   slowdown while actually overlapped, 1/rho - 1 with rho = (1/(1+s) - (1-f))/f (f >= 0.2)
--   overlap_fraction     DOUBLE   overlapped time / duration of the overlapped instances
--   comm_fraction        DOUBLE   communication-overlapped time / duration of the overlapped instances
--   sm_share             DOUBLE   co-runners' SM share over the overlapped instances
--   comm_sm_share        DOUBLE   communication kernels' SM share over the overlapped instances
--   corunner_kind        VARCHAR  kind that overlapped longest: comm, compute, copy
--   corunner_sms         DOUBLE   SMs held by co-runners while overlapped
--   occupancy            BIGINT   CTAs per SM in the wave model: Nsight Compute's, else the launch configuration's
--   sm_predicted         DOUBLE   SM (wave) model's slowdown while overlapped
--   significant          BOOLEAN  the slowdown interval excludes 0 and |slowdown| >= 1%
--   sm                   DOUBLE   part of the slowdown explained by SMs taken
--   dram_bw              DOUBLE   part explained by DRAM bandwidth
--   cache                DOUBLE   part explained by L2 cache interference
--   clock                DOUBLE   part explained by a lower clock (negative: a higher clock helped)
--   link                 DOUBLE   part explained by NVLink/PCIe traffic
--   residual             DOUBLE   slowdown left unexplained
--   sm_lo                DOUBLE   95% interval of the SM part, lower bound (the part scales with the slowdown)
--   sm_hi                DOUBLE   95% interval of the SM part, upper bound
--   dram_bw_lo           DOUBLE   95% interval of the DRAM part, lower bound
--   dram_bw_hi           DOUBLE   95% interval of the DRAM part, upper bound
--   cache_lo             DOUBLE   95% interval of the cache part, lower bound
--   cache_hi             DOUBLE   95% interval of the cache part, upper bound
--   clock_lo             DOUBLE   95% interval of the clock part, lower bound
--   clock_hi             DOUBLE   95% interval of the clock part, upper bound
--   link_lo              DOUBLE   95% interval of the link part, lower bound
--   link_hi              DOUBLE   95% interval of the link part, upper bound
--   class                VARCHAR  sm, dram_bw, cache, clock, link, mixed, unexplained, none, conflated
--   reason               VARCHAR  why the class is none/unexplained or a number is missing
--   dram_pct_iso         DOUBLE   witness: DRAM bandwidth, isolated instances (% of peak)
--   dram_pct_ovl         DOUBLE   witness: DRAM bandwidth, overlapped instances (% of peak)
--   gpc_clock_mhz_iso    DOUBLE   witness: GPC clock, isolated instances (MHz)
--   gpc_clock_mhz_ovl    DOUBLE   witness: GPC clock, overlapped instances (MHz)
--   sm_active_pct_iso    DOUBLE   witness: SMs Active, isolated instances (%)
--   sm_active_pct_ovl    DOUBLE   witness: SMs Active, overlapped instances (%)
--   nvlink_pct_ovl       DOUBLE   witness: NVLink, overlapped instances (% of peak)
--   pcie_pct_ovl         DOUBLE   witness: PCIe, overlapped instances (% of peak)
--   co_dram_pct          DOUBLE   witness: co-runners' isolated DRAM rate while overlapping (% of peak)
--   occupancy_source     VARCHAR  where occupancy comes from: ncu or launch
--   launch_occupancy     BIGINT   CTAs per SM the launch configuration and device limits allow
--   ncu_match            VARCHAR  Nsight Compute profile of the signature: exact, name or unmatched (ncu_match)
--   ncu_ctas_per_sm      INTEGER  witness: CTAs per SM measured by Nsight Compute (NULL if none applies)
--   ncu_dram_pct         DOUBLE   witness: isolated DRAM throughput under Nsight Compute (% of peak)
--   ncu_l2_hit_pct       DOUBLE   witness: isolated L2 hit rate under Nsight Compute (%)
--   ncu_working_set_bytes DOUBLE  witness: DRAM bytes read + written alone under Nsight Compute (bytes)
--   co_working_set_bytes DOUBLE   witness: profiled co-runners' working sets while overlapping (bytes)
--   l2_bytes             BIGINT   witness: the device's L2 size (bytes)
--   cache_evidence       VARCHAR  cache evidence found: dram_bytes (extra traffic under overlap), ncu_working_set, NULL
WITH demand AS (
    SELECT k.*, k.occupancy AS launch_occupancy, coalesce(n.ctas_per_sm, k.occupancy) AS occ,
           CASE WHEN n.ctas_per_sm IS NOT NULL THEN 'ncu' ELSE 'launch' END AS occupancy_source,
           coalesce(n.match, 'unmatched') AS ncu_match, n.ctas_per_sm AS ncu_ctas_per_sm, n.dram_pct AS ncu_dram_pct,
           n.l2_hit_pct AS ncu_l2_hit_pct, n.working_set_bytes AS ncu_working_set_bytes, d.l2_bytes,
           -- the victim's DRAM demand alone: measured by GPU metrics, else by Nsight Compute
           coalesce(k.dram_pct_iso, n.dram_pct) AS dram_iso
    FROM kernel_signatures k
    LEFT JOIN _ncu_demand n ON k.activity = 'kernel' AND n.run_id = k.run_id AND n.device_id = k.device_id AND n.name = k.name
         AND n.grid = k.grid AND n.block = k.block AND n.dynamic_smem_bytes IS NOT DISTINCT FROM k.dynamic_smem_bytes
    LEFT JOIN devices d ON d.run_id = k.run_id AND d.device_id = k.device_id
), base AS (
    SELECT *, slowdown AS s,
           overlap_fraction AS f,
           ctas / (occ * sm_count)::DOUBLE AS waves
    FROM demand
), models AS (
    SELECT *,
        CASE WHEN corunner_sms IS NULL OR sm_count IS NULL THEN 0
             WHEN corunner_sms >= sm_count - 0.5 THEN NULL
             WHEN corunner_sms <= 0 THEN 0
             -- a grid smaller than the SMs left free does not notice the co-runner
             WHEN waves < 0.9 AND ctas <= occ * (sm_count - corunner_sms) THEN 0
             WHEN waves < 0.9 THEN ceil(ctas / (occ * (sm_count - corunner_sms))) - 1
             -- persistent kernels (about one full wave) and many waves: throughput scales with free SMs
             WHEN waves <= 1.0 OR waves >= 4 THEN sm_count / (sm_count - corunner_sms) - 1
             ELSE ceil(ctas / (occ * (sm_count - corunner_sms))) / ceil(ctas / (occ * sm_count)) - 1
        END AS sm_predicted,
        CASE WHEN gpc_clock_mhz_iso > 0 AND gpc_clock_mhz_ovl > 0 THEN gpc_clock_mhz_iso / gpc_clock_mhz_ovl - 1
             ELSE 0 END AS e_clock,
        -- DRAM bytes: measured over the overlapped instances, against what victim and co-runners move alone
        -- (co-runners assumed stretched like the victim, so their bytes scale with t0, not t1)
        dram_pct_ovl * t1_ns AS bytes_measured,
        dram_iso * t0_ns + coalesce(co_dram_pct, 0) * f * t0_ns AS bytes_expected
    FROM base
), tests AS (
    SELECT *,
        -- cache, measured: DRAM traffic that only appears under overlap (the victim's working set no longer fits)
        bytes_measured - bytes_expected >= greatest(0.25 * bytes_expected, 5 * t0_ns) AS bytes_test,
        -- cache, predicted from Nsight Compute: reuse in L2 alone, a working set that fits alone but not beside
        -- the co-runners' (DRAM bytes of a cold-L2 run bound the data a kernel touches from above)
        ncu_l2_hit_pct >= 50 AND ncu_working_set_bytes <= l2_bytes
            AND ncu_working_set_bytes + co_working_set_bytes > l2_bytes AS ncu_cache_test
    FROM models
), factors AS (
    SELECT *,
        coalesce(f * sm_predicted, 0) AS e_sm,
        -- combined demand over the sustainable peak: the bandwidth share lost to the co-runners
        coalesce(f * greatest(0, (dram_iso + co_dram_pct) / 90.0 - 1), 0) AS e_dram,
        -- a measurement, where GPU metrics allow one, wins over the prediction
        coalesce(bytes_test, ncu_cache_test, false) AS cache_evidence,
        CASE WHEN bytes_test THEN 'dram_bytes' WHEN bytes_test IS NULL AND ncu_cache_test THEN 'ncu_working_set' END
            AS cache_source,
        -- DRAM contention below saturation (queueing): both sides move DRAM traffic, no extra bytes
        coalesce(dram_iso >= 10 AND co_dram_pct >= 10, false) AS dram_evidence,
        coalesce(greatest(nvlink_pct_ovl, pcie_pct_ovl), 0) >= 30 AS link_evidence
    FROM tests
), combined AS (
    SELECT *,
        -- what clock leaves, then SM and DRAM saturation scaled down together if they over-explain it
        (1 + s) / (1 + e_clock) - 1 AS r1,
        (1 + e_sm) * (1 + e_dram) - 1 AS sd
    FROM factors
), scaled AS (
    SELECT *,
        CASE WHEN sd > greatest(r1, 0) AND sd > 0 THEN greatest(r1, 0) / sd ELSE 1 END AS k
    FROM combined
), rest AS (
    SELECT *, (1 + r1) / ((1 + e_sm * k) * (1 + e_dram * k)) - 1 AS r2 FROM scaled
), parts AS (
    SELECT *,
        e_sm * k AS e_sm2,
        (1 + e_dram * k) * (1 + CASE WHEN dram_evidence AND NOT cache_evidence THEN greatest(0, r2) ELSE 0 END) - 1
            AS e_dram2,
        CASE WHEN cache_evidence THEN greatest(0, r2) ELSE 0 END AS e_cache
    FROM rest
), final AS (
    SELECT *,
        CASE WHEN link_evidence AND NOT cache_evidence AND NOT dram_evidence AND r2 > 0
                  AND e_sm2 + e_dram2 < 0.5 * greatest(r1, 1e-9)
             THEN r2 ELSE 0 END AS e_link,
        CASE WHEN s IS NOT NULL AND abs(ln(1 + s)) > 1e-12 THEN s / ln(1 + s) END AS to_part
    FROM parts
), attributed AS (
    SELECT *,
        coalesce(to_part * ln(1 + e_sm2), 0) AS p_sm,
        coalesce(to_part * ln(1 + e_dram2), 0) AS p_dram,
        coalesce(to_part * ln(1 + e_cache), 0) AS p_cache,
        coalesce(to_part * ln(1 + e_clock), 0) AS p_clock,
        coalesce(to_part * ln(1 + e_link), 0) AS p_link,
        significant_stat AND NOT conflated AS sig
    FROM final
)
SELECT run_id, device_id, nvtx, group_id, activity, kind, name, short_name, grid, block, dynamic_smem_bytes, bytes,
       mode, split, n, n_overlapped, n_isolated, t0_ns, t0_lo_ns, t0_hi_ns, t0_spread, t1_ns, t1_lo_ns, t1_hi_ns,
       sum_t1_ns, sum_t0_ns, s AS slowdown, slowdown_lo, slowdown_hi, baseline, baseline_drift, conflated,
       CASE WHEN f >= 0.2 AND s IS NOT NULL THEN 1 / ((1 / (1 + s) - (1 - f)) / f) - 1 END AS in_overlap_slowdown,
       overlap_fraction, comm_fraction, sm_share, comm_sm_share, corunner_kind, corunner_sms, occ AS occupancy,
       sm_predicted, coalesce(sig, false) AS significant,
       p_sm AS sm, p_dram AS dram_bw, p_cache AS cache, p_clock AS clock, p_link AS link,
       CASE WHEN s IS NOT NULL THEN s - p_sm - p_dram - p_cache - p_clock - p_link END AS residual,
       least(p_sm * slowdown_lo / nullif(s, 0), p_sm * slowdown_hi / nullif(s, 0)) AS sm_lo,
       greatest(p_sm * slowdown_lo / nullif(s, 0), p_sm * slowdown_hi / nullif(s, 0)) AS sm_hi,
       least(p_dram * slowdown_lo / nullif(s, 0), p_dram * slowdown_hi / nullif(s, 0)) AS dram_bw_lo,
       greatest(p_dram * slowdown_lo / nullif(s, 0), p_dram * slowdown_hi / nullif(s, 0)) AS dram_bw_hi,
       least(p_cache * slowdown_lo / nullif(s, 0), p_cache * slowdown_hi / nullif(s, 0)) AS cache_lo,
       greatest(p_cache * slowdown_lo / nullif(s, 0), p_cache * slowdown_hi / nullif(s, 0)) AS cache_hi,
       least(p_clock * slowdown_lo / nullif(s, 0), p_clock * slowdown_hi / nullif(s, 0)) AS clock_lo,
       greatest(p_clock * slowdown_lo / nullif(s, 0), p_clock * slowdown_hi / nullif(s, 0)) AS clock_hi,
       least(p_link * slowdown_lo / nullif(s, 0), p_link * slowdown_hi / nullif(s, 0)) AS link_lo,
       greatest(p_link * slowdown_lo / nullif(s, 0), p_link * slowdown_hi / nullif(s, 0)) AS link_hi,
       CASE WHEN conflated THEN 'conflated'
            WHEN n_overlapped = 0 OR t0_ns IS NULL THEN 'none'
            WHEN s IS NULL THEN 'unexplained'
            WHEN NOT sig OR s <= 0 THEN 'none'
            WHEN p_clock >= 0.5 * s THEN 'clock'
            WHEN p_sm >= 0.5 * s THEN 'sm'
            WHEN p_dram >= 0.5 * s THEN 'dram_bw'
            WHEN p_cache >= 0.5 * s THEN 'cache'
            WHEN p_link >= 0.5 * s THEN 'link'
            WHEN p_sm + p_dram + p_cache + p_clock + p_link >= 0.5 * s THEN 'mixed'
            ELSE 'unexplained' END AS class,
       CASE WHEN conflated THEN note
            WHEN n_overlapped = 0 THEN 'never overlapped'
            WHEN t0_ns IS NULL THEN coalesce(note, 'no baseline to compare with (give --baseline or --ncu)')
            WHEN NOT sig AND slowdown_lo IS NULL THEN 'too few instances for an interval'
            WHEN NOT sig THEN 'the slowdown interval includes 0 or stays under 1%'
            WHEN s <= 0 THEN 'faster when overlapped'
            WHEN dram_pct_ovl IS NULL AND ncu_dram_pct IS NULL THEN 'no GPU metrics: only the SM model could be applied'
            WHEN dram_pct_ovl IS NULL THEN 'no GPU metrics: only the SM model and Nsight Compute demand could be applied'
            WHEN p_sm + p_dram + p_cache + p_clock + p_link < 0.5 * s
                 AND greatest(p_sm, p_dram, p_cache, p_clock, p_link) < 0.5 * s THEN 'no factor reaches its threshold'
       END AS reason,
       dram_pct_iso, dram_pct_ovl, gpc_clock_mhz_iso, gpc_clock_mhz_ovl, sm_active_pct_iso, sm_active_pct_ovl,
       nvlink_pct_ovl, pcie_pct_ovl, co_dram_pct, occupancy_source, launch_occupancy, ncu_match, ncu_ctas_per_sm,
       ncu_dram_pct, ncu_l2_hit_pct, ncu_working_set_bytes, co_working_set_bytes, l2_bytes,
       cache_source AS cache_evidence
FROM attributed
