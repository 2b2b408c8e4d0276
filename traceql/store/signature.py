"""The signature id of a GPU activity: one 64-bit number for the same work, written into the store at ingest.

Two activities do the same work when they are the same kernel launched with the same configuration (name, grid,
block, dynamic shared memory), or copies or sets of the same kind and size. Attribution compares each activity with
the other instances of its signature, so every query groups by it; stored as an integer (the ``sig`` column of
``kernels``, ``memcpy`` and ``memset``), it is read at 8 bytes per row instead of a name and two launch shapes
hashed again by every query.

The id is traceql's own hash, not a database's: BLAKE2b of each distinct string (the name, the copy kind), folded
with the integers by xor and multiplication modulo 2^64, and finished with SplitMix64's finalizer (the formula:
docs/attribution.md, Signatures). It depends on the values only, never on a library's
version, the machine or the order of rows, so runs ingested years apart by different traceql versions agree, and a
migrated store gets the ids a fresh ingest would. It is computed with a few vectorized integer operations per part
(no per-row Python, no sort): about 60 ns per kernel.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# What identifies the work of each activity table: its tag, the column whose text names the work (None: the tag
# alone), and the integer columns. A copy's name is "[CUDA memcpy <copy_kind>]", so its kind names it.
PARTS: dict[str, tuple[str, str | None, tuple[str, ...]]] = {
    "kernels": ("kernel", "name",
                ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "dynamic_smem_bytes")),
    "memcpy": ("memcpy", "copy_kind", ("bytes",)),
    "memset": ("memset", None, ("bytes",)),
}
NULL = np.uint64(0x9E3779B97F4A7C15)  # what a missing value (NULL) counts as: no launch shape or size is this
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def text_hash(text: str | None) -> int:
    """The 64-bit hash of a string (BLAKE2b, 8 bytes, little-endian); None hashes as :data:`NULL`."""
    if text is None:
        return int(NULL)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer, in place on a uint64 array (wrapping arithmetic)."""
    z ^= z >> _S30
    z *= _M1
    z ^= z >> _S27
    z *= _M2
    z ^= z >> _S31
    return z


def _integers(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """An integer column as uint64 (two's complement of its int64 value), NULL as :data:`NULL`."""
    if col.null_count:
        values = np.asarray(pc.fill_null(col, 0)).astype(np.int64).view(np.uint64)
        values[np.asarray(pc.is_null(col))] = NULL
        return values
    return np.asarray(col).astype(np.int64, copy=False).view(np.uint64)


def _texts(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Each row's :func:`text_hash`, computed once per distinct string; a chunk at a time (chunks of a large table
    together may hold more text than one array can)."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    known: dict[str | None, int] = {}
    out = []
    for chunk in chunks:
        if not pa.types.is_dictionary(chunk.type):
            chunk = pc.dictionary_encode(chunk)
        distinct = chunk.dictionary.cast(pa.string()).to_pylist()
        known.update((w, text_hash(w)) for w in distinct if w not in known)
        words = np.array([known[w] for w in distinct] + [int(NULL)], dtype=np.uint64)
        out.append(words[np.asarray(pc.fill_null(chunk.indices, len(chunk.dictionary))).astype(np.intp)])
    return np.concatenate(out) if out else np.zeros(0, dtype=np.uint64)


def signature_ids(table: str, data: pa.Table) -> pa.UInt64Array:
    """The signature id of each row of ``data``, rows of the store table ``table`` (kernels, memcpy or memset)."""
    tag, text, ints = PARTS[table]
    h = np.full(data.num_rows, text_hash(tag), dtype=np.uint64)
    columns = ([(_texts, text)] if text else []) + [(_integers, c) for c in ints]
    for i, (values, name) in enumerate(columns):
        # each part folded in by a step that is one-to-one in the part (xor, then a multiply by an odd number of its
        # position's own: (a, b) and (b, a) differ), then spread (a shift and xor), and the whole mixed at the end
        h ^= values(data.column(name))
        h *= _odd(i)
        h ^= h >> _S31
    return pa.array(_mix(h), pa.uint64())


def _odd(i: int) -> np.uint64:
    """The multiplier of part ``i``: odd, so that multiplying by it is one-to-one modulo 2^64."""
    return np.uint64(((2 * i + 3) * int(NULL)) % 2**64 | 1)
