-- _kernel_groups: the NVTX group of each kernel; empty unless attribution is asked to group by NVTX
-- (traceql.attribute replaces this view with the innermost matching range of the launching thread).
-- columns:
--   run_id          VARCHAR  run
--   global_pid      BIGINT   process of the launch
--   correlation_id  BIGINT   launch correlation id (unique within global_pid)
--   nvtx            VARCHAR  text of the NVTX range the kernel belongs to
SELECT NULL::VARCHAR AS run_id, NULL::BIGINT AS global_pid, NULL::BIGINT AS correlation_id, NULL::VARCHAR AS nvtx
WHERE false
