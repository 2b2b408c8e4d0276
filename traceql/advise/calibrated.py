"""Constants of traceql.advise, written by ``python benchmarks/validate_advise.py --calibrate``: do not edit by
hand."""

SOURCE = 'tests/data/h200x2: overlap (regions), train_ddp against train_ddp_ctas2 (steps)'
ALPHA = {'all_gather': 0.7584, 'all_reduce': 0.6693, 'reduce_scatter': 0.5576, '*': 0.6693}
BANDS = {'sequential': 0.0667, 'overlapped': 0.1881, 'steps': 0.0476}
MEDIAN_ERRORS = {'sequential': 0.0273, 'overlapped': 0.0518, 'steps': 0.0381}
