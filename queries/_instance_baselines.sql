-- _instance_baselines: per activity, the group it is compared within and its baseline duration. Computed by
-- traceql.attribution.baselines (attribute, report and `traceql sql` compute it before reading the views that need it; from
-- Python, traceql.attribution.prepare(con)); reading it before then is an error that says so.
-- columns:
--   run_id       VARCHAR  run
--   activity_id  BIGINT   activity (_activities)
--   group_id     BIGINT   its (sub-)signature group (_signature_stats)
--   pool_id      BIGINT   its baseline pool: the signature on its device, or one duration mode of it
--   t0_ns        DOUBLE   the baseline duration it is compared with (ns; NULL without a baseline or when conflated)
--   baseline     VARCHAR  where t0 comes from: isolated, isolated nearest in time, baseline run, ncu
--   clock0_mhz   DOUBLE   the GPC clock its baseline ran at, where t0 is its nearest isolated instances in time
--                         (their median clock); NULL otherwise (the pool's isolated median clock applies)
SELECT NULL::VARCHAR AS run_id, NULL::BIGINT AS activity_id, NULL::BIGINT AS group_id, NULL::BIGINT AS pool_id,
       NULL::DOUBLE AS t0_ns,
       NULL::VARCHAR AS baseline, NULL::DOUBLE AS clock0_mhz
-- before prepare() a read is an error, never an empty table that would read as 'no baselines'
WHERE error('_instance_baselines: computed by the attribution; call traceql.attribution.prepare(con) first (traceql attribute, report and sql do)') IS NULL
