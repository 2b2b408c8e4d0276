-- _activity_groups: the NVTX group of each activity; empty unless attribution is asked to group by NVTX
-- (traceql.attribution.group_by_nvtx then replaces this view with the innermost matching range of the user's around
-- each launch, by the launch rule of traceql.launch).
-- columns:
--   run_id          VARCHAR  run
--   activity_id     BIGINT   activity (_activities)
--   nvtx            VARCHAR  text of the NVTX range the activity belongs to
--   nvtx_start_ns   BIGINT   that range's start (ns): with its text, the range instance
--   nvtx_end_ns     BIGINT   that range's end (ns)
SELECT NULL::VARCHAR AS run_id, NULL::BIGINT AS activity_id, NULL::VARCHAR AS nvtx, NULL::BIGINT AS nvtx_start_ns,
       NULL::BIGINT AS nvtx_end_ns
WHERE false
