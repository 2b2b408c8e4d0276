-- _activities: every GPU activity (kernels, copies, sets) with its co-runner kind and SMs held.
-- columns:
--   run_id          VARCHAR  run
--   device_id       INTEGER  physical GPU
--   start_ns        BIGINT   start (ns)
--   end_ns          BIGINT   end (ns)
--   corunner_kind   VARCHAR  comm (communication kernels, peer copies), compute (other kernels), copy (copies, sets)
--   sm_held         BIGINT   SMs the activity occupies: min(SM count, CTAs) for kernels, 0 for copy engines
--   is_victim       BOOLEAN  a compute kernel whose slowdown is attributed
SELECT k.run_id, k.device_id, k.start_ns, k.end_ns,
       CASE WHEN k.kind = 'comm' THEN 'comm' ELSE 'compute' END AS corunner_kind,
       least(k.ctas, coalesce(d.sm_count, k.ctas))::BIGINT AS sm_held,
       k.kind = 'compute' AS is_victim
FROM kernels k LEFT JOIN devices d USING (run_id, device_id)
UNION ALL
SELECT run_id, device_id, start_ns, end_ns, CASE WHEN is_peer THEN 'comm' ELSE 'copy' END, 0, false FROM memcpy
UNION ALL
SELECT run_id, device_id, start_ns, end_ns, 'copy', 0, false FROM memset
