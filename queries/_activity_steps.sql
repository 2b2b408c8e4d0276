-- _activity_steps: per device, the step functions of concurrency, integrated up to each boundary.
-- Every activity start and end is a boundary t; a measure M at t is the integral of its indicator
-- from the first boundary to t, so |[s, e] ∩ {indicator}| = M(e) - M(s) for any activity [s, e].
-- columns:
--   run_id        VARCHAR  run
--   device_id     INTEGER  physical GPU
--   t             BIGINT   boundary (ns)
--   comm_ns       HUGEINT  time with communication active, up to t (ns)
--   comm2_ns      HUGEINT  time with two or more communication activities active, up to t (ns)
--   copy_ns       HUGEINT  time with a copy or set active, up to t (ns)
--   copy2_ns      HUGEINT  time with two or more copies or sets active, up to t (ns)
--   compute_ns    HUGEINT  time with a non-communication kernel active, up to t (ns)
--   compute2_ns   HUGEINT  time with two or more non-communication kernels active, up to t (ns)
--   comm_compute_ns HUGEINT time with communication and a compute kernel active together, up to t (ns)
--   all2_ns       HUGEINT  time with two or more activities of any kind active, up to t (ns)
--   sm_comm       HUGEINT  integral of min(SM count, SMs held by communication kernels), up to t (SM·ns)
--   sm_compute    HUGEINT  integral of SMs held by non-communication kernels, up to t (SM·ns)
WITH edges AS (
    SELECT run_id, device_id, start_ns AS t, 1 AS sign, corunner_kind, sm_held FROM _activity_rows
    UNION ALL
    SELECT run_id, device_id, end_ns AS t, -1 AS sign, corunner_kind, sm_held FROM _activity_rows
), deltas AS (
    SELECT run_id, device_id, t,
           sum(sign * (corunner_kind = 'comm')::INT) AS d_comm,
           sum(sign * (corunner_kind = 'copy')::INT) AS d_copy,
           sum(sign * (corunner_kind = 'compute')::INT) AS d_comp,
           sum(sign * CASE WHEN corunner_kind = 'comm' THEN sm_held ELSE 0 END) AS d_sm_comm,
           sum(sign * CASE WHEN corunner_kind = 'compute' THEN sm_held ELSE 0 END) AS d_sm_comp
    FROM edges GROUP BY ALL
), levels AS (
    SELECT run_id, device_id, t,
           sum(d_comm) OVER w AS n_comm, sum(d_copy) OVER w AS n_copy, sum(d_comp) OVER w AS n_comp,
           -- concurrent comm kernels cannot hold more than every SM (DESIGN: min(S, sum of comm CTAs))
           least(sum(d_sm_comm) OVER w, coalesce(sm_count, sum(d_sm_comm) OVER w)) AS sm_comm,
           sum(d_sm_comp) OVER w AS sm_comp,
           coalesce(lead(t) OVER (PARTITION BY run_id, device_id ORDER BY t) - t, 0) AS len
    FROM deltas LEFT JOIN (SELECT run_id, device_id, sm_count FROM devices) USING (run_id, device_id)
    WINDOW w AS (PARTITION BY run_id, device_id ORDER BY t ROWS UNBOUNDED PRECEDING)
)
SELECT run_id, device_id, t,
       coalesce(sum(len * (n_comm > 0)::INT) OVER before, 0)::HUGEINT AS comm_ns,
       coalesce(sum(len * (n_comm > 1)::INT) OVER before, 0)::HUGEINT AS comm2_ns,
       coalesce(sum(len * (n_copy > 0)::INT) OVER before, 0)::HUGEINT AS copy_ns,
       coalesce(sum(len * (n_copy > 1)::INT) OVER before, 0)::HUGEINT AS copy2_ns,
       coalesce(sum(len * (n_comp > 0)::INT) OVER before, 0)::HUGEINT AS compute_ns,
       coalesce(sum(len * (n_comp > 1)::INT) OVER before, 0)::HUGEINT AS compute2_ns,
       coalesce(sum(len * (n_comm > 0 AND n_comp > 0)::INT) OVER before, 0)::HUGEINT AS comm_compute_ns,
       coalesce(sum(len * (n_comm + n_copy + n_comp > 1)::INT) OVER before, 0)::HUGEINT AS all2_ns,
       coalesce(sum(len::HUGEINT * sm_comm) OVER before, 0)::HUGEINT AS sm_comm,
       coalesce(sum(len::HUGEINT * sm_comp) OVER before, 0)::HUGEINT AS sm_compute
FROM levels
WINDOW before AS (PARTITION BY run_id, device_id ORDER BY t ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
