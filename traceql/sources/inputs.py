"""What every reader needs of an input file: its content hash and its decompression."""

from __future__ import annotations

import hashlib
import lzma
import zlib
from pathlib import Path

import pyarrow as pa

from .. import output
from ..errors import BadInputError


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        if path.is_dir():
            h.update(f.relative_to(path).as_posix().encode() + b"\0")
        with f.open("rb") as fh:
            while chunk := fh.read(1 << 22):
                h.update(chunk)
    return h.hexdigest()


DECOMPRESSORS = {".xz": "lzma", ".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}


def _open_compressed(path: Path):
    if DECOMPRESSORS[path.suffix] == "zstd":  # not in the standard library before Python 3.14; pyarrow has it
        return pa.CompressedInputStream(pa.OSFile(str(path)), "zstd")
    import importlib

    return importlib.import_module(DECOMPRESSORS[path.suffix]).open(path, "rb")


def decompress(path: Path, dest: Path) -> Path:
    """Decompress a compressed export (``run.sqlite.xz``) to ``dest`` (in a staging folder of a run directory); the
    input is left as it is. A damaged input and a full disk are told apart."""
    damaged = (OSError, EOFError, ValueError, pa.ArrowException, lzma.LZMAError, zlib.error)
    try:
        src = _open_compressed(path)
    except damaged as exc:
        raise BadInputError(f"{path}: cannot decompress ({exc}); the file is damaged or truncated") from exc
    with src:
        try:
            dst = dest.open("wb")
        except OSError as exc:
            raise output.unwritable(dest.parent.parent, exc) from exc
        with dst:
            while True:
                try:
                    chunk = src.read(1 << 22)
                except damaged as exc:
                    raise BadInputError(f"{path}: cannot decompress ({exc}); the file is damaged or truncated, "
                                        "copy it again") from exc
                if not chunk:
                    break
                try:
                    dst.write(chunk)
                except OSError as exc:  # the run directory's disk, not the input
                    raise output.unwritable(dest.parent.parent, exc) from exc
    return dest
