"""Inputs named by URL.

``file://PATH`` is a local path. Any other fsspec protocol (``memory://``, ``s3://``, ``gs://``, ``https://``...; the
protocol's own package, e.g. ``s3fs``, is needed) is copied, by the unit of work that reads it, into a staging
folder of the run store (removed afterwards, or by the next ingest if the unit was killed) and read from there:
SQLite and nsys need a local file, and DuckDB's httpfs extension cannot be installed offline. The run records the
URL as its source. Outputs go the other way: written locally, then uploaded whole, file by file (:func:`upload`).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import unquote, urlparse

from ..errors import BadInputError, MissingInputError, TraceqlError, UsageError

URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(value: str | Path) -> bool:
    return isinstance(value, str) and bool(URL.match(value))


def local_path(url: str) -> Path | None:
    """The path of a ``file://`` URL; None for other protocols."""
    parsed = urlparse(url)
    return Path(unquote(parsed.path)) if parsed.scheme == "file" else None


def as_local(value: str | Path, what: str) -> Path:
    """A path for something that must be local (a run directory to write): a path, or a ``file://`` URL."""
    if not is_url(value):
        return Path(value)
    path = local_path(str(value))
    if path is None:
        raise UsageError(f"{value}: {what} must be a local path or a file:// URL (a file system every worker "
                         "mounts)")
    return path


def is_remote(value: str | Path) -> bool:
    """Whether ``value`` is a URL of another protocol than ``file://`` (read and written through fsspec)."""
    return is_url(value) and local_path(str(value)) is None


def filesystem(url: str):
    """The fsspec file system of ``url`` and the path on it; a clear error when fsspec, or the package of the URL's
    protocol, is missing, or the protocol is unknown."""
    try:
        import fsspec
    except ImportError:
        raise UsageError(f"{url}: URLs need fsspec: pip install 'traceql[dask]' (or fsspec)") from None
    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise UsageError(f"{url}: no file system for this URL ({exc}); install the fsspec package for its "
                         "protocol") from None
    except Exception as exc:  # a file system that connects when made (sftp, ftp...) and cannot
        raise BadInputError(f"{url}: cannot reach its file system ({exc}); check the URL and the credentials of "
                            "its file system") from None


def failure(url: str, exc: Exception, doing: str = "read") -> BadInputError:
    """An error of a remote file system (fsspec's, or its package's own: botocore's, google's...) as bad input."""
    return BadInputError(f"{url}: cannot be {doing} ({type(exc).__name__}: {exc}); check the URL and the "
                         "credentials of its file system")


def upload(files: Sequence[Path], url: str) -> None:
    """Put each local file in ``files``, whole, into the folder ``url``, in the order given: the last one says that
    the others are there (``run.json`` of a run, ``attribution.json`` of an attribution)."""
    fs, root = filesystem(url)
    root = root.rstrip("/")
    try:
        fs.makedirs(root, exist_ok=True)  # object stores have no folders: nothing to do there
        for f in files:
            fs.put_file(str(f), f"{root}/{f.name}")
    except TraceqlError:
        raise
    except Exception as exc:  # the file system's package has errors of its own (botocore's, google's...)
        raise failure(url, exc, "written") from None


@contextlib.contextmanager
def fetched(url: str, scratch: Path, prefix: str) -> Iterator[Path]:
    """A local copy of the file or folder at ``url``, in a new folder named ``prefix...`` under ``scratch`` (a
    staging folder of the run store: ``prefix`` is the store's name for it)."""
    fs, path = filesystem(url)
    scratch.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(dir=scratch, prefix=prefix))
    try:
        name = path.rstrip("/").rsplit("/", 1)[-1] or "input"
        dest = folder / name
        try:
            if not fs.exists(path):
                raise MissingInputError(f"{url}: no such file or folder (as seen from {socket.gethostname()}, "
                                        "where this unit runs)")
            if fs.isdir(path):
                fs.get(path.rstrip("/") + "/", str(dest) + "/", recursive=True)
            else:
                with fs.open(path, "rb") as src, open(dest, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 22)
        except MissingInputError:
            raise
        except OSError as exc:
            raise BadInputError(f"{url}: cannot be read ({exc}); check the URL and the credentials of its file "
                                "system") from exc
        yield dest
    finally:
        shutil.rmtree(folder, ignore_errors=True)
