-- _launch_rule: how a GPU activity finds its NVTX launch context (traceql.launch; these are the defaults, which
-- `--nvtx-scope` and `--nvtx-domain` change): the ranges open on any thread of the launching process (scope
-- 'process') or only on the launching thread ('thread'), of the default NVTX domain and of the domains listed;
-- other domains (NCCL's, CCCL's...) are libraries' ranges and never a launch context.
-- columns:
--   scope    VARCHAR     process or thread
--   domains  VARCHAR[]   NVTX domains whose ranges count as the user's, besides the default domain
SELECT 'process' AS scope, []::VARCHAR[] AS domains
