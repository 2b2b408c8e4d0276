-- _paper_work: every GPU activity (instance_facts) launched during an iteration of a mode range (paper_ranges), with
-- the range's configuration and mode. An iteration is the mode range itself when it carries a step/iter/iteration
-- label; otherwise each range nested directly inside it (depth + 1, same thread and NVTX domain, so library ranges
-- such as NCCL's do not count); otherwise the whole mode range. An activity belongs to the iteration during which
-- any thread of the same process launched it (runtime_api correlation).
-- columns:
--   run_id              VARCHAR  run
--   workload            VARCHAR  case name, or 'mode'
--   op                  VARCHAR  collective label, or NULL
--   dtype               VARCHAR  data type label, or NULL
--   bytes               BIGINT   message size label (bytes), or NULL
--   max_ctas            VARCHAR  NCCL_MAX_CTAS in force
--   config              VARCHAR  other labels
--   mode                VARCHAR  compute, comm, overlapped or sequential
--   global_pid          BIGINT   process
--   mode_start_ns       BIGINT   start of the mode range
--   iteration           VARCHAR  iteration label, or the nested range's text
--   iter_start_ns       BIGINT   iteration range start, CPU side (ns)
--   activity_id         BIGINT   activity (instance_facts)
--   device_id           INTEGER  physical GPU
--   sm_count            INTEGER  SMs on the GPU
--   activity            VARCHAR  kernel, memcpy or memset
--   activity_class      VARCHAR  comm, compute or copy
--   short_name          VARCHAR  base function name
--   start_ns            BIGINT   start (ns)
--   end_ns              BIGINT   end (ns)
--   dur_ns              BIGINT   duration (ns)
--   compute_overlap_ns  BIGINT   time other non-communication kernels overlapped it (ns)
--   comm_overlap_ns     BIGINT   time communication overlapped it (ns)
--   ctas                BIGINT   CTAs in the grid (kernels)
--   gpc_clock_mhz       DOUBLE   GPC clock during it (MHz; nsys GPU metrics, NULL without them)
WITH m AS (
    SELECT * FROM paper_ranges
), children AS (
    SELECT m.run_id, m.global_pid, m.start_ns AS mode_start_ns, c.text AS iteration, c.start_ns, c.end_ns
    FROM m JOIN nvtx c
      ON c.run_id = m.run_id AND c.global_tid = m.global_tid AND c.depth = m.depth + 1
     AND c.domain IS NOT DISTINCT FROM m.domain AND c.event_type = 'push_pop'
     AND c.start_ns >= m.start_ns AND c.end_ns <= m.end_ns
    WHERE m.iteration IS NULL
), iters AS (
    SELECT m.*, m.start_ns AS mode_start_ns, coalesce(c.iteration, m.iteration, m.text) AS iter_text,
           coalesce(c.start_ns, m.start_ns) AS iter_start_ns, coalesce(c.end_ns, m.end_ns) AS iter_end_ns
    FROM m LEFT JOIN children c
      ON c.run_id = m.run_id AND c.global_pid = m.global_pid AND c.mode_start_ns = m.start_ns
)
SELECT i.run_id, i.workload, i.op, i.dtype, i.bytes, i.max_ctas, i.config, i.mode, i.global_pid, i.mode_start_ns,
       i.iter_text AS iteration, i.iter_start_ns, f.activity_id, f.device_id, f.sm_count, f.activity,
       f.activity_class, f.short_name, f.start_ns, f.end_ns, f.dur_ns, f.compute_overlap_ns, f.comm_overlap_ns,
       f.ctas, f.gpc_clock_mhz
FROM instance_facts f
    JOIN runtime_api r ON r.run_id = f.run_id AND r.global_pid = f.global_pid AND r.correlation_id = f.correlation_id
    JOIN iters i ON i.run_id = r.run_id AND i.global_pid = r.global_pid
     AND r.start_ns >= i.iter_start_ns AND r.start_ns <= i.iter_end_ns
