-- collective_waits: every collective of a run matched across the devices (ranks) that ran it (_collective_arrivals:
-- the matching rule and the wait), with each rank's arrival, the last arrival, the time the rank's NCCL kernel spent
-- waiting for the late rank before any data could move, and the rest: its transfer. The wait that no compute kernel
-- of the rank's own hid (exposed) is what waiting cost its GPU: the rest ran beside its compute (the union of its
-- compute kernels: every kernel but communication).
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
WITH waits AS (
    SELECT a.run_id, a.device_id, f.nvtx, a.comm_op, a.comm_id, a.message_bytes, a.seq, a.ranks, a.start_ns,
           a.end_ns, a.dur_ns, a.last_arrival_ns, a.late_device_id, a.wait_ns
    FROM _collective_arrivals a JOIN instance_facts f USING (run_id, activity_id)
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
