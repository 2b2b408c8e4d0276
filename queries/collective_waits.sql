-- collective_waits: every collective of a run matched across the devices (ranks) that ran it, with each rank's
-- arrival, the last arrival, and the time the rank's NCCL kernel spent waiting for the late rank before any data
-- could move. A collective finishes on no rank before every rank has arrived, so a rank that arrives early waits
-- inside its kernel: wait = last arrival - own arrival (at most the kernel's duration); transfer = the rest.
-- Matching: the k-th collective of one kind (all_reduce, all_gather, reduce_scatter, broadcast, reduce,
-- all_to_all) of one communicator on each device of a run is the same operation, where every device that runs it
-- runs it the same number of times; otherwise it is not matched (point-to-point sends and receives never are). The
-- communicator comes from NCCL's NVTX payload (nccl_calls); without payloads, all collectives of a kind count as
-- one communicator's, and several communicators of one kind (tensor and data parallel groups) would be mismatched.
-- The devices of one run share its clock. The wait that no compute kernel of the rank's own hid (exposed) is what
-- waiting cost its GPU: the rest ran beside its compute (the union of its compute kernels: every kernel but
-- communication).
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
--   exposed_wait_ns  BIGINT   the part of its wait with no compute kernel of its device running (ns)
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
), waits AS (
    SELECT *, least(last_arrival_ns - start_ns, dur_ns) AS wait_ns FROM matched
), waiting AS (
    SELECT DISTINCT run_id, device_id FROM waits WHERE wait_ns > 0
), compute AS (
    -- the compute kernels of the devices that waited, and where their union starts a new piece. A wait lies inside
    -- an NCCL kernel, so only compute kernels that communication overlapped can overlap it: the union of those alone
    -- covers a wait as the union of all would
    SELECT a.run_id, a.device_id, a.start_ns, a.end_ns,
           coalesce(a.start_ns > max(a.end_ns) OVER (PARTITION BY a.run_id, a.device_id ORDER BY a.start_ns, a.end_ns
                                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), true)::INT
               AS new_piece
    FROM instance_facts a SEMI JOIN waiting w ON w.run_id = a.run_id AND w.device_id = a.device_id
    WHERE a.activity = 'kernel' AND a.kind <> 'comm' AND a.comm_overlap_ns > 0 AND a.end_ns > a.start_ns
), pieces AS (
    SELECT run_id, device_id, min(start_ns) AS u_start, max(end_ns) AS u_end
    FROM (SELECT *, sum(new_piece) OVER (PARTITION BY run_id, device_id ORDER BY start_ns, end_ns
                                         ROWS UNBOUNDED PRECEDING) AS piece FROM compute)
    GROUP BY run_id, device_id, piece
), covered AS (
    -- compute time before each piece of the union
    SELECT *, sum(u_end - u_start) OVER (PARTITION BY run_id, device_id ORDER BY u_start ROWS UNBOUNDED PRECEDING)
              - (u_end - u_start) AS before_ns
    FROM pieces
), hidden AS (
    -- compute time up to the wait's start and up to its end: their difference is the wait that compute hid
    SELECT w.*, coalesce(a.before_ns + least(w.start_ns, a.u_end) - a.u_start, 0) AS covered_start_ns
    FROM waits w ASOF LEFT JOIN covered a
      ON a.run_id = w.run_id AND a.device_id = w.device_id AND a.u_start <= w.start_ns
), hidden_end AS (
    SELECT h.*, coalesce(b.before_ns + least(h.start_ns + h.wait_ns, b.u_end) - b.u_start, 0) AS covered_end_ns
    FROM hidden h ASOF LEFT JOIN covered b
      ON b.run_id = h.run_id AND b.device_id = h.device_id AND b.u_start <= h.start_ns + h.wait_ns
)
SELECT run_id, device_id, nvtx, comm_op, comm_id, message_bytes, seq, ranks, start_ns, end_ns, dur_ns, last_arrival_ns,
       late_device_id, wait_ns, dur_ns - wait_ns AS transfer_ns,
       (wait_ns - (covered_end_ns - covered_start_ns))::BIGINT AS exposed_wait_ns
FROM hidden_end
