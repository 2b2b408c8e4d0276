-- _signatures: the names of every signature (the same work: name, grid, block, dynamic shared memory for kernels;
-- copy kind and bytes for copies and sets), one row per signature id.
-- columns:
--   sig         UBIGINT  signature id (the store's sig: _activity_rows)
--   name        VARCHAR  demangled kernel name, or [CUDA memcpy KIND] / [CUDA memset]
--   short_name  VARCHAR  base function name (kernels), else the name
--   grid        VARCHAR  grid as XxYxZ (kernels)
--   block       VARCHAR  block as XxYxZ (kernels)
-- The rows of one sig have the same names and shapes (the id is a hash of them): the names are read from one row of
-- each, and the grids and blocks put in text once per signature, not per kernel.
SELECT sig, name, short_name, concat_ws('x', grid_x, grid_y, grid_z) AS grid,
       concat_ws('x', block_x, block_y, block_z) AS block
FROM (SELECT DISTINCT ON (sig) sig, name, short_name, grid_x, grid_y, grid_z, block_x, block_y, block_z FROM kernels)
UNION ALL
SELECT sig, name, name, NULL, NULL
FROM (SELECT DISTINCT ON (sig) sig, '[CUDA memcpy ' || coalesce(copy_kind, '?') || ']' AS name FROM memcpy)
UNION ALL
SELECT DISTINCT ON (sig) sig, '[CUDA memset]', '[CUDA memset]', NULL, NULL FROM memset
ORDER BY sig
