"""NVTX ranges whose text carries machine-readable labels.

A label text looks like ``case:gemm_spin;ctas=33;dtype=bf16``: the part before the first
``;`` names the case (``case:NAME``), the rest are ``key=value`` pairs. traceql's ingest
parses these into columns, so every benchmark case can be selected with SQL.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


def label_text(case: str, **labels: object) -> str:
    parts = [f"case:{case}"] + [f"{k}={v}" for k, v in labels.items()]
    return ";".join(parts)


#: also open a torch.profiler range (record_function) with each NVTX range: set by a program that runs under
#: torch.profiler, so that its trace holds the same ranges (user annotations) as an nsys capture of it
RECORD_FUNCTION = False


@contextlib.contextmanager
def nvtx_range(text: str) -> Iterator[None]:
    import torch

    with torch.profiler.record_function(text) if RECORD_FUNCTION else contextlib.nullcontext():
        torch.cuda.nvtx.range_push(text)
        try:
            yield
        finally:
            torch.cuda.nvtx.range_pop()


def case_range(case: str, **labels: object):
    return nvtx_range(label_text(case, **labels))
