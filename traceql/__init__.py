"""traceql: attribute the slowdown of compute kernels overlapped with communication, with SQL over traces."""

__version__ = "0.1.0"

# traceql.attribute is the module, callable: traceql.attribute(RUN) is the CLI's twin, as traceql.ingest(...) is
from . import attribute  # noqa: E402
from .attribute import Attribution  # noqa: E402
from .errors import BadInputError, SchemaVersionError, TraceqlError  # noqa: E402
from .ingest import ingest  # noqa: E402
from .store import connect  # noqa: E402

__all__ = ["__version__", "ingest", "connect", "attribute", "Attribution", "TraceqlError", "BadInputError",
           "SchemaVersionError"]
