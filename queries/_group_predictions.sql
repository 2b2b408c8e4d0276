-- _group_predictions: per group, the medians over its overlapped instances of what each contended resource predicts
-- (_prediction_inputs), and its witnesses. The engine (traceql.engine.medians) takes them from one scan in group
-- order, a few groups at a time, as SQL's median computes them; this SQL is the reference, which holds every
-- instance's values at once.
-- columns:
--   group_id          BIGINT   group (_signature_stats)
--   sm_lo             DOUBLE   SM prediction, low (median)
--   sm_pt             DOUBLE   SM prediction, point (median)
--   sm_hi             DOUBLE   SM prediction, high (median)
--   dram_lo           DOUBLE   DRAM prediction, low (median)
--   dram_pt           DOUBLE   DRAM prediction, point (median)
--   dram_hi           DOUBLE   DRAM prediction, high (median)
--   cache_lo          DOUBLE   cache prediction, low (median)
--   cache_pt          DOUBLE   cache prediction, point (median)
--   cache_hi          DOUBLE   cache prediction, high (median)
--   clock_lo          DOUBLE   clock prediction, low (median)
--   clock_pt          DOUBLE   clock prediction, point (median)
--   clock_hi          DOUBLE   clock prediction, high (median)
--   link_lo           DOUBLE   link prediction, low (median)
--   link_pt           DOUBLE   link prediction, point (median)
--   link_hi           DOUBLE   link prediction, high (median)
--   sm_predicted      DOUBLE   SM model's point prediction for the overlapped time (median)
--   dram_busy         DOUBLE   DRAM rate during the overlapped instances / saturation (median)
--   extra_bytes_frac  DOUBLE   DRAM traffic beyond what victim and co-runners move alone (relative; median)
--   dram_sat_pct      DOUBLE   the device's DRAM saturation (% of peak)
--   memory_bound      BOOLEAN  some instance is memory-bound
--   footprint         BOOLEAN  some co-runner has a cache footprint
--   clock_power       BOOLEAN  some instance's clock dropped while the device drew more power than in isolation
--   cache_evidence    VARCHAR  the first of ncu_working_set, footprint, extra_traffic that some instance has, else NULL
--   clock_base_mhz    DOUBLE   the GPC clock the clock factor compares with (median; MHz)
SELECT group_id, median(sm_lo) AS sm_lo, median(sm_pt) AS sm_pt, median(sm_hi) AS sm_hi,
       median(dram_lo) AS dram_lo, median(dram_pt) AS dram_pt, median(dram_hi) AS dram_hi,
       median(cache_lo) AS cache_lo, median(cache_pt) AS cache_pt, median(cache_hi) AS cache_hi,
       median(clock_lo) AS clock_lo, median(clock_pt) AS clock_pt, median(clock_hi) AS clock_hi,
       median(link_lo) AS link_lo, median(link_pt) AS link_pt, median(link_hi) AS link_hi,
       median(sm_predicted) AS sm_predicted, median(dram_busy) AS dram_busy,
       median(extra_bytes_frac) AS extra_bytes_frac, any_value(dram_sat_pct) AS dram_sat_pct,
       bool_or(memory_bound) AS memory_bound, bool_or(footprint) AS footprint, bool_or(clock_power) AS clock_power,
       CASE WHEN bool_or(cache_evidence = 'ncu_working_set') THEN 'ncu_working_set'
            WHEN bool_or(cache_evidence = 'footprint') THEN 'footprint'
            WHEN bool_or(cache_evidence = 'extra_traffic') THEN 'extra_traffic' END AS cache_evidence,
       median(clock_base_mhz) AS clock_base_mhz
FROM _prediction_inputs GROUP BY group_id
