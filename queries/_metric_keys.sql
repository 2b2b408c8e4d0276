-- _metric_keys: the nsys GPU metrics attribution reads, by name, and the column of _metric_wide each feeds. Names
-- differ between GPUs and nsys versions, so each is a LIKE pattern; a metric takes the first pattern it matches
-- (lowest rank). The metrics of one column at one sample combine by `combine`: max (NVLink and PCIe: the busier
-- direction) or sum (DRAM read and write share the interface).
-- columns:
--   rank               INTEGER  order in which patterns are tried
--   pattern            VARCHAR  LIKE pattern of nsys metric names
--   key                VARCHAR  column of _metric_wide
--   combine            VARCHAR  how a sample's metrics of one key combine: max or sum
SELECT rank::INTEGER AS rank, pattern, key, combine FROM (VALUES
    (1, 'SMs Active%', 'sm_active_pct', 'max'),
    (2, 'DRAM Read Bandwidth%', 'dram_pct', 'sum'),
    (3, 'DRAM Write Bandwidth%', 'dram_pct', 'sum'),
    (4, 'GPC Clock Frequency%', 'gpc_clock_mhz', 'max'),
    (5, 'NVLink%User Data%', 'nvlink_pct', 'max'),
    (6, 'PCIe%Throughput%', 'pcie_pct', 'max'),
    (7, 'SM Issue%', 'sm_issue_pct', 'max')
) AS k(rank, pattern, key, combine)
