-- _collective_arrivals: every collective's NCCL kernel matched across the devices (ranks) of its run, with the last
-- arrival and this rank's wait for it. A collective finishes on no rank before every rank has arrived, so a rank
-- that arrives early waits inside its kernel: wait = last arrival - own arrival (at most the kernel's duration); the
-- rest of the kernel is its transfer: the time the attribution compares a collective on (work_ns), since the wait
-- depends on when another rank arrived, not on what ran beside this one.
-- Matching: the k-th collective of one kind (all_reduce, all_gather, reduce_scatter, broadcast, reduce,
-- all_to_all) of one communicator on each device of a run is the same operation, where every device that runs it
-- runs it the same number of times; otherwise it is not matched (point-to-point sends and receives never are). The
-- communicator comes from NCCL's NVTX payload (nccl_calls); without payloads, all collectives of a kind count as
-- one communicator's, and several communicators of one kind (tensor and data parallel groups) would be mismatched.
-- The devices of one run share its clock.
-- columns:
--   run_id           VARCHAR  run
--   device_id        INTEGER  physical GPU (the rank's device)
--   activity_id      BIGINT   the rank's NCCL kernel (_activity_rows)
--   comm_op          VARCHAR  collective
--   comm_id          VARCHAR  NCCL communicator (NULL without NCCL's payloads)
--   message_bytes    BIGINT   message size (bytes; NULL without NCCL's payloads)
--   seq              BIGINT   its place among the collectives of that kind on the device (0 = first)
--   ranks            BIGINT   devices of the run that ran it
--   start_ns         BIGINT   the rank's arrival: its kernel's start (ns)
--   end_ns           BIGINT   its kernel's end (ns)
--   dur_ns           BIGINT   its kernel's duration (ns)
--   last_arrival_ns  BIGINT   the latest arrival among the ranks (ns)
--   late_device_id   INTEGER  the device that arrived last
--   late_activity_id BIGINT   that device's kernel of the collective
--   wait_ns          BIGINT   time this rank waited for the last arrival inside its kernel (ns)
--   work_ns          BIGINT   the time the attribution compares it on: its transfer (dur_ns - wait_ns) where that is
--                             positive, else its duration (ns)
WITH comm AS (
    SELECT a.run_id, a.device_id, a.activity_id, k.comm_op, c.comm_id, c.message_bytes, a.start_ns, a.end_ns,
           a.dur_ns,
           row_number() OVER (PARTITION BY a.run_id, a.device_id, c.comm_id, k.comm_op
                              ORDER BY a.start_ns, a.activity_id) - 1 AS seq
    FROM _activity_rows a
    JOIN kernels k ON k.run_id = a.run_id AND k.global_pid = a.global_pid AND k.correlation_id = a.correlation_id
     AND k.device_id = a.device_id AND k.start_ns = a.start_ns
    LEFT JOIN nccl_calls c ON c.run_id = a.run_id AND c.global_pid = a.global_pid
     AND c.correlation_id = a.correlation_id AND c.start_ns = a.start_ns
    WHERE a.activity = 'kernel' AND a.kind = 'comm'
      AND k.comm_op IN ('all_reduce', 'all_gather', 'reduce_scatter', 'broadcast', 'reduce', 'all_to_all')
), per_device AS (
    SELECT run_id, comm_id, comm_op, device_id, count(*) AS n FROM comm GROUP BY ALL
), kinds AS (
    SELECT run_id, comm_id, comm_op, count(*) AS ranks FROM per_device GROUP BY ALL
    HAVING min(n) = max(n) AND count(*) > 1
), matched AS (
    SELECT c.*, t.ranks, max(c.start_ns) OVER w AS last_arrival_ns,
           arg_max(c.device_id, (c.start_ns, c.device_id)) OVER w AS late_device_id,
           arg_max(c.activity_id, (c.start_ns, c.device_id)) OVER w AS late_activity_id
    FROM comm c JOIN kinds t ON t.run_id = c.run_id AND t.comm_id IS NOT DISTINCT FROM c.comm_id
     AND t.comm_op = c.comm_op
    WINDOW w AS (PARTITION BY c.run_id, c.comm_id, c.comm_op, c.seq)
), waits AS (
    SELECT *, least(last_arrival_ns - start_ns, dur_ns) AS wait_ns FROM matched
)
SELECT run_id, device_id, activity_id, comm_op, comm_id, message_bytes, seq, ranks, start_ns, end_ns, dur_ns,
       last_arrival_ns, late_device_id, late_activity_id, wait_ns,
       CASE WHEN dur_ns - wait_ns > 0 THEN dur_ns - wait_ns ELSE dur_ns END AS work_ns
FROM waits
