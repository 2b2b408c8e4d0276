-- _path_activities: what the critical path of a step (traceql.attribution.paths) reads of each GPU activity: its
-- stream and the order work was launched on it, its launch call, its NVTX group, the baseline it is compared with,
-- and, for a collective matched across ranks, the kernel of the rank that arrived last (_collective_arrivals), which
-- its end waited for. In stream order: by process, stream and launch (correlation id).
-- columns:
--   run_id            VARCHAR  run
--   device_id         INTEGER  physical GPU
--   activity_id       BIGINT   activity (_activities)
--   kind              VARCHAR  compute, comm, memory, other, copy (_activity_rows)
--   activity          VARCHAR  kernel, memcpy or memset
--   global_pid        BIGINT   launching process
--   stream_id         BIGINT   stream (unique within global_pid)
--   correlation_id    BIGINT   launch correlation id: the order work was launched on the stream
--   start_ns          BIGINT   start (ns)
--   end_ns            BIGINT   end (ns)
--   launch_ns         BIGINT   start of its launch call (ns; NULL when the call was not traced, e.g. a graph's node)
--   launch_tid        BIGINT   the thread that made the call
--   nvtx              VARCHAR  NVTX group (NULL unless grouping by NVTX)
--   nvtx_start_ns     BIGINT   that range's start (ns): with its text, the step instance
--   group_id          BIGINT   its (sub-)signature group (_instance_baselines; NULL without a baseline)
--   t0_ns             DOUBLE   its baseline duration (ns; NULL without one)
--   work_ns           BIGINT   the time compared with the baseline: its duration, or a collective's transfer
--   late_activity_id  BIGINT   a matched collective whose rank was not the last to arrive: the last arriver's kernel
--   collective        VARCHAR  a matched collective's key, the same on every rank (communicator, kind, place)
SELECT a.run_id, a.device_id, a.activity_id, a.kind, a.activity, a.global_pid, a.stream_id, a.correlation_id,
       a.start_ns, a.end_ns, l.start_ns AS launch_ns, l.global_tid AS launch_tid, g.nvtx, g.nvtx_start_ns, b.group_id, b.t0_ns,
       coalesce(c.work_ns, a.dur_ns) AS work_ns,
       CASE WHEN c.last_arrival_ns > a.start_ns THEN c.late_activity_id END AS late_activity_id,
       CASE WHEN c.activity_id IS NOT NULL THEN concat_ws('/', c.comm_id, c.comm_op, c.seq) END AS collective
FROM _activity_rows a
LEFT JOIN runtime_api l ON l.run_id = a.run_id AND l.global_pid = a.global_pid AND l.correlation_id = a.correlation_id
LEFT JOIN _activity_groups g ON g.run_id = a.run_id AND g.activity_id = a.activity_id
LEFT JOIN _instance_baselines b ON b.run_id = a.run_id AND b.activity_id = a.activity_id
LEFT JOIN _collective_arrivals c ON c.run_id = a.run_id AND c.activity_id = a.activity_id
ORDER BY a.run_id, a.global_pid, a.stream_id, a.correlation_id, a.activity_id
