-- nccl_calls: each NCCL kernel with the NCCL call that launched it: the innermost range of NCCL's NVTX domain open on
-- the launching thread at the launch (ncclAllReduce, ncclAllGather...), and what NCCL's payload on that range says,
-- where the export has it (`nsys export --include-json=true`, which traceql uses for reports): the communicator,
-- the message size and the reduction. Without payloads those columns are NULL.
-- columns:
--   run_id          VARCHAR  run
--   device_id       INTEGER  physical GPU
--   global_pid      BIGINT   process
--   correlation_id  BIGINT   the kernel's launch (with global_pid)
--   start_ns        BIGINT   kernel start (ns)
--   comm_op         VARCHAR  collective, from the kernel's name
--   call            VARCHAR  the NCCL call's range text (e.g. ncclAllReduce)
--   comm_id         VARCHAR  NCCL communicator ID (payload)
--   message_bytes   BIGINT   message size in bytes (payload)
--   reduction       VARCHAR  reduction operation (payload)
WITH launches AS (
    SELECT k.run_id, k.device_id, k.global_pid, k.correlation_id, k.start_ns, k.comm_op, r.global_tid,
           r.start_ns AS t
    FROM kernels k JOIN runtime_api r
      ON r.run_id = k.run_id AND r.global_pid = k.global_pid AND r.correlation_id = k.correlation_id
    WHERE k.kind = 'comm'
), calls AS (
    SELECT run_id, global_tid, start_ns, end_ns, text, labels FROM nvtx
    WHERE domain = 'NCCL' AND event_type IN ('push_pop', 'start_end') AND end_ns IS NOT NULL
), latest AS (
    -- the latest start of an NCCL range at or before the launch on its thread: that range (or one of the ranges
    -- starting then) is the innermost open one when it is still open, as it is for almost every launch
    SELECT l.*, c.start_ns AS latest_ns
    FROM launches l ASOF JOIN calls c
      ON c.run_id = l.run_id AND c.global_tid = l.global_tid AND c.start_ns <= l.t
), open_latest AS (
    SELECT l.run_id, l.device_id, l.global_pid, l.correlation_id, l.start_ns, l.comm_op, c.start_ns AS c_start_ns,
           c.text, c.labels
    FROM latest l JOIN calls c
      ON c.run_id = l.run_id AND c.global_tid = l.global_tid AND c.start_ns = l.latest_ns AND l.t <= c.end_ns
), enclosing AS (
    SELECT * FROM open_latest
    UNION ALL
    -- the rest (the latest range closed before the launch): the ranges around it, by a range join over these alone
    SELECT l.run_id, l.device_id, l.global_pid, l.correlation_id, l.start_ns, l.comm_op, c.start_ns, c.text,
           c.labels
    FROM (SELECT * FROM latest ANTI JOIN open_latest
          USING (run_id, device_id, global_pid, correlation_id, start_ns)) l
    JOIN calls c ON c.run_id = l.run_id AND c.global_tid = l.global_tid AND c.start_ns <= l.t AND l.t <= c.end_ns
)
SELECT run_id, device_id, global_pid, correlation_id, start_ns, any_value(comm_op) AS comm_op,
       arg_max(text, (c_start_ns, text)) AS call,
       arg_max(labels['NCCL communicator ID'], (c_start_ns, text)) AS comm_id,
       TRY_CAST(arg_max(labels['Message size [bytes]'], (c_start_ns, text)) AS BIGINT) AS message_bytes,
       arg_max(labels['Reduction operation'], (c_start_ns, text)) AS reduction
FROM enclosing
GROUP BY run_id, device_id, global_pid, correlation_id, start_ns
