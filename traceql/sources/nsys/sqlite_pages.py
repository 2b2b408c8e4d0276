"""Numeric columns of a SQLite rowid table, decoded straight from the file's b-tree pages with numpy.

SQLite's file format is documented and stable (https://www.sqlite.org/fileformat2.html). A rowid table is a
b-tree whose leaf pages hold one record per row, in rowid order; a record is a header of "serial types" (one
per column: NULL, an integer of 1-8 bytes, a float, the constants 0 and 1, text, blob) followed by the values,
big-endian. Every SQLite client, ADBC's included, decodes a table row by row through SQLite's virtual machine.
For the large numeric tables of an nsys export (GPU_METRICS: tens of millions of rows of a few integers),
decoding every record of a batch of pages at once, over a memory map of the file, is several times faster.

What such tables are made of is read here: integers of every width, floats (REAL columns, whose whole values
SQLite may store as integers), NULLs, an INTEGER PRIMARY KEY (stored as the rowid). Anything else raises
:class:`Unsupported` and the caller reads through SQLite instead: a value stored as text or blob in a column
read, a record longer than its page (overflow), a record written before a column was added, a WITHOUT ROWID
table, a database with a write-ahead log or a hot journal, a page that is not what the b-tree says (a
damaged or truncated file). Values are those SQLite returns; a property test holds them to sqlite3.
"""

from __future__ import annotations

import mmap
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

LEAF, INTERIOR = 13, 5  # table b-tree page types
MAX_DEPTH = 40
# bytes of the value of serial types 0-9 (0: NULL, 1-6: integers, 7: float, 8 and 9: the constants 0 and 1)
WIDTH = np.array([0, 1, 2, 3, 4, 6, 8, 8, 0, 0], np.int64)
SHIFT = np.where(WIDTH > 0, 64 - 8 * WIDTH, 0)  # a word shifted right by this leaves the value of the serial type
# Leaf pages decoded at once, per decoding thread: 1 MiB is about 30 k rows of a 4-column table. Measured on a
# 448 MiB H100 export (13.3 M GPU-metric samples, docs/performance.md): with 2 threads on 2 cores 1-2 MiB chunks
# decode fastest (arrays stay in cache); with 4 threads on 8 cores 1 MiB chunks leave the threads waiting on
# each other between numpy calls (3.8-4.8 s) and 4 MiB ones do not (2.7-2.9 s, as fast as SQLite on 4 threads).
CHUNK_BYTES = 1 << 20


class Unsupported(Exception):  # noqa: N818 (a reason to read through SQLite, not an error)
    """This table, or this part of it, holds something the page reader does not decode."""


@dataclass(frozen=True)
class Column:
    index: int  # position in the table (and so in each record)
    real: bool  # REAL affinity: float64, else int64
    rowid_alias: bool = False  # INTEGER PRIMARY KEY: the record holds NULL, the value is the rowid


class PageFile:
    """One SQLite database file, read-only, whose pages are read into memory a batch at a time."""

    def __init__(self, path: Path):
        if sys.byteorder != "little":  # the words below are byte-swapped from native order
            raise Unsupported("a big-endian machine")
        for suffix in ("-wal", "-journal"):  # SQLite would read (or roll back) through these first
            if Path(f"{path}{suffix}").exists():
                raise Unsupported(f"{path}{suffix} exists")
        with open(path, "rb") as f:
            head = f.read(100)
            if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
                raise Unsupported("not a SQLite database")
            self._map: mmap.mmap | None = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        size = int.from_bytes(head[16:18], "big")
        self.page_size = 65536 if size == 1 else size
        self.usable = self.page_size - head[20]
        self.pages = len(self._map) // self.page_size
        if self.page_size < 512 or self.page_size & (self.page_size - 1) or head[18] != 1 or head[19] != 1:
            self.close()  # 2 in bytes 18-19: write-ahead log mode
            raise Unsupported(f"page size {self.page_size} or write-ahead log mode")
        self._aligned = np.frombuffer(self._map, dtype=np.uint64, count=len(self._map) // 8)  # native order
        self._pairs = np.frombuffer(self._map, dtype=np.uint16, count=len(self._map) // 2)  # native order too

    def close(self) -> None:
        """Unmap the file once no array views it any more."""
        self._aligned = self._pairs = np.zeros(0, np.uint64)
        self._map = None

    def read(self, pages: np.ndarray) -> _Pages:
        """``pages`` (numbers from 1), checked to lie in the file."""
        if len(pages) and (pages.min() < 1 or pages.max() > self.pages):
            raise Unsupported("page number outside the file")
        return _Pages(self._aligned, self._pairs, (pages - 1) * self.page_size, pages == 1)

    def release(self, pages: np.ndarray) -> None:
        """Drop ``pages`` from this process's memory (the map stays valid: they are read again if touched), so
        that a scan holds a few chunks of the file at a time, not all it has read."""
        if self._map is None or not len(pages) or not hasattr(mmap, "MADV_DONTNEED"):
            return
        unit = mmap.PAGESIZE
        first = -(-int(pages.min() - 1) * self.page_size // unit) * unit
        stop = int(pages.max()) * self.page_size // unit * unit
        if stop > first:
            self._map.madvise(mmap.MADV_DONTNEED, first, stop - first)

    # -- the b-tree ---------------------------------------------------------------------------------------------

    def leaves(self, root: int) -> np.ndarray:
        """The leaf pages of the table b-tree rooted at ``root``, in rowid order."""
        level = np.array([root], np.int64)
        for _ in range(MAX_DEPTH):
            mem = self.read(level)
            # A table b-tree has all its leaves at one depth: the first page says whether this level is it
            # (decode checks every leaf; reading each here would bring the whole table into memory).
            if _byte(mem.words(mem.starts[:1]), 0)[0] == LEAF:
                return level
            if (_byte(mem.words(mem.starts), 0) != INTERIOR).any():
                raise Unsupported("unexpected page type")
            cells = mem.uint(mem.starts + 3, 2)
            page, index = _spread(cells + 1)  # each interior page: its cells' left children, then its right-most
            last = index == cells[page]
            pointer = mem.base[page] + mem.uint(mem.starts[page] + 12 + 2 * index, 2)
            level = np.where(last, mem.uint(mem.starts[page] + 8, 4), mem.uint(pointer, 4))
        raise Unsupported("b-tree deeper than any SQLite writes")

    def decode(self, leaves: np.ndarray, columns: list[Column]) -> tuple[np.ndarray, list[tuple[np.ndarray,
                                                                                            np.ndarray | None]]]:
        """Rowids, and (values, null mask or None) per column, of every row on ``leaves`` (in order)."""
        mem = self.read(leaves)
        if (_byte(mem.words(mem.starts), 0) != LEAF).any():
            raise Unsupported("unexpected page type")
        cells = mem.uint(mem.starts + 3, 2)
        page, index = _spread(cells)
        # cell pointers: 2-byte big-endian, at even offsets (pages start at multiples of 512, page 1's at 100 + 8)
        pointer = np.take(mem.pairs, (mem.starts[page] + 8 + 2 * index) >> 1).byteswap().astype(np.int64)
        cell = mem.base[page] + pointer
        head = mem.words(cell)  # the payload size, then (usually within the same 8 bytes) the rowid
        payload, n = mem.varint(cell, head)
        if (payload > self.usable - 35).any():
            raise Unsupported("a record spills to overflow pages")
        skip = int(n.max(initial=1))
        rowid, m = (mem.varint(cell + n, head << (8 * skip), 8 - skip) if (n == skip).all() and skip < 8
                    else mem.varint(cell + n))
        record = cell + n + m
        if ((pointer < 8) | (record + payload > mem.base[page] + self.usable)).any():
            raise Unsupported("a cell outside its page")
        serials, header = mem.serial_types(record, max(c.index for c in columns) + 1)
        if (header > payload).any():
            raise Unsupported("a record header larger than its record")
        offset, end = record + header, record + payload
        wanted = {c.index: c for c in columns}
        out: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
        group = group_word = None  # where the last word read starts, and it: neighbouring values share it
        for j, serial in enumerate(serials):
            kinds = np.bincount(np.minimum(serial, 10), minlength=11)  # rows per serial type 0-9, and beyond
            if kinds[10]:
                if j in wanted or ((serial == 10) | (serial == 11)).any():
                    raise Unsupported("text, blob or a reserved serial type in a column read")
                width = np.where(serial >= 12, (serial - 12) // 2, WIDTH[np.minimum(serial, 9)])
            else:
                width = WIDTH[serial]
            if j in wanted:
                if group is not None and (offset + width - group <= 8).all():
                    word = group_word << ((offset - group) << 3)
                else:
                    group, group_word = offset, mem.words(offset)
                    word = group_word
                out[j] = _value(serial, kinds, word, wanted[j], rowid)
            offset = offset + width
        if (offset > end).any():
            raise Unsupported("a record larger than its cell")
        self.release(leaves)
        return rowid, [out[c.index] for c in columns]


class _Pages:
    """Some pages of the mapped file: where each starts, where its b-tree header starts, and byte access."""

    def __init__(self, aligned: np.ndarray, pairs: np.ndarray, base: np.ndarray, first: np.ndarray):
        self.aligned, self.pairs = aligned, pairs  # the file as native-order 8- and 2-byte words
        self.base = base
        self.starts = base + np.where(first, 100, 0)  # page 1 holds the file header before its b-tree header

    def words(self, pos: np.ndarray) -> np.ndarray:
        """The 8 bytes at each of ``pos`` as one big-endian int64.

        Two aligned 8-byte gathers and shifts: several times faster than gathering 8 single bytes. Positions
        are clipped to the buffer, so a damaged page yields garbage values that the checks catch, never a crash.
        """
        word = pos >> 3
        shift = ((pos & 7) << 3).view(np.uint64)
        low = np.take(self.aligned, word, mode="clip")
        high = np.take(self.aligned, word + 1, mode="clip")
        # (high << 1) << (63 - shift): no shift by 64 (undefined) where shift is 0
        return ((low >> shift) | ((high << np.uint64(1)) << (np.uint64(63) - shift))).byteswap().view(np.int64)

    def uint(self, pos: np.ndarray, width: int) -> np.ndarray:
        return _top(self.words(pos), width)

    def varint(self, pos: np.ndarray, words: np.ndarray | None = None,
                valid: int = 8) -> tuple[np.ndarray, np.ndarray]:
        """SQLite varints at ``pos``: values and lengths (1-9 bytes; bytes 1-8 carry 7 bits, the 9th 8).

        ``words``: the bytes at ``pos`` if already read, of which the first ``valid`` are.
        """
        words = self.words(pos) if words is None else words
        if len(words):  # most often every varint of a batch has one length: then no row is handled apart
            flags = (words >> 7) & 0x0101010101010101  # each byte's continuation bit, at the byte's bottom
            n = min(int(_leading_continued(int(flags[0]))) + 1, valid)
            if n < 8 and ((flags & _FLAG_MASK[n]) == _FLAG_PATTERN[n]).all():
                return _concat7(words) >> (7 * (8 - n)), np.full(len(words), n, np.int64)
        first = _byte(words, 0)
        value, length = first.copy(), np.ones(len(pos), np.int64)
        todo = np.flatnonzero(first >= 0x80)
        acc, words = first[todo] & 0x7F, words[todo]
        for k in range(1, 9):
            if not len(todo):
                break
            if k >= valid:  # the rest lies past the bytes at hand: read those varints again, whole
                again, again_length = (self.varint(pos[todo]) if valid < 8 else
                                       ((acc << 8) | _byte(self.words(pos[todo] + 8), 0), 9))
                value[todo], length[todo] = again, again_length
                break
            byte = _byte(words, k)
            acc = (acc << 7) | (byte & 0x7F)
            done = byte < 0x80
            value[todo[done]], length[todo[done]] = acc[done], k + 1
            todo, acc, words = todo[~done], acc[~done], words[~done]
        return value, length

    def serial_types(self, record: np.ndarray, count: int) -> tuple[list[np.ndarray], np.ndarray]:
        """The serial types of the first ``count`` columns of each record, and the header sizes."""
        # Usually the header size and every serial type are one byte each: read them from whole words.
        words = [self.words(record + 8 * q) for q in range((count + 8) // 8)]
        header, h = self.varint(record, words[0])
        serials: list[np.ndarray] = []
        if (h == 1).all():
            for j in range(count):
                serial = _byte(words[(j + 1) // 8], (j + 1) % 8)
                if (serial >= 0x80).any():
                    break
                serials.append(serial)
        if len(serials) < count:  # varints of any length, one column after another
            serials, pos = [], record + h
            for _ in range(count):
                serial, k = self.varint(pos)
                serials.append(serial)
                pos = pos + k
                if (pos > record + header).any():
                    raise Unsupported("a record without every column")
        elif (header < count + 1).any():  # the record ends before a column: written before it was added
            raise Unsupported("a record without every column")
        return serials, header


def _value(serial: np.ndarray, kinds: np.ndarray, word: np.ndarray, column: Column,
           rowid: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """One column's values from the words that start with them (``kinds``: rows per serial type)."""
    if kinds[10]:
        raise Unsupported("text or blob in a numeric column")
    ints = word >> SHIFT[serial]  # arithmetic: sign-extends each value from its own width
    if kinds[0] or kinds[8] or kinds[9]:  # NULL, 0 and 1 take no bytes
        ints = np.where(WIDTH[serial] == 0, serial == 9, ints)
    null = serial == 0 if kinds[0] else None
    if column.rowid_alias and null is not None:
        ints, null = np.where(null, rowid, ints), None
    if column.real:
        values = ints.astype(np.float64)
        if kinds[7]:
            floats = serial == 7
            values[floats] = word[floats].view(np.float64)
    elif kinds[7]:
        raise Unsupported("a float in an INTEGER column")
    else:
        values = ints
    return values, null


def _leading_continued(flags: int) -> int:
    """How many leading bytes of a word carry the continuation bit (``flags``: one bit per byte, at its bottom)."""
    count = 0
    while count < 8 and flags >> (56 - 8 * count) & 1:
        count += 1
    return count


# For varints of n bytes (n < 8): the continuation bits of their first n bytes, and what they must be.
_FLAG_MASK = [sum(1 << (56 - 8 * k) for k in range(n)) for n in range(9)]
_FLAG_PATTERN = [sum(1 << (56 - 8 * k) for k in range(n - 1)) for n in range(9)]


def _concat7(words: np.ndarray) -> np.ndarray:
    """The low 7 bits of a word's 8 bytes, concatenated (first byte most significant) into 56 bits."""
    x = words & 0x7F7F7F7F7F7F7F7F
    x = ((x & 0x7F007F007F007F00) >> 1) | (x & 0x007F007F007F007F)
    x = ((x & 0x3FFF00003FFF0000) >> 2) | (x & 0x00003FFF00003FFF)
    return ((x & 0x0FFFFFFF00000000) >> 4) | (x & 0x000000000FFFFFFF)


def _byte(words: np.ndarray, k: int) -> np.ndarray:
    """Byte ``k`` (0: the first in the file) of big-endian words."""
    return (words >> (56 - 8 * k)) & 0xFF


def _top(words: np.ndarray, width: int) -> np.ndarray:
    """The unsigned big-endian integer in the first ``width`` bytes of words."""
    return (words >> (64 - 8 * width)) & ((1 << (8 * width)) - 1) if width < 8 else words


def _spread(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For items counted per owner: each item's owner and its index within the owner."""
    owner = np.repeat(np.arange(len(counts)), counts)
    first = np.cumsum(counts) - counts
    return owner, np.arange(len(owner)) - first[owner]


_WITHOUT_ROWID = re.compile(r"WITHOUT\s+ROWID", re.IGNORECASE)  # also in a comment: then read through SQLite
_DESC_KEY = re.compile(r"PRIMARY\s+KEY\s+DESC", re.IGNORECASE)


def plan(sql: str, table_info: list[tuple], columns: list[str]) -> list[Column]:
    """How to decode ``columns`` of a table, from its CREATE statement and ``PRAGMA table_info`` rows."""
    if _WITHOUT_ROWID.search(sql or ""):
        raise Unsupported("a WITHOUT ROWID table")
    info = {row[1]: row for row in table_info}  # cid, name, type, notnull, default, pk
    keys = [row for row in table_info if row[5]]
    alias = keys[0][1] if len(keys) == 1 and (keys[0][2] or "").upper() == "INTEGER" \
        and not _DESC_KEY.search(sql or "") else None
    plan_: list[Column] = []
    for name in columns:
        if name not in info:
            raise Unsupported(f"no column {name}")
        declared = (info[name][2] or "").upper()
        if declared not in ("INTEGER", "REAL"):
            raise Unsupported(f"column {name} is {declared or 'untyped'}")
        plan_.append(Column(info[name][0], declared == "REAL", name == alias))
    return plan_


def scan(pages: PageFile, root: int, columns: list[Column],
         chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray | None]]]]:
    """Rowids and columns of the table at ``root``, a chunk of leaf pages at a time, in rowid order, on this thread
    (the readers' scan decodes chunks on several)."""
    leaves = pages.leaves(root)
    step = max(1, chunk_bytes // pages.page_size)
    for i in range(0, len(leaves), step):
        rowid, values = pages.decode(leaves[i:i + step], columns)
        if len(rowid):
            yield rowid, values
