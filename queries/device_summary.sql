-- device_summary: per device, how compute and communication shared the GPU; per NVTX group too when grouping.
-- Device rows (nvtx NULL) use interval unions; group rows sum over the group's compute kernels (communication
-- kernels belong to no group, so comm_ns, exposed_comm_ns and hidden_comm_fraction are NULL there). Compute kernels
-- are all kernels that are not communication; compute_slowdown sums each overlapped instance's own baseline.
-- columns:
--   run_id                VARCHAR  run
--   device_id             INTEGER  physical GPU
--   nvtx                  VARCHAR  NVTX group, NULL for the whole device
--   compute_ns            BIGINT   time with a non-communication kernel running (union) (ns)
--   comm_ns               BIGINT   time with communication running: NCCL kernels, peer copies (union) (ns)
--   overlap_ns            BIGINT   time with both running (ns)
--   exposed_comm_ns       BIGINT   communication time with no kernel beside it (ns)
--   hidden_comm_fraction  DOUBLE   overlap_ns / comm_ns
--   overlap_fraction      DOUBLE   communication-overlapped time of compute kernels / their duration
--   compute_slowdown      DOUBLE   sum t1 / sum t0 - 1 over overlapped compute kernels with a baseline
--   compute_kernels       BIGINT   compute kernel instances
--   overlapped_kernels    BIGINT   of those, overlapped by any other activity
WITH totals AS (
    SELECT * FROM _device_unions
), inst AS (
    -- compute: every kernel that is not communication
    SELECT run_id, device_id, activity_id, nvtx, dur_ns, comm_overlap_ns, overlap_ns
    FROM _instance_facts WHERE activity = 'kernel' AND activity_class = 'compute'
), slowed AS (
    -- the overlapped ones with a baseline, t0 per instance (none from groups left out as conflated: their t0 is NULL)
    SELECT i.run_id, i.device_id, i.nvtx, i.dur_ns, b.t0_ns
    FROM inst i JOIN _instance_baselines b USING (run_id, activity_id)
    WHERE i.overlap_ns > 0 AND b.t0_ns IS NOT NULL
), slowed_device AS (
    SELECT run_id, device_id, sum(dur_ns) / nullif(sum(t0_ns), 0) - 1 AS compute_slowdown FROM slowed GROUP BY ALL
), slowed_group AS (
    SELECT run_id, device_id, nvtx, sum(dur_ns) / nullif(sum(t0_ns), 0) - 1 AS compute_slowdown
    FROM slowed WHERE nvtx IS NOT NULL GROUP BY ALL
), per_device AS (
    SELECT run_id, device_id, sum(comm_overlap_ns) / nullif(sum(dur_ns), 0) AS overlap_fraction,
           count(*) AS compute_kernels, count(*) FILTER (overlap_ns > 0) AS overlapped_kernels
    FROM inst GROUP BY ALL
), per_group AS (
    SELECT run_id, device_id, nvtx, sum(dur_ns)::BIGINT AS compute_ns, sum(comm_overlap_ns)::BIGINT AS overlap_ns,
           sum(comm_overlap_ns) / nullif(sum(dur_ns), 0) AS overlap_fraction,
           count(*) AS compute_kernels, count(*) FILTER (overlap_ns > 0) AS overlapped_kernels
    FROM inst WHERE nvtx IS NOT NULL GROUP BY ALL
)
SELECT t.run_id, t.device_id, NULL::VARCHAR AS nvtx, t.compute_ns::BIGINT AS compute_ns, t.comm_ns::BIGINT AS comm_ns,
       t.overlap_ns::BIGINT AS overlap_ns, (t.comm_ns - t.overlap_ns)::BIGINT AS exposed_comm_ns,
       t.overlap_ns / nullif(t.comm_ns, 0)::DOUBLE AS hidden_comm_fraction, p.overlap_fraction, d.compute_slowdown,
       coalesce(p.compute_kernels, 0) AS compute_kernels, coalesce(p.overlapped_kernels, 0) AS overlapped_kernels
FROM totals t LEFT JOIN per_device p USING (run_id, device_id) LEFT JOIN slowed_device d USING (run_id, device_id)
UNION ALL
SELECT g.run_id, g.device_id, g.nvtx, g.compute_ns, NULL, g.overlap_ns, NULL, NULL, g.overlap_fraction,
       d.compute_slowdown, g.compute_kernels, g.overlapped_kernels
FROM per_group g LEFT JOIN slowed_group d USING (run_id, device_id, nvtx)
