"""torch.profiler traces: the Chrome-trace JSON that PyTorch's profiler writes through Kineto (``trace.json``,
``trace.json.gz``), read into Arrow tables of the normalized schema (:mod:`traceql.sources.kineto.reader`)."""

from .reader import KINETO_FORMAT, KinetoTrace, is_kineto_path, read_trace

__all__ = ["KINETO_FORMAT", "KinetoTrace", "is_kineto_path", "read_trace"]
