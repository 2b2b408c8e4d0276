-- kernel_totals: per device and kernel name, how much GPU time the kernel took: the kernel summary of a run.
-- columns:
--   run_id       VARCHAR  run
--   device_id    INTEGER  physical GPU
--   kind         VARCHAR  compute, comm, memory or other
--   family       VARCHAR  kernel family (gemm, nccl, elementwise, ...)
--   short_name   VARCHAR  base function name
--   name         VARCHAR  demangled kernel name
--   n            BIGINT   instances
--   total_ns     BIGINT   summed duration (ns)
--   mean_ns      DOUBLE   mean duration (ns)
--   median_ns    DOUBLE   median duration (ns)
--   max_ns       BIGINT   longest instance (ns)
--   share        DOUBLE   total_ns / all kernel time on the device
SELECT run_id, device_id, kind, family, short_name, name, count(*) AS n, sum(dur_ns)::BIGINT AS total_ns,
       avg(dur_ns) AS mean_ns, median(dur_ns)::DOUBLE AS median_ns, max(dur_ns) AS max_ns,
       sum(dur_ns) / sum(sum(dur_ns)) OVER (PARTITION BY run_id, device_id) AS share
FROM kernels GROUP BY run_id, device_id, kind, family, short_name, name
