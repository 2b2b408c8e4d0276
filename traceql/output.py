"""Writing what a command produces (a result file, a report page, attribution files) whole or not at all.

:func:`replacing` hands out a temporary file beside the target and renames it over the target only once it is
complete, so a reader never sees half a file and a failure (a full disk, Ctrl-C) leaves the target as it was and
no temporary file behind. A device or a pipe (``/dev/stdout``) is written in place, from a temporary file made
elsewhere: it cannot be replaced and must not be (a rename over ``/dev/full`` would replace the device, and pyarrow
deletes a path it failed to write). Every failure to write is bad input naming the
path and the next step (:func:`unwritable`). No output may be one of the command's inputs or lie inside one
(:func:`refuse_overwrite`): a report written over its trace, or a result over a run store's index, destroys what the
command read.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import shutil
import tempfile
import urllib.parse
from collections.abc import Iterable, Iterator
from pathlib import Path

from .errors import BadInputError

NO_ROOM = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS)  # a write failed for want of room or rights


_ROOM_HINTS = {errno.ENOSPC: "free space on its file system or write elsewhere",
               errno.EFBIG: "the file exceeds the size limit of this process (ulimit -f): raise it or write elsewhere",
               errno.EDQUOT: "free space in your quota or write elsewhere",
               errno.EROFS: "the file system is read-only: write elsewhere"}


def write_failure(exc: OSError) -> tuple[str, str | None]:
    """Why a write failed (the first line of ``exc``), and what to do where it failed for want of room or rights
    (None: another cause). pyarrow's errors give their error number only in their text (``[errno 27]``)."""
    code = exc.errno
    if code is None:
        found = re.search(r"\[errno (\d+)\]", str(exc))
        code = int(found.group(1)) if found else None
    return (exc.strerror or str(exc)).splitlines()[0], _ROOM_HINTS.get(code)


def unwritable(path: Path, exc: OSError) -> BadInputError:
    """An output that cannot be written (not a folder, read-only, full): bad input naming it and the next step."""
    why, hint = write_failure(exc)
    return BadInputError(f"{path}: cannot write here ({why}); {hint or 'give a path you can write to'}")


def check_target(path: str | Path) -> None:
    """Refuse, before any work, an output file that cannot be written: a folder, a path below a file, a place where
    no file can be made (read-only). A full disk shows only when the file is written."""
    path = Path(path)
    if path.is_dir():
        raise BadInputError(f"{path}: is a folder; give a file name to write to")
    _probe(path, path.parent)


def check_folder(path: str | Path) -> None:
    """The same for a folder to write files into (made if need be)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise BadInputError(f"{path}: is a file, not a folder; give a folder to write into")
    _probe(path, path)


def refuse_overwrite(outputs: Iterable[str | Path | None], inputs: Iterable[str | Path | None]) -> None:
    """Refuse, before any work, an output that is one of the inputs or lies inside one (a file of a run store, its
    index ``manifest.json``, a run's folder, a file of an export folder): bad input naming both. Paths are compared
    resolved (symbolic links) and by identity (device and inode: hard links, bind mounts); outputs and inputs at URLs
    of other protocols than ``file://`` are left out, as is None (no output given)."""
    outs = [p for p in map(_local, outputs) if p is not None]
    ins = [p for p in map(_local, inputs) if p is not None and (p.exists() or p.is_symlink())]
    for out in outs:
        for inp in ins:
            if (how := _overwrites(out, inp)) is not None:
                raise BadInputError(f"{out}: {how} {inp}; a command never writes over what it reads: give an output "
                                    "path outside its inputs")


def _local(value: str | Path | None) -> Path | None:
    """The path ``value`` names: itself, or a ``file://`` URL's path; None for no value or a URL of another protocol
    (as :mod:`traceql.sources.urls` reads them, which this module sits below)."""
    if value is None:
        return None
    if isinstance(value, str) and re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", value):
        parsed = urllib.parse.urlparse(value)
        return Path(urllib.parse.unquote(parsed.path)) if parsed.scheme == "file" else None
    return Path(value)


def same_path(a: str | Path, b: str | Path) -> bool:
    """Whether ``a`` and ``b`` name one file or folder: equal once resolved (symbolic links), or of one device and
    inode (hard links, bind mounts)."""
    a, b = Path(a), Path(b)
    same = _identity(a)
    return a.absolute().resolve() == b.absolute().resolve() or (same is not None and same == _identity(b))


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _overwrites(out: Path, inp: Path) -> str | None:
    """How writing ``out`` would overwrite the input ``inp`` ('is the input', 'is inside the input'); None if not."""
    target = _identity(inp)
    if target is None:
        return None
    here = out.absolute()
    while not (here.exists() or here.is_symlink()) and here != here.parent:  # the part of the path that exists
        here = here.parent
    real = here.resolve()
    for i, folder in enumerate([real, *real.parents]):
        if _identity(folder) == target:
            return "is the input" if i == 0 and here == out.absolute() else "is inside the input"
    if out.absolute().resolve().is_relative_to(inp.resolve()):
        return "is inside the input"
    own = _identity(out)
    if own is not None and out.is_file() and os.stat(out).st_nlink > 1:  # a hard link to an input's file?
        files = [inp] if not inp.is_dir() else (p for p in inp.rglob("*") if p.is_file())
        if any(_identity(f) == own for f in files):
            return "is a hard link to a file of the input"
    return None


def _probe(path: Path, folder: Path) -> None:
    while not folder.exists() and folder != folder.parent:  # the nearest folder there is: where writing starts
        folder = folder.parent
    if not folder.is_dir():
        raise BadInputError(f"{path}: {folder} is a file, not a folder; give a folder to write into")
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".traceql-probe-")
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise unwritable(path, exc) from exc


@contextlib.contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """The path to write ``path``'s new content to; on leaving the block without an error it becomes ``path``."""
    path = Path(path)
    check_target(path)
    if path.exists() and not path.is_file():  # a device, a pipe: written in place, from a file made elsewhere
        yield from _through_temp(path)  # (a writer given the path itself may delete it after an error: pyarrow does)
        return
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
    except OSError as exc:
        raise unwritable(path, exc) from exc
    tmp = Path(name)
    try:
        yield tmp
        tmp.chmod(0o666 & ~_umask())  # mkstemp makes 0600; the result gets the mode a new file would
        os.replace(tmp, path)
    except OSError as exc:
        raise unwritable(path, exc) from exc
    finally:
        with contextlib.suppress(OSError):  # gone already once renamed
            tmp.unlink()


def _through_temp(path: Path) -> Iterator[Path]:
    try:
        fd, name = tempfile.mkstemp(prefix="traceql-out-")
        os.close(fd)
    except OSError as exc:
        raise unwritable(Path(tempfile.gettempdir()), exc) from exc
    tmp = Path(name)
    try:
        yield tmp
        with tmp.open("rb") as src, path.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except OSError as exc:
        raise unwritable(path, exc) from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def json_safe(value):
    """``value`` (dicts, lists, scalars) with every non-finite float as None: JSON has no NaN nor infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):  # a map's entries come as (key, value) tuples
        return [json_safe(v) for v in value]
    return value
