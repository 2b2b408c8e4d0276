-- _instance_overlap: per GPU activity (every kernel, copy and set), the exact time each class of other activity
-- overlapped it, and the SMs the co-running kernels held. The activity itself is active over its whole interval,
-- so "another activity of my own class" is "two or more of my class" and "anything else" is "two or more in all".
-- columns:
--   run_id              VARCHAR  run
--   device_id           INTEGER  physical GPU
--   activity_id         BIGINT   activity (_activities)
--   comm_overlap_ns     BIGINT   time overlapped by other communication (NCCL kernels, peer copies) (ns)
--   compute_overlap_ns  BIGINT   time overlapped by other non-communication kernels (ns)
--   copy_overlap_ns     BIGINT   time overlapped by other copies and sets on the device (ns)
--   overlap_ns          BIGINT   time overlapped by any other activity (ns)
--   corunner_sm_ns      BIGINT   integral of the SMs held by other kernels over the activity (SM·ns)
--   comm_sm_ns          BIGINT   the same, communication kernels only (SM·ns)
--   exclusive_sm_ns     BIGINT   of those, the SMs taken from it (SM·ns): a co-running kernel takes the SMs it holds when
--                                not one of the activity's CTAs fits beside its resident CTAs there (no CTA slot left,
--                                or fewer warps, registers or shared memory left than one of its CTAs needs; resident:
--                                min(the co-runner's occupancy, ceil(CTAs / SMs)), spread one per SM first)
--   exclusive_start_sm_ns BIGINT the same, of those kernels already running when it started (SM·ns): a grid that
--                                fits in one wave keeps the SMs it starts on, so later ones cannot take them
--   slots_sm_ns         BIGINT   of each SM a co-running kernel holds, the share of the activity's CTA slots lost there,
--                                (occ - fits) / occ (fits: the tightest of the CTA slots, warps, registers and shared
--                                memory left, over what one of its CTAs needs, within [0, occ]) (SM·ns, floor)
--   slots_start_sm_ns   BIGINT   the same, of those kernels already running when it started (SM·ns)
--   sm_count            INTEGER  SMs on the device
SELECT a.run_id, a.device_id, a.activity_id,
       CASE WHEN a.corunner_kind = 'comm' THEN e.comm2_ns - s.comm2_ns ELSE e.comm_ns - s.comm_ns END::BIGINT
           AS comm_overlap_ns,
       CASE WHEN a.corunner_kind = 'compute' THEN e.compute2_ns - s.compute2_ns
            ELSE e.compute_ns - s.compute_ns END::BIGINT AS compute_overlap_ns,
       CASE WHEN a.corunner_kind = 'copy' THEN e.copy2_ns - s.copy2_ns ELSE e.copy_ns - s.copy_ns END::BIGINT
           AS copy_overlap_ns,
       (e.all2_ns - s.all2_ns)::BIGINT AS overlap_ns,
       -- the activity's own SMs leave the integral; communication SMs are capped at the SM count as a whole
       greatest(0, (e.sm_comm - s.sm_comm) + (e.sm_compute - s.sm_compute) - a.sm_held * a.dur_ns)::BIGINT
           AS corunner_sm_ns,
       greatest(0, (e.sm_comm - s.sm_comm)
                   - CASE WHEN a.corunner_kind = 'comm' THEN a.sm_held * a.dur_ns ELSE 0 END)::BIGINT AS comm_sm_ns,
       coalesce(h.ns, 0)::BIGINT AS exclusive_sm_ns,
       coalesce(h.start_ns, 0)::BIGINT AS exclusive_start_sm_ns,
       coalesce(h.slots_ns, 0)::BIGINT AS slots_sm_ns,
       coalesce(h.slots_start_ns, 0)::BIGINT AS slots_start_sm_ns,
       d.sm_count
FROM _activity_rows a
LEFT JOIN (
    -- per (activity, co-running kernel): its CTA slots per SM lost beside the co-runner's resident CTAs, and the SMs
    -- taken when it loses them all, over their overlap; and over the part from its start of those running then
    -- (starts at the same time included), up to their end or its own (traceql.engine.sweeps.taken computes the same)
    WITH fit AS (
        SELECT a.run_id, a.device_id, a.activity_id, a.start_ns, a.end_ns, a.sm_held AS held,
               coalesce(a.launch_occupancy, 0) AS occ, w.warps,
               coalesce(a.regs_per_thread, 0) * 32 * w.warps AS regs,
               coalesce(a.dynamic_smem_bytes, 0) + coalesce(a.static_smem_bytes, 0) AS smem,
               least(coalesce(a.launch_occupancy, 0),
                     ceil(a.ctas / greatest(1, coalesce(d.sm_count, a.ctas)))::BIGINT) AS resident,
               coalesce(d.max_blocks_per_sm, 32) AS max_ctas, coalesce(d.max_warps_per_sm, 64) AS max_warps,
               coalesce(d.max_regs_per_sm, 65536) AS max_regs, coalesce(d.max_smem_per_sm_bytes, 233472) AS max_smem
        FROM _activity_rows a LEFT JOIN devices d USING (run_id, device_id),
             LATERAL (SELECT ceil(coalesce(a.threads_per_block, 0) / 32.0)::BIGINT AS warps) w
        WHERE a.activity = 'kernel'
    ), pairs AS (
        SELECT v.run_id, v.activity_id, v.occ, c.held,
               v.occ - greatest(0, least(v.occ, c.max_ctas - c.resident,
                                         CASE WHEN v.warps > 0 THEN (c.max_warps - c.resident * c.warps) // v.warps END,
                                         CASE WHEN v.regs > 0 THEN (c.max_regs - c.resident * c.regs) // v.regs END,
                                         CASE WHEN v.smem > 0 THEN (c.max_smem - c.resident * c.smem) // v.smem END))
                   AS lost,
               least(c.end_ns, v.end_ns) - greatest(c.start_ns, v.start_ns) AS both_ns,
               CASE WHEN c.start_ns <= v.start_ns THEN least(c.end_ns, v.end_ns) - v.start_ns ELSE 0 END AS from_start_ns
        FROM fit v JOIN fit c
          ON c.run_id = v.run_id AND c.device_id = v.device_id AND c.start_ns < v.end_ns AND c.end_ns > v.start_ns
         AND c.activity_id <> v.activity_id AND c.held > 0
    )
    SELECT run_id, activity_id,
           sum(CASE WHEN lost = occ AND lost > 0 THEN held * both_ns::HUGEINT ELSE 0 END) AS ns,
           sum(CASE WHEN lost = occ AND lost > 0 THEN held * from_start_ns::HUGEINT ELSE 0 END) AS start_ns,
           sum(lost * held * both_ns::HUGEINT) // greatest(1, any_value(occ)) AS slots_ns,
           sum(lost * held * from_start_ns::HUGEINT) // greatest(1, any_value(occ)) AS slots_start_ns
    FROM pairs GROUP BY run_id, activity_id
) h ON h.run_id = a.run_id AND h.activity_id = a.activity_id
JOIN _activity_steps s ON s.run_id = a.run_id AND s.device_id = a.device_id AND s.t = a.start_ns
JOIN _activity_steps e ON e.run_id = a.run_id AND e.device_id = a.device_id AND e.t = a.end_ns
LEFT JOIN devices d ON d.run_id = a.run_id AND d.device_id = a.device_id
