"""traceql: attribute the slowdown of compute kernels overlapped with communication, with SQL over traces."""

import importlib

from .errors import BadInputError, SchemaVersionError, TraceqlError
from .ingest import ingest  # also registers the reader of lazily ingested tables with the store
from .store.remote import connect  # (store.connect, also over run stores at URLs)
from .version import __version__

__all__ = ["__version__", "ingest", "connect", "attribute", "Attribution", "diff", "TraceqlError", "BadInputError",
           "SchemaVersionError"]


def __getattr__(name: str):
    """traceql.attribute and traceql.diff are the modules, callable: traceql.attribute(RUN) and traceql.diff(A, B) are
    the CLI's twins, as traceql.ingest(...) is. They are imported when first used, so that commands that need no
    attribution (``traceql overlap``, ``traceql sql``) start without it."""
    if name in ("attribute", "diff"):
        return importlib.import_module(f"{__name__}.{name}")
    if name == "Attribution":
        return importlib.import_module(f"{__name__}.attribute").Attribution
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
