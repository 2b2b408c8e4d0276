-- collective_waits: every collective of a run matched across the devices (ranks) that ran it, with each rank's
-- arrival, the last arrival, and the time the rank's NCCL kernel spent waiting for the late rank before any data
-- could move. A collective finishes on no rank before every rank has arrived, so a rank that arrives early waits
-- inside its kernel: wait = last arrival - own arrival (at most the kernel's duration); transfer = the rest.
-- Matching: the k-th collective of one kind (all_reduce, all_gather, reduce_scatter, broadcast, reduce,
-- all_to_all) of one communicator on each device of a run is the same operation, where every device that runs it
-- runs it the same number of times; otherwise it is not matched (point-to-point sends and receives never are). The
-- communicator comes from NCCL's NVTX payload (nccl_calls); without payloads, all collectives of a kind count as
-- one communicator's, and several communicators of one kind (tensor and data parallel groups) would be mismatched.
-- The devices of one run share its clock.
-- columns:
--   run_id           VARCHAR  run
--   device_id        INTEGER  physical GPU (the rank's device)
--   nvtx             VARCHAR  NVTX group of the kernel (NULL unless grouping by NVTX)
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
--   wait_ns          BIGINT   time this rank waited for the last arrival inside its kernel (ns)
--   transfer_ns      BIGINT   the rest of its kernel's time (ns)
WITH comm AS (
    SELECT f.run_id, f.device_id, f.nvtx, k.comm_op, c.comm_id, c.message_bytes, f.start_ns, f.end_ns, f.dur_ns,
           row_number() OVER (PARTITION BY f.run_id, f.device_id, c.comm_id, k.comm_op
                              ORDER BY f.start_ns, f.activity_id) - 1 AS seq
    FROM instance_facts f
    JOIN kernels k ON k.run_id = f.run_id AND k.global_pid = f.global_pid AND k.correlation_id = f.correlation_id
     AND k.device_id = f.device_id AND k.start_ns = f.start_ns
    LEFT JOIN nccl_calls c ON c.run_id = f.run_id AND c.global_pid = f.global_pid
     AND c.correlation_id = f.correlation_id AND c.start_ns = f.start_ns
    WHERE f.activity = 'kernel' AND f.kind = 'comm'
      AND k.comm_op IN ('all_reduce', 'all_gather', 'reduce_scatter', 'broadcast', 'reduce', 'all_to_all')
), per_device AS (
    SELECT run_id, comm_id, comm_op, device_id, count(*) AS n FROM comm GROUP BY ALL
), kinds AS (
    SELECT run_id, comm_id, comm_op, count(*) AS ranks FROM per_device GROUP BY ALL
    HAVING min(n) = max(n) AND count(*) > 1
), matched AS (
    SELECT c.*, t.ranks, max(c.start_ns) OVER w AS last_arrival_ns,
           arg_max(c.device_id, (c.start_ns, c.device_id)) OVER w AS late_device_id
    FROM comm c JOIN kinds t ON t.run_id = c.run_id AND t.comm_id IS NOT DISTINCT FROM c.comm_id
     AND t.comm_op = c.comm_op
    WINDOW w AS (PARTITION BY c.run_id, c.comm_id, c.comm_op, c.seq)
)
SELECT run_id, device_id, nvtx, comm_op, comm_id, message_bytes, seq, ranks, start_ns, end_ns, dur_ns, last_arrival_ns, late_device_id,
       least(last_arrival_ns - start_ns, dur_ns) AS wait_ns, dur_ns - least(last_arrival_ns - start_ns, dur_ns)
           AS transfer_ns
FROM matched
