-- _signatures: the names of every signature (the same work: name, grid, block, dynamic shared memory for kernels;
-- copy kind and bytes for copies and sets), one row per signature hash.
-- columns:
--   sig         UBIGINT  signature hash (_activity_rows)
--   name        VARCHAR  demangled kernel name, or [CUDA memcpy KIND] / [CUDA memset]
--   short_name  VARCHAR  base function name (kernels), else the name
--   grid        VARCHAR  grid as XxYxZ (kernels)
--   block       VARCHAR  block as XxYxZ (kernels)
WITH k AS (
    SELECT DISTINCT name, short_name, concat_ws('x', grid_x, grid_y, grid_z) AS grid,
                    concat_ws('x', block_x, block_y, block_z) AS block, dynamic_smem_bytes
    FROM kernels
), c AS (
    SELECT DISTINCT '[CUDA memcpy ' || coalesce(copy_kind, '?') || ']' AS name, bytes FROM memcpy
), s AS (
    SELECT DISTINCT bytes FROM memset
)
SELECT DISTINCT ON (sig) * FROM (
    SELECT hash('kernel', name, grid, block, dynamic_smem_bytes, NULL::BIGINT) AS sig, name, short_name, grid, block
    FROM k
    UNION ALL
    SELECT hash('memcpy', name, NULL::VARCHAR, NULL::VARCHAR, NULL::BIGINT, bytes), name, name, NULL, NULL FROM c
    UNION ALL
    SELECT hash('memset', '[CUDA memset]', NULL::VARCHAR, NULL::VARCHAR, NULL::BIGINT, bytes), '[CUDA memset]',
           '[CUDA memset]', NULL, NULL
    FROM s
)
ORDER BY sig
