-- _signatures: the names of every signature (signatures), as the analysis reads them.
-- columns:
--   sig         UBIGINT  signature id (the store's sig: _activity_rows)
--   name        VARCHAR  demangled kernel name, or [CUDA memcpy KIND] / [CUDA memset]
--   short_name  VARCHAR  base function name (kernels), else the name
--   grid        VARCHAR  grid as XxYxZ (kernels)
--   block       VARCHAR  block as XxYxZ (kernels)
SELECT sig, name, short_name, grid, block FROM signatures
