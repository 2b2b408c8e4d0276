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
       d.sm_count
FROM _activity_rows a
JOIN _activity_steps s ON s.run_id = a.run_id AND s.device_id = a.device_id AND s.t = a.start_ns
JOIN _activity_steps e ON e.run_id = a.run_id AND e.device_id = a.device_id AND e.t = a.end_ns
LEFT JOIN devices d ON d.run_id = a.run_id AND d.device_id = a.device_id
