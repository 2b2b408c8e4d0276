-- _union_intervals: the intervals whose unions are each device's compute and communication time: every kernel
-- (communication or compute, by its kind) and every peer copy (communication); other copies and sets are neither.
-- The same classes as _activity_rows.corunner_kind, with only what a union needs (tests/test_overlap.py keeps the
-- two alike).
-- columns:
--   run_id      VARCHAR  run
--   device_id   INTEGER  physical GPU
--   activity    VARCHAR  kernel or memcpy
--   start_ns    BIGINT   start (ns)
--   end_ns      BIGINT   end (ns)
--   cls         TINYINT  0: communication, 1: compute
SELECT run_id, device_id, 'kernel' AS activity, start_ns, end_ns,
       CASE WHEN kind = 'comm' THEN 0 ELSE 1 END::TINYINT AS cls
FROM kernels
UNION ALL
SELECT run_id, device_id, 'memcpy', start_ns, end_ns, 0::TINYINT FROM memcpy WHERE is_peer
