-- signatures: one row per signature id (the sig column of kernels, memcpy and memset): what the work is. Join it to
-- any table or view with a sig column (instance_facts, kernel_signatures, ncu_match) for names and launch shapes.
-- The rows of one sig have the same name and shape (the id is a hash of them: docs/attribution.md, Signatures), so
-- each is read from one row, and grids and blocks are put in text once per signature, not per kernel.
-- columns:
--   sig                 UBIGINT  signature id
--   activity            VARCHAR  kernel, memcpy or memset
--   name                VARCHAR  demangled kernel name, or [CUDA memcpy KIND] / [CUDA memset]
--   short_name          VARCHAR  base function name (kernels), else the name
--   grid                VARCHAR  grid as XxYxZ (kernels)
--   block               VARCHAR  block as XxYxZ (kernels)
--   dynamic_smem_bytes  BIGINT   dynamic shared memory (bytes; kernels)
--   bytes               BIGINT   bytes moved or set (copies and sets)
SELECT sig, 'kernel' AS activity, name, short_name, concat_ws('x', grid_x, grid_y, grid_z) AS grid,
       concat_ws('x', block_x, block_y, block_z) AS block, dynamic_smem_bytes, NULL::BIGINT AS bytes
FROM (SELECT DISTINCT ON (sig) sig, name, short_name, grid_x, grid_y, grid_z, block_x, block_y, block_z,
             dynamic_smem_bytes FROM _kernel_sigs)
UNION ALL
SELECT sig, 'memcpy', name, name, NULL, NULL, NULL, bytes
FROM (SELECT DISTINCT ON (sig) sig, '[CUDA memcpy ' || coalesce(copy_kind, '?') || ']' AS name, bytes FROM memcpy)
UNION ALL
SELECT DISTINCT ON (sig) sig, 'memset', '[CUDA memset]', '[CUDA memset]', NULL, NULL, NULL, bytes FROM memset
ORDER BY sig
