"""Each table file of a run checked against the sha256 its run recorded when the file was written.

A run records the sha256 of each of its files in its ``run.json`` (and its index entry): a file whose bytes are not
those (a flipped bit, a file of another run or another table copied in, one rewritten by another program) is refused
by name, where a same-size file passed before as the file ingest wrote. Hashing every file at every opening would
read the whole store each time, so a file found whole is remembered, by a stamp named after its identity and state
(device, inode, size, modification and change times) and its expected sha256, under ``$XDG_CACHE_HOME/traceql/
verified`` (``~/.cache``): any write, rename over, copy or change of mode gives the file another state, and it is
checked again. The writer stamps the files it has just hashed, so the host that ingested a run never hashes them twice.
A run written by an earlier traceql records no sha256 and is read as before (sizes and footers).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ..errors import BadInputError

_seen: set[str] = set()  # stamps this process checked or wrote


def sha256(path: Path) -> str:
    """The sha256 of the file's bytes, in hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def check(path: Path, expected: str, run_id: str, st: os.stat_result | None = None) -> None:
    """Refuse ``path`` (bad input naming it) unless its bytes have the sha256 ``expected`` that run ``run_id``
    recorded; ``st``: its ``os.stat`` if the caller has it."""
    stamp = _stamp(path, expected, st)
    if stamp in _seen or (stamp is not None and _stamp_file(stamp).exists()):
        return
    try:
        found = sha256(path)
    except OSError as exc:
        raise BadInputError(f"{path}: cannot be read ({exc}); re-ingest that trace") from exc
    if found != expected:
        raise BadInputError(f"{path}: its content is not the one run {run_id} recorded when it was written (sha256 "
                            f"{found[:16]}..., recorded {expected[:16]}...): the file was damaged or replaced; "
                            "re-ingest that trace")
    remember(path, expected, st)


def remember(path: Path, digest: str, st: os.stat_result | None = None) -> None:
    """Note that ``path``, as it is now, has the sha256 ``digest`` (a cache that cannot be written is passed over)."""
    stamp = _stamp(path, digest, st)
    if stamp is None:
        return
    _seen.add(stamp)
    try:
        folder = _stamp_file(stamp).parent
        folder.mkdir(parents=True, exist_ok=True)
        _stamp_file(stamp).touch()
    except OSError:
        pass


def _stamp(path: Path, digest: str, st: os.stat_result | None) -> str | None:
    try:
        st = st or os.stat(path)
    except OSError:
        return None
    state = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{digest}"
    return hashlib.sha256(state.encode()).hexdigest()[:32]


def _stamp_file(stamp: str) -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "traceql" / "verified" / stamp[:2] / stamp
