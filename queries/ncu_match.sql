-- ncu_match: per trace kernel signature (name, grid, block, dynamic shared memory), the kernels Nsight Compute
-- profiled in isolation (ncu_kernels, from any run of the store) and their demand. match is 'exact' (same demangled
-- name and launch configuration), 'name' (same name, another configuration: the closest one, most of grid, block
-- and shared memory equal; its ctas_per_sm and waves describe that configuration) or 'unmatched'. Profiles taken
-- on another GPU model never match. Demand columns are medians over the matched profiled kernels.
-- columns:
--   run_id                              VARCHAR    trace run
--   device_id                           INTEGER    physical GPU
--   name                                VARCHAR    demangled kernel name
--   short_name                          VARCHAR    base function name
--   grid                                VARCHAR    grid as XxYxZ
--   block                               VARCHAR    block as XxYxZ
--   dynamic_smem_bytes                  BIGINT     dynamic shared memory (bytes)
--   kind                                VARCHAR    compute, comm, memory or other
--   n                                   BIGINT     instances in the trace
--   match                               VARCHAR    exact, name or unmatched
--   n_profiled                          BIGINT     profiled kernels the demand comes from
--   ncu_run_ids                         VARCHAR[]  Nsight Compute runs they come from
--   ncu_grid                            VARCHAR    grid of the profiled kernels (the most frequent)
--   ncu_block                           VARCHAR    block of the profiled kernels
--   ncu_dynamic_smem_bytes              BIGINT     dynamic shared memory of the profiled kernels (bytes)
--   duration_ns                         DOUBLE     isolated duration under ncu (ns)
--   sm_throughput_pct                   DOUBLE     SM throughput (% of peak)
--   tensor_pipe_pct                     DOUBLE     tensor pipe utilization (% of peak)
--   achieved_occupancy_pct              DOUBLE     achieved occupancy (% of the SM's warps)
--   theoretical_occupancy_pct           DOUBLE     theoretical occupancy (% of the SM's warps)
--   ctas_per_sm                         INTEGER    CTAs per SM the tightest occupancy limit allows
--   occupancy_limiter                   VARCHAR    that limit: registers, shared_mem, warps, blocks or barriers
--   waves_per_sm                        DOUBLE     waves of CTAs per SM
--   dram_throughput_pct                 DOUBLE     DRAM throughput (% of peak)
--   dram_bytes_read                     DOUBLE     DRAM bytes read
--   dram_bytes_write                    DOUBLE     DRAM bytes written
--   dram_Bps                            DOUBLE     achieved DRAM bandwidth (bytes/s)
--   peak_dram_Bps                       DOUBLE     the device's peak DRAM bandwidth (bytes/s)
--   l2_hit_rate_pct                     DOUBLE     L2 sector hit rate (%)
--   l1_hit_rate_pct                     DOUBLE     L1/TEX sector hit rate (%)
--   compute_peak_fraction               DOUBLE     SM throughput / peak (0-1)
--   dram_peak_fraction                  DOUBLE     DRAM bandwidth / peak (0-1)
--   arithmetic_intensity_flop_per_byte  DOUBLE     FLOP per DRAM byte (NULL unless FLOP counters were collected)
--   bound                               VARCHAR    compute or memory (the most frequent)
--   sig                                 UBIGINT    the signature's id (kernels.sig)
WITH sig AS (
    SELECT k.run_id, k.device_id, k.name, k.short_name, concat_ws('x', k.grid_x, k.grid_y, k.grid_z) AS grid,
           concat_ws('x', k.block_x, k.block_y, k.block_z) AS block, k.dynamic_smem_bytes, k.kind, k.n, k.sig,
           d.name AS gpu_name
    FROM _kernel_sigs k LEFT JOIN devices d ON d.run_id = k.run_id AND d.device_id = k.device_id
), prof AS (
    SELECT *, concat_ws('x', grid_x, grid_y, grid_z) AS grid, concat_ws('x', block_x, block_y, block_z) AS block
    FROM ncu_kernels WHERE workload = 'kernel'
), best AS (
    SELECT s.run_id, s.device_id, s.name, s.grid, s.block, s.dynamic_smem_bytes, p.run_id AS ncu_run_id,
           p.grid AS ncu_grid, p.block AS ncu_block, p.dynamic_smem_bytes AS ncu_dynamic_smem_bytes,
           p.grid = s.grid AND p.block = s.block
               AND p.dynamic_smem_bytes IS NOT DISTINCT FROM s.dynamic_smem_bytes AS exact,
           p.* EXCLUDE (run_id, device_id, name, grid, block, dynamic_smem_bytes)
    FROM sig s JOIN prof p
      ON p.name = s.name AND (p.device_name IS NULL OR s.gpu_name IS NULL OR p.device_name = s.gpu_name)
    QUALIFY rank() OVER (PARTITION BY s.run_id, s.device_id, s.name, s.grid, s.block, s.dynamic_smem_bytes
                         ORDER BY (p.grid = s.grid)::INT + (p.block = s.block)::INT
                                  + (p.dynamic_smem_bytes IS NOT DISTINCT FROM s.dynamic_smem_bytes)::INT DESC) = 1
), demand AS (
    SELECT run_id, device_id, name, grid, block, dynamic_smem_bytes,
           CASE WHEN bool_and(exact) THEN 'exact' ELSE 'name' END AS match, count(*) AS n_profiled,
           list_sort(list(DISTINCT ncu_run_id)) AS ncu_run_ids, mode(ncu_grid) AS ncu_grid,
           mode(ncu_block) AS ncu_block, mode(ncu_dynamic_smem_bytes) AS ncu_dynamic_smem_bytes,
           median(duration_ns)::DOUBLE AS duration_ns, median(sm_throughput_pct) AS sm_throughput_pct,
           median(tensor_pipe_pct) AS tensor_pipe_pct,
           median(achieved_occupancy_pct) AS achieved_occupancy_pct,
           median(theoretical_occupancy_pct) AS theoretical_occupancy_pct, mode(ctas_per_sm) AS ctas_per_sm,
           mode(occupancy_limiter) AS occupancy_limiter, median(waves_per_sm) AS waves_per_sm,
           median(dram_throughput_pct) AS dram_throughput_pct, median(dram_bytes_read)::DOUBLE AS dram_bytes_read,
           median(dram_bytes_write)::DOUBLE AS dram_bytes_write, median(dram_Bps) AS dram_Bps,
           median(peak_dram_Bps) AS peak_dram_Bps, median(l2_hit_rate_pct) AS l2_hit_rate_pct,
           median(l1_hit_rate_pct) AS l1_hit_rate_pct, median(compute_peak_fraction) AS compute_peak_fraction,
           median(dram_peak_fraction) AS dram_peak_fraction,
           median(arithmetic_intensity_flop_per_byte) AS arithmetic_intensity_flop_per_byte, mode(bound) AS bound
    FROM best GROUP BY ALL
)
SELECT s.run_id, s.device_id, s.name, s.short_name, s.grid, s.block, s.dynamic_smem_bytes, s.kind, s.n,
       coalesce(d.match, 'unmatched') AS match, coalesce(d.n_profiled, 0) AS n_profiled,
       coalesce(d.ncu_run_ids, []::VARCHAR[]) AS ncu_run_ids, d.ncu_grid, d.ncu_block, d.ncu_dynamic_smem_bytes,
       d.duration_ns, d.sm_throughput_pct, d.tensor_pipe_pct, d.achieved_occupancy_pct, d.theoretical_occupancy_pct,
       d.ctas_per_sm, d.occupancy_limiter, d.waves_per_sm, d.dram_throughput_pct, d.dram_bytes_read,
       d.dram_bytes_write, d.dram_Bps, d.peak_dram_Bps, d.l2_hit_rate_pct, d.l1_hit_rate_pct,
       d.compute_peak_fraction, d.dram_peak_fraction, d.arithmetic_intensity_flop_per_byte, d.bound, s.sig
FROM sig s
LEFT JOIN demand d ON d.run_id = s.run_id AND d.device_id = s.device_id AND d.name = s.name AND d.grid = s.grid
     AND d.block = s.block AND d.dynamic_smem_bytes IS NOT DISTINCT FROM s.dynamic_smem_bytes
