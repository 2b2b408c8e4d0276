-- _activity_groups: the NVTX group of each activity; empty unless attribution is asked to group by NVTX
-- (traceql.attribute replaces this view with the innermost matching range of the launching thread).
-- columns:
--   run_id          VARCHAR  run
--   activity_id     BIGINT   activity (_activities)
--   nvtx            VARCHAR  text of the NVTX range the activity belongs to
SELECT NULL::VARCHAR AS run_id, NULL::BIGINT AS activity_id, NULL::VARCHAR AS nvtx
WHERE false
