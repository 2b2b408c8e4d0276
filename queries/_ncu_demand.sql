-- _ncu_demand: per trace kernel signature that Nsight Compute profiled (ncu_match), the demand the attribution
-- may use. CTAs per SM depend on the CTA (block, shared memory, registers), not on the grid: they are used for an
-- exact match and for a name match whose profiled block and dynamic shared memory equal the signature's. DRAM rate,
-- L2 hit rate and working set describe the work of one launch configuration: exact matches only.
-- columns:
--   run_id                 VARCHAR  trace run
--   device_id              INTEGER  physical GPU
--   name                   VARCHAR  demangled kernel name
--   grid                   VARCHAR  grid as XxYxZ
--   block                  VARCHAR  block as XxYxZ
--   dynamic_smem_bytes     BIGINT   dynamic shared memory (bytes)
--   sig                    UBIGINT  the signature id (kernels.sig)
--   match                  VARCHAR  exact or name (ncu_match)
--   ctas_per_sm            INTEGER  CTAs per SM the profiled kernel's occupancy limits allow (NULL if not usable)
--   dram_pct               DOUBLE   isolated DRAM throughput (% of peak; exact matches only)
--   l2_hit_pct             DOUBLE   isolated L2 sector hit rate (%; exact matches only)
--   working_set_bytes      DOUBLE   DRAM bytes read + written alone, cold L2: an upper bound of the data it touches
--   duration_ns            DOUBLE   isolated duration under Nsight Compute (ns; exact matches only)
SELECT run_id, device_id, name, grid, block, dynamic_smem_bytes,
       sig, match,
       CASE WHEN match = 'exact' OR (ncu_block = block AND ncu_dynamic_smem_bytes IS NOT DISTINCT FROM dynamic_smem_bytes)
            THEN ctas_per_sm END AS ctas_per_sm,
       CASE WHEN match = 'exact' THEN coalesce(dram_throughput_pct, 100 * dram_peak_fraction) END AS dram_pct,
       CASE WHEN match = 'exact' THEN l2_hit_rate_pct END AS l2_hit_pct,
       CASE WHEN match = 'exact' THEN dram_bytes_read + dram_bytes_write END AS working_set_bytes,
       CASE WHEN match = 'exact' THEN duration_ns END AS duration_ns
FROM ncu_match
WHERE match <> 'unmatched'
