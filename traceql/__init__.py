"""traceql: attribute the slowdown of compute kernels overlapped with communication, with SQL over traces."""

# traceql.attribute and traceql.diff are the modules, callable: traceql.attribute(RUN) and traceql.diff(A, B) are the
# CLI's twins, as traceql.ingest(...) is
from . import attribute, diff  # noqa: E402
from .attribute import Attribution  # noqa: E402
from .errors import BadInputError, SchemaVersionError, TraceqlError  # noqa: E402
from .ingest import ingest  # noqa: E402
from .store.remote import connect  # noqa: E402  (store.connect, also over run stores at URLs)
from .version import __version__

__all__ = ["__version__", "ingest", "connect", "attribute", "Attribution", "diff", "TraceqlError", "BadInputError",
           "SchemaVersionError"]
