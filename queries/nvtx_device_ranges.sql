-- nvtx_device_ranges: NVTX push/pop and start/end ranges placed on the GPU that their process launched kernels on
-- (the device most of its kernels ran on), so they can be drawn beside that GPU's kernels.
-- columns:
--   run_id       VARCHAR  run
--   device_id    INTEGER  physical GPU of the range's process (NULL if the process launched no kernel)
--   global_pid   BIGINT   process
--   global_tid   BIGINT   thread
--   depth        INTEGER  nesting depth on its thread (0 = outermost)
--   text         VARCHAR  range text
--   case_name    VARCHAR  NAME of a case:NAME;key=value range
--   start_ns     BIGINT   start (ns)
--   end_ns       BIGINT   end (ns)
--   dur_ns       BIGINT   duration (ns)
WITH process_device AS (
    SELECT run_id, global_pid, mode(device_id) AS device_id FROM kernels GROUP BY ALL
)
SELECT n.run_id, p.device_id, n.global_pid, n.global_tid, n.depth, n.text, n.case_name, n.start_ns, n.end_ns,
       n.dur_ns
FROM nvtx n LEFT JOIN process_device p USING (run_id, global_pid)
WHERE n.event_type IN ('push_pop', 'start_end') AND n.end_ns IS NOT NULL
