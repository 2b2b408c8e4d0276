-- _activity_dram: every GPU activity with the DRAM bandwidth it uses when it runs alone.
-- A kernel takes the device-wide DRAM rate measured during its signature's isolated instances (nothing else
-- on the device), else the isolated rate Nsight Compute measured for its signature (_ncu_demand); a copy
-- without isolated instances is estimated from its bytes (a same-device copy reads and writes them).
-- Activities with neither (no GPU metrics, no profile) count 0.
-- columns:
--   run_id       VARCHAR  run
--   device_id    INTEGER  physical GPU
--   start_ns     BIGINT   start (ns)
--   end_ns       BIGINT   end (ns)
--   global_pid   BIGINT   process (NULL for copies)
--   correlation_id BIGINT correlation id (NULL for copies)
--   dram_pct     DOUBLE   DRAM read + write bandwidth it uses alone (% of peak)
--   working_set_bytes DOUBLE working set of a profiled kernel (bytes, Nsight Compute; NULL otherwise)
WITH acts AS (
    SELECT k.run_id, k.device_id, k.start_ns, k.end_ns, k.global_pid, k.correlation_id,
           -- signatures compared by hash: cheaper than building a string per kernel
           hash(k.name, concat_ws('x', k.grid_x, k.grid_y, k.grid_z),
                concat_ws('x', k.block_x, k.block_y, k.block_z), k.dynamic_smem_bytes) AS sig,
           NULL::DOUBLE AS estimate
    FROM kernels k
    UNION ALL
    SELECT m.run_id, m.device_id, m.start_ns, m.end_ns, NULL, NULL,
           hash('memcpy', m.copy_kind, m.bytes),
           CASE WHEN m.dur_ns > 0 AND d.mem_bandwidth_Bps > 0
                THEN 100.0 * m.bytes * (CASE WHEN m.copy_kind = 'DtoD' THEN 2 ELSE 1 END)
                     / (m.dur_ns * 1e-9) / d.mem_bandwidth_Bps END
    FROM memcpy m LEFT JOIN devices d USING (run_id, device_id)
), isolated AS (
    SELECT a.*, (e.all2_ns - s.all2_ns) = 0 AS alone
    FROM acts a
    JOIN _activity_steps s ON s.run_id = a.run_id AND s.device_id = a.device_id AND s.t = a.start_ns
    JOIN _activity_steps e ON e.run_id = a.run_id AND e.device_id = a.device_id AND e.t = a.end_ns
), dram AS (
    SELECT run_id, device_id, ts_ns, cum_dram_pct AS cum_value, n_dram_pct AS cum_count, dram_pct AS value
    FROM _metric_samples WHERE dram_pct IS NOT NULL
), alone AS (
    SELECT run_id, device_id, sig, start_ns, end_ns FROM isolated WHERE alone AND end_ns > start_ns
), at_start AS (
    SELECT a.*, d.cum_value AS v0, d.cum_count AS c0, d.value AS around
    FROM alone a ASOF LEFT JOIN dram d ON d.run_id = a.run_id AND d.device_id = a.device_id AND d.ts_ns <= a.start_ns
), at_end AS (
    SELECT a.*, d.cum_value AS v1, d.cum_count AS c1
    FROM at_start a ASOF LEFT JOIN dram d ON d.run_id = a.run_id AND d.device_id = a.device_id AND d.ts_ns <= a.end_ns
), measured AS (
    -- DRAM average over each isolated activity: running sums at its end minus at its start
    SELECT run_id, device_id, sig, end_ns - start_ns AS dur_ns,
           CASE WHEN coalesce(c1, 0) - coalesce(c0, 0) > 0 THEN (v1 - coalesce(v0, 0)) / (c1 - coalesce(c0, 0))
                ELSE around END AS dram_pct
    FROM at_end
), profiled AS (
    SELECT run_id, device_id, hash(name, grid, block, dynamic_smem_bytes) AS sig,
           dram_pct, working_set_bytes
    FROM _ncu_demand
), rates AS (
    SELECT run_id, device_id, sig, sum(dram_pct * dur_ns) / sum(dur_ns) AS dram_pct
    FROM measured WHERE dram_pct IS NOT NULL GROUP BY ALL
)
SELECT i.run_id, i.device_id, i.start_ns, i.end_ns, i.global_pid, i.correlation_id,
       coalesce(r.dram_pct, p.dram_pct, i.estimate, 0) AS dram_pct, p.working_set_bytes
FROM isolated i LEFT JOIN rates r USING (run_id, device_id, sig)
LEFT JOIN profiled p USING (run_id, device_id, sig)
