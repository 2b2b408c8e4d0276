-- paper_ranges: NVTX ranges that mark an execution mode of the overlap characterization (Lee et al., ISPASS 2025):
-- compute only, communication only, overlapped, sequential. Two label conventions (docs/paper.md):
--   traceql's   case:NAME;mode=M;key=value;...   (collectors/labels.py; parsed at ingest)
--   plain       mode:M   or   mode:M;key=value;...
-- M is normalized by the aliases below (case-insensitive); ranges with any other mode (e.g. mode=ddp) are left out.
-- The labels op, dtype, bytes and max_ctas get columns; max_ctas falls back to the run's NCCL_MAX_CTAS (recorded
-- by traceql collect) and then to 'default'. step, iter and iteration number the iterations of one configuration;
-- every other label goes into config. A mode range that holds other mode ranges of its process (a mode:NAME range
-- around per-step case:NAME;mode=...;step=N ranges) only contains them: the inner ones count, with their labels.
-- columns:
--   run_id      VARCHAR  run
--   global_pid  BIGINT   process that pushed the range
--   global_tid  BIGINT   thread that pushed the range
--   domain      VARCHAR  NVTX domain (NULL: the default domain)
--   depth       INTEGER  nesting depth on its thread (push/pop ranges)
--   start_ns    BIGINT   range start (ns)
--   end_ns      BIGINT   range end (ns)
--   text        VARCHAR  the range's text
--   workload    VARCHAR  case name (traceql's convention) or 'mode' (plain convention)
--   mode        VARCHAR  compute, comm, overlapped or sequential
--   mode_label  VARCHAR  the mode as written
--   op          VARCHAR  label op (collective), or NULL
--   dtype       VARCHAR  label dtype, or NULL
--   bytes       BIGINT   label bytes (message size), or NULL
--   max_ctas    VARCHAR  label max_ctas, else the run's env.NCCL_MAX_CTAS, else 'default'
--   config      VARCHAR  the other labels as key=value, sorted, joined by ';' ('' when none)
--   iteration   VARCHAR  label step, iter or iteration when the range is one iteration, else NULL
WITH aliases(alias, mode) AS (
    VALUES ('compute', 'compute'), ('compute_only', 'compute'), ('no_comm', 'compute'),
           ('comm', 'comm'), ('comm_only', 'comm'),
           ('overlapped', 'overlapped'), ('overlap', 'overlapped'),
           ('sequential', 'sequential'), ('serial', 'sequential')
), marked AS (
    SELECT n.run_id, n.global_pid, n.global_tid, n.domain, n.depth, n.start_ns, n.end_ns, n.text,
           CASE WHEN n.case_name IS NOT NULL THEN n.case_name ELSE 'mode' END AS workload,
           CASE WHEN n.case_name IS NOT NULL THEN n.labels['mode']
                ELSE trim(substr(split_part(n.text, ';', 1), 6)) END AS mode_label,
           coalesce(n.labels, MAP {}::MAP(VARCHAR, VARCHAR)) AS labels
    FROM nvtx n
    WHERE n.event_type IN ('push_pop', 'start_end') AND n.end_ns IS NOT NULL
      AND (n.case_name IS NOT NULL OR n.text ILIKE 'mode:%')
), valid AS (
    SELECT m.*, a.mode FROM marked m JOIN aliases a ON a.alias = lower(m.mode_label)
), innermost AS (
    SELECT o.* FROM valid o
    WHERE NOT EXISTS (SELECT 1 FROM valid i
                      WHERE i.run_id = o.run_id AND i.global_pid = o.global_pid AND i.start_ns >= o.start_ns
                        AND i.end_ns <= o.end_ns AND (i.start_ns, i.end_ns, i.global_tid, i.text)
                            <> (o.start_ns, o.end_ns, o.global_tid, o.text))
), run_ctas AS (
    SELECT run_id, json_extract_string(labels_json, '$."env.NCCL_MAX_CTAS"') AS env_max_ctas FROM runs
)
SELECT m.run_id, m.global_pid, m.global_tid, m.domain, m.depth, m.start_ns, m.end_ns, m.text, m.workload,
       m.mode, m.mode_label, m.labels['op'] AS op, m.labels['dtype'] AS dtype,
       TRY_CAST(m.labels['bytes'] AS BIGINT) AS bytes,
       coalesce(m.labels['max_ctas'], r.env_max_ctas, 'default') AS max_ctas,
       array_to_string(list_sort(list_transform(
           list_filter(map_entries(m.labels), lambda e: e.key NOT IN ('mode', 'op', 'dtype', 'bytes', 'max_ctas',
                                                                       'step', 'iter', 'iteration')),
           lambda e: e.key || '=' || e.value)), ';') AS config,
       coalesce(m.labels['step'], m.labels['iter'], m.labels['iteration']) AS iteration
FROM innermost m
LEFT JOIN run_ctas r USING (run_id)
