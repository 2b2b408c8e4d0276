-- _kernel_sigs: the kernels of each signature id on each device: one row per (run, device, sig), with the name and
-- launch shape the id stands for and the number of launches. The rows of one sig have the same name and shape (the id
-- is a hash of them), so each is read from one row. signatures and ncu_match read it: attribution.prepare computes it
-- once, in one scan of the kernels.
-- columns:
--   run_id              VARCHAR  run
--   device_id           INTEGER  physical GPU
--   sig                 UBIGINT  signature id
--   name                VARCHAR  demangled kernel name
--   short_name          VARCHAR  base function name
--   grid_x              INTEGER  grid size, x
--   grid_y              INTEGER  grid size, y
--   grid_z              INTEGER  grid size, z
--   block_x             INTEGER  block size, x
--   block_y             INTEGER  block size, y
--   block_z             INTEGER  block size, z
--   dynamic_smem_bytes  BIGINT   dynamic shared memory (bytes)
--   kind                VARCHAR  compute, comm, memory or other
--   n                   BIGINT   launches
SELECT run_id, device_id, sig, any_value(name) AS name, any_value(short_name) AS short_name,
       any_value(grid_x) AS grid_x, any_value(grid_y) AS grid_y, any_value(grid_z) AS grid_z,
       any_value(block_x) AS block_x, any_value(block_y) AS block_y, any_value(block_z) AS block_z,
       any_value(dynamic_smem_bytes) AS dynamic_smem_bytes, any_value(kind) AS kind, count(*) AS n
FROM kernels GROUP BY run_id, device_id, sig
