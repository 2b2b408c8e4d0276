-- paper_instances: per overlapped GPU activity instance launched inside a mode range (_paper_work) that the
-- attribution could compare with a baseline, its observed slowdown and what each contended resource predicts
-- (instance_predictions), so traceql.paper can break each configuration's slowdown down into sm / dram_bw / cache /
-- clock / link / residual. side: compute (non-communication kernels), comm (communication kernels, peer copies) or
-- copy (other copies and sets).
-- columns:
--   run_id       VARCHAR  run
--   workload     VARCHAR  case name, or 'mode'
--   op           VARCHAR  collective label, or NULL
--   dtype        VARCHAR  data type label, or NULL
--   bytes        BIGINT   message size label (bytes), or NULL
--   max_ctas     VARCHAR  NCCL_MAX_CTAS in force
--   config       VARCHAR  other labels
--   mode         VARCHAR  compute, comm, overlapped or sequential
--   global_pid   BIGINT   process
--   device_id    INTEGER  physical GPU
--   activity_id  BIGINT   activity (instance_facts)
--   side         VARCHAR  compute, comm or copy
--   short_name   VARCHAR  base function name
--   dur_ns       BIGINT   duration (ns)
--   observed     DOUBLE   its slowdown against its baseline: dur_ns / t0 - 1
--   f            DOUBLE   overlap fraction
--   held_sms     DOUBLE   SMs co-running kernels held while overlapping it
--   sm_lo        DOUBLE   SM prediction, low
--   sm_pt        DOUBLE   SM prediction, point
--   sm_hi        DOUBLE   SM prediction, high
--   dram_lo      DOUBLE   DRAM bandwidth prediction, low
--   dram_pt      DOUBLE   DRAM bandwidth prediction, point
--   dram_hi      DOUBLE   DRAM bandwidth prediction, high
--   cache_lo     DOUBLE   L2 cache prediction, low
--   cache_pt     DOUBLE   L2 cache prediction, point
--   cache_hi     DOUBLE   L2 cache prediction, high
--   clock_lo     DOUBLE   clock prediction, low
--   clock_pt     DOUBLE   clock prediction, point
--   clock_hi     DOUBLE   clock prediction, high
--   link_lo      DOUBLE   link prediction, low
--   link_pt      DOUBLE   link prediction, point
--   link_hi      DOUBLE   link prediction, high
SELECT w.run_id, w.workload, w.op, w.dtype, w.bytes, w.max_ctas, w.config, w.mode, w.global_pid, w.device_id,
       w.activity_id,
       CASE WHEN w.activity_class = 'comm' THEN 'comm' WHEN w.activity = 'kernel' THEN 'compute' ELSE 'copy' END
           AS side,
       w.short_name, w.dur_ns, p.observed, p.f, p.held_sms, p.sm_lo, p.sm_pt, p.sm_hi, p.dram_lo, p.dram_pt,
       p.dram_hi, p.cache_lo, p.cache_pt, p.cache_hi, p.clock_lo, p.clock_pt, p.clock_hi, p.link_lo, p.link_pt,
       p.link_hi
FROM _paper_work w JOIN instance_predictions p USING (run_id, activity_id)
WHERE p.observed IS NOT NULL
