-- _thresholds: the constants that decide a class, one row. Each is calibrated on the known-cause traces
-- (tests/data/h100 and h200 known_cause, collected by collectors/known_cause.py); docs/attribution.md gives the
-- measured values on both sides of each threshold, and benchmarks/validate_attribution.py prints them per case.
-- columns:
--   memory_bound_frac     DOUBLE  a victim whose isolated DRAM rate is at least this fraction of the device's
--                                 saturation is bandwidth-bound: the SM model becomes a roofline (GEMMs 0.33-0.41,
--                                 half-SM streams 0.83-0.87, full-grid streams 0.99-1.0)
--   dram_busy_frac        DOUBLE  DRAM contention needs the device rate measured during the overlap to reach this
--                                 fraction of saturation (SM-only cases 0.26-0.45, DRAM-contended 0.92-1.0)
--   footprint_min_pct     DOUBLE  a co-runner with an isolated DRAM rate below this (% of peak) has no cache
--                                 footprint (an SM-holding spin kernel: 0.3-0.6%; real co-runners 29% and more)
--   dram_sat_floor_pct    DOUBLE  DRAM saturation is never taken below this (% of peak): what full-grid streaming
--                                 kernels reach alone (H100 89.9%, H200 89.4%); a trace that never saturates DRAM
--                                 would otherwise calibrate saturation to its own highest, unsaturated rate
--   cache_extra_min       DOUBLE  cache evidence: DRAM bytes during the overlap above what victim and co-runners move
--                                 alone by at least this fraction (DRAM-contended cases -2..+1%, L2 cases +100%)
SELECT 0.6::DOUBLE AS memory_bound_frac, 0.6::DOUBLE AS dram_busy_frac, 5.0::DOUBLE AS footprint_min_pct,
       88.0::DOUBLE AS dram_sat_floor_pct, 0.1::DOUBLE AS cache_extra_min
