-- _prediction_inputs: per overlapped instance with a baseline, the values kernel_attribution takes medians of per
-- group (_group_predictions): instance_predictions' intervals, and the witnesses' per-instance values.
-- columns:
--   group_id          BIGINT   its group (_signature_stats)
--   sm_lo             DOUBLE   SM prediction, low
--   sm_pt             DOUBLE   SM prediction, point
--   sm_hi             DOUBLE   SM prediction, high
--   dram_lo           DOUBLE   DRAM prediction, low
--   dram_pt           DOUBLE   DRAM prediction, point
--   dram_hi           DOUBLE   DRAM prediction, high
--   cache_lo          DOUBLE   cache prediction, low
--   cache_pt          DOUBLE   cache prediction, point
--   cache_hi          DOUBLE   cache prediction, high
--   clock_lo          DOUBLE   clock prediction, low
--   clock_pt          DOUBLE   clock prediction, point
--   clock_hi          DOUBLE   clock prediction, high
--   link_lo           DOUBLE   link prediction, low
--   link_pt           DOUBLE   link prediction, point
--   link_hi           DOUBLE   link prediction, high
--   sm_predicted      DOUBLE   SM model's point prediction for the overlapped time (sm_pt / f)
--   dram_busy         DOUBLE   DRAM rate during it / saturation
--   extra_bytes_frac  DOUBLE   witness only: DRAM traffic beyond what victim and co-runners move alone (relative)
--   dram_sat_pct      DOUBLE   the device's DRAM saturation (% of peak)
--   memory_bound      BOOLEAN  isolated DRAM rate >= memory_bound_frac of saturation
--   footprint         BOOLEAN  a co-runner has a cache footprint
--   clock_power       BOOLEAN  the clock dropped while the device drew more power than in isolation
--   cache_evidence    VARCHAR  ncu_working_set, footprint or NULL
--   clock_base_mhz    DOUBLE   the GPC clock the clock factor compares with (MHz)
SELECT group_id, sm_lo, sm_pt, sm_hi, dram_lo, dram_pt, dram_hi, cache_lo, cache_pt, cache_hi, clock_lo, clock_pt,
       clock_hi, link_lo, link_pt, link_hi, sm_pt / nullif(f, 0) AS sm_predicted, dram_pct / dram_sat_pct AS dram_busy,
       extra_bytes_frac, dram_sat_pct, memory_bound, footprint, clock_power, cache_evidence, clock_base_mhz
FROM instance_predictions
