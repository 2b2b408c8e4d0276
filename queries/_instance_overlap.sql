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
--   exclusive_sm_ns     BIGINT   the same, kernels whose CTAs take more than half an SM only (SM·ns)
--   exclusive_start_sm_ns BIGINT the same, of those kernels already running when it started (SM·ns): a grid that
--                                fits in one wave keeps the SMs it starts on, so later ones cannot take them
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
       greatest(0, (e.sm_exclusive - s.sm_exclusive) - a.sm_exclusive * a.dur_ns)::BIGINT AS exclusive_sm_ns,
       coalesce(h.ns, 0)::BIGINT AS exclusive_start_sm_ns,
       d.sm_count
FROM _activity_rows a
LEFT JOIN (
    -- the exclusive kernels running as it starts (starts at the same time included), up to their end or its own
    SELECT v.run_id, v.activity_id, sum(c.sm_exclusive * (least(c.end_ns, v.end_ns) - v.start_ns)) AS ns
    FROM _activity_rows v JOIN _activity_rows c
      ON c.run_id = v.run_id AND c.device_id = v.device_id AND c.start_ns <= v.start_ns AND c.end_ns > v.start_ns
     AND c.sm_exclusive > 0 AND c.activity_id <> v.activity_id
    GROUP BY v.run_id, v.activity_id
) h ON h.run_id = a.run_id AND h.activity_id = a.activity_id
JOIN _activity_steps s ON s.run_id = a.run_id AND s.device_id = a.device_id AND s.t = a.start_ns
JOIN _activity_steps e ON e.run_id = a.run_id AND e.device_id = a.device_id AND e.t = a.end_ns
LEFT JOIN devices d ON d.run_id = a.run_id AND d.device_id = a.device_id
