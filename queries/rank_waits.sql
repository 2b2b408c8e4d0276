-- rank_waits: per device, the time its collectives waited for other ranks to arrive (collective_waits), and the
-- rank it waited for most. One row per (run, device) over all its collectives (nvtx NULL), and, when attribution
-- groups by NVTX, one per NVTX group as well.
-- columns:
--   run_id           VARCHAR  run
--   device_id        INTEGER  physical GPU
--   nvtx             VARCHAR  NVTX group; NULL: the whole device
--   collectives      BIGINT   matched collectives
--   wait_ms          DOUBLE   time its NCCL kernels waited for the last rank to arrive (ms)
--   transfer_ms      DOUBLE   the rest of their time (ms)
--   exposed_wait_ms  DOUBLE   the part of wait_ms with no compute kernel of the device running (ms): what waiting
--                            cost its GPU; the rest ran beside its compute
--   late_run_id      VARCHAR  run of the rank it waited for most (the devices of a run share its clock)
--   late_device_id   INTEGER  device of that rank (NULL: it never waited)
--   late_share       DOUBLE   that rank's share of the wait
WITH c AS (
    SELECT run_id, device_id, nvtx, late_device_id, wait_ns, transfer_ns, exposed_wait_ns FROM collective_waits
), sets AS (
    SELECT run_id, device_id, NULL::VARCHAR AS nvtx, late_device_id, wait_ns, transfer_ns, exposed_wait_ns FROM c
    UNION ALL
    SELECT * FROM c WHERE nvtx IS NOT NULL
), by_late AS (
    SELECT run_id, device_id, nvtx, late_device_id, sum(wait_ns) AS wait_ns FROM sets
    WHERE late_device_id <> device_id GROUP BY ALL
), top AS (
    SELECT run_id, device_id, nvtx, arg_max(late_device_id, (wait_ns, -late_device_id)) AS late_device_id,
           max(wait_ns) AS late_wait_ns
    FROM by_late WHERE wait_ns > 0 GROUP BY ALL
)
SELECT s.run_id, s.device_id, s.nvtx, count(*) AS collectives, sum(s.wait_ns) / 1e6 AS wait_ms,
       sum(s.transfer_ns) / 1e6 AS transfer_ms, sum(s.exposed_wait_ns) / 1e6 AS exposed_wait_ms,
       CASE WHEN any_value(t.late_device_id) IS NOT NULL THEN s.run_id END AS late_run_id, any_value(t.late_device_id) AS late_device_id,
       any_value(t.late_wait_ns) / nullif(sum(s.wait_ns), 0) AS late_share
FROM sets s LEFT JOIN top t ON t.run_id = s.run_id AND t.device_id = s.device_id AND t.nvtx IS NOT DISTINCT FROM s.nvtx
GROUP BY s.run_id, s.device_id, s.nvtx
