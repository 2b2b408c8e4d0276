-- activity_delays: GPU kernels held back from starting: each kernel that started at least 100 us later than every
-- reason to wait allowed. A kernel may start once (1) its launch call returned, (2) the work before it on its stream
-- ended (stream order: launch order, the correlation ids of its process), and (3) every event its stream was made to
-- wait for since that work was launched completed: an event record completes when the work launched before it on its
-- own stream ended, and the events that stream waited for since then completed. (3) reads the processes' traced CUDA
-- events (stream_waits: nsys --cuda-event-trace=true). In a process without them a kernel is judged only where (3)
-- and the streams' implicit waits cannot apply: it runs on a non-blocking stream (streams: never made to wait for the
-- legacy NULL stream), its process made no call that makes a stream wait (cudaStreamWaitEvent, a wait on a value or
-- on an external semaphore: calls recorded without event tracing, their streams not) between the launch of the work
-- before it on its stream and its own, and it is not part of a graph launch (a graph orders its kernels itself).
-- ready_ns is the latest of the three; delay_ns = start_ns - ready_ns.
-- Cause: sms_held when (a) another kernel on the device was running at ready_ns and ended when this one started
-- (within 20 us, the timer skew between kernels: the block scheduler placed its CTAs as that kernel's left the SMs),
-- or (b) its CTAs cannot share an SM with those of more than half an SM (sm_exclusive, a test of each kernel alone;
-- the SM model decides per pair) and such co-runners held every SM through the delay (their SMs averaged over it
-- reach the SM count); held_by names the co-runner (of several, the one that ran through most of the delay; (a)
-- first), or (c) a kernel that started by the time it was ready ran through the whole delay (the block scheduler
-- placed its CTAs first).
-- Otherwise unknown.
-- columns:
--   run_id       VARCHAR  run
--   device_id    INTEGER  physical GPU
--   activity_id  BIGINT   activity (_activities)
--   global_pid   BIGINT   launching process
--   nvtx         VARCHAR  NVTX group (NULL unless grouping by NVTX)
--   name         VARCHAR  demangled kernel name
--   short_name   VARCHAR  base function name
--   start_ns     BIGINT   start (ns)
--   ready_ns     BIGINT   the earliest start its launch, its stream and the events it waited for allowed (ns)
--   delay_ns     BIGINT   start_ns - ready_ns (ns)
--   cause        VARCHAR  sms_held (a co-runner ended as it started) or unknown
--   held_by      VARCHAR  that co-runner's base function name (NULL when unknown)
WITH traced AS (
    SELECT DISTINCT run_id, global_pid FROM stream_waits
), non_blocking AS (
    SELECT run_id, global_pid, stream_id FROM streams GROUP BY ALL HAVING bool_and(stream_kind = 'non_blocking')
), acts AS (
    -- the activities of traced processes, and of the others those on non-blocking streams (their stream order is
    -- all that a kernel there may wait for, but for the wait calls below)
    SELECT a.run_id, a.device_id, a.activity_id, a.activity, a.global_pid, a.stream_id, a.correlation_id,
           a.start_ns, a.end_ns, a.sig, a.sm_exclusive, t.global_pid IS NOT NULL AS traced
    FROM _activity_rows a
    LEFT JOIN traced t USING (run_id, global_pid)
    LEFT JOIN non_blocking n USING (run_id, global_pid, stream_id)
    WHERE t.global_pid IS NOT NULL OR n.stream_id IS NOT NULL
), ordered AS (
    SELECT *, lag(end_ns) OVER s AS pred_end_ns, lag(correlation_id) OVER s AS pred_correlation_id
    FROM acts
    WINDOW s AS (PARTITION BY run_id, global_pid, stream_id ORDER BY correlation_id)
), wait_calls AS (
    -- the calls that make a stream wait, in processes whose events were not traced
    SELECT r.run_id, r.global_pid, r.correlation_id
    FROM runtime_api r ANTI JOIN traced t USING (run_id, global_pid)
    WHERE r.name ILIKE '%StreamWait%' OR r.name ILIKE '%WaitExternalSemaphore%'
), judged AS (
    -- traced processes: every kernel; the others: a kernel whose process made no wait call since the work before it
    -- on its stream was launched
    SELECT o.* EXCLUDE (traced)
    FROM ordered o
    ASOF LEFT JOIN wait_calls w
      ON w.run_id = o.run_id AND w.global_pid = o.global_pid AND w.correlation_id < o.correlation_id
    WHERE o.activity = 'kernel'
      AND (o.traced OR w.correlation_id IS NULL OR w.correlation_id < coalesce(o.pred_correlation_id, -1))
), direct AS (
    -- each wait's event record completes when the work launched before it on its stream ended ...
    SELECT w.*, p.end_ns AS work_ns, p.correlation_id AS work_correlation_id
    FROM stream_waits w ASOF LEFT JOIN acts p
      ON p.run_id = w.run_id AND p.global_pid = w.global_pid AND p.stream_id = w.record_stream_id
     AND p.correlation_id < w.record_correlation_id
), relayed AS (
    -- ... and the events that stream was made to wait for since that work completed (a stream that passes an event
    -- on: one step of relay here; traceql.attribution.paths follows such relays further)
    SELECT d.run_id, d.global_pid, d.stream_id, d.correlation_id, max(r.work_ns) AS relay_ns
    FROM direct d JOIN direct r
      ON r.run_id = d.run_id AND r.global_pid = d.global_pid AND r.stream_id = d.record_stream_id
     AND r.correlation_id < d.record_correlation_id AND r.correlation_id > coalesce(d.work_correlation_id, -1)
    GROUP BY ALL
), records AS (
    SELECT d.run_id, d.global_pid, d.stream_id, d.correlation_id, greatest(d.work_ns, r.relay_ns) AS record_ns
    FROM direct d LEFT JOIN relayed r USING (run_id, global_pid, stream_id, correlation_id)
), dependencies AS (
    -- the waits its stream was given between the work before it and its own launch
    SELECT o.run_id, o.activity_id, max(r.record_ns) AS record_ns
    FROM ordered o JOIN records r
      ON r.run_id = o.run_id AND r.global_pid = o.global_pid AND r.stream_id = o.stream_id
     AND r.correlation_id < o.correlation_id AND r.correlation_id > coalesce(o.pred_correlation_id, -1)
    WHERE o.activity = 'kernel'
    GROUP BY ALL
), ready AS (
    SELECT o.run_id, o.device_id, o.activity_id, o.global_pid, o.sig, o.start_ns, o.sm_exclusive,
           greatest(l.end_ns, o.pred_end_ns, d.record_ns) AS ready_ns
    FROM judged o
    JOIN runtime_api l ON l.run_id = o.run_id AND l.global_pid = o.global_pid AND l.correlation_id = o.correlation_id
    LEFT JOIN dependencies d ON d.run_id = o.run_id AND d.activity_id = o.activity_id
    -- a graph launch's kernels follow the graph's edges, not stream order (traced processes too)
    WHERE l.name NOT ILIKE '%GraphLaunch%'
), delayed AS (
    SELECT *, start_ns - ready_ns AS delay_ns FROM ready WHERE start_ns - ready_ns >= 100000
), beside AS (
    -- the kernels on its device that (a) or (c) may name, in one pass over them:
    -- (a) a co-runner that ended as it started;
    -- (c) a kernel that started by the time it was ready (20 us of timer skew) and ran through its whole delay: the
    -- block scheduler placed that kernel's CTAs first, and this one's only once those were all placed (measured: a
    -- kernel launched after a many-wave kernel that fills the SMs starts as that kernel's last CTAs leave,
    -- tests/data/calibration/residency; in FSDP2 training, an optimizer kernel on a high-priority stream that became
    -- ready as a GEMM of all the SMs started waited for the GEMM's CTAs); of several, the one holding the most SMs
    SELECT d.run_id, d.activity_id,
           arg_max(s.short_name, least(c.end_ns, d.start_ns) - greatest(c.start_ns, d.ready_ns))
               FILTER (c.start_ns <= d.ready_ns AND abs(c.end_ns - d.start_ns) <= 20000) AS released_by,
           arg_max(s.short_name, c.sm_held) FILTER (c.end_ns >= d.start_ns) AS earlier_by
    FROM delayed d
    JOIN _activity_rows c ON c.run_id = d.run_id AND c.device_id = d.device_id AND c.activity = 'kernel'
     AND c.activity_id <> d.activity_id AND c.start_ns <= d.ready_ns + 20000 AND c.end_ns >= d.start_ns - 20000
    JOIN _signatures s ON s.sig = c.sig
    GROUP BY ALL
), exclusive AS (
    -- (b) co-runners of more than half an SM each, holding every SM through the delay of a kernel of the same kind
    SELECT d.run_id, d.activity_id,
           arg_max(s.short_name, c.sm_exclusive * (least(c.end_ns, d.start_ns) - greatest(c.start_ns, d.ready_ns)))
               AS held_by,
           sum(c.sm_exclusive * (least(c.end_ns, d.start_ns) - greatest(c.start_ns, d.ready_ns)))
               / any_value(d.delay_ns) AS held_sms,
           any_value(v.sm_count) AS sm_count
    FROM delayed d
    JOIN _activity_rows c ON c.run_id = d.run_id AND c.device_id = d.device_id AND c.activity = 'kernel'
     AND c.activity_id <> d.activity_id AND c.sm_exclusive > 0 AND c.start_ns < d.start_ns AND c.end_ns > d.ready_ns
    JOIN _signatures s ON s.sig = c.sig
    JOIN devices v ON v.run_id = d.run_id AND v.device_id = d.device_id
    WHERE d.sm_exclusive > 0
    GROUP BY ALL
), holders AS (
    SELECT d.run_id, d.activity_id, coalesce(b.released_by, x.held_by, b.earlier_by) AS held_by
    FROM delayed d
    LEFT JOIN beside b USING (run_id, activity_id)
    LEFT JOIN exclusive x ON x.run_id = d.run_id AND x.activity_id = d.activity_id AND x.held_sms >= x.sm_count - 0.5
    WHERE b.released_by IS NOT NULL OR x.held_by IS NOT NULL OR b.earlier_by IS NOT NULL
)
SELECT d.run_id, d.device_id, d.activity_id, d.global_pid, g.nvtx, s.name, s.short_name, d.start_ns, d.ready_ns,
       d.delay_ns, CASE WHEN h.held_by IS NOT NULL THEN 'sms_held' ELSE 'unknown' END AS cause, h.held_by
FROM delayed d
LEFT JOIN holders h USING (run_id, activity_id)
LEFT JOIN _activity_groups g USING (run_id, activity_id)
LEFT JOIN _signatures s ON s.sig = d.sig
