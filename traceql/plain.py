"""Text from traces printed as it is: kernel names (C++ names carry brackets), NVTX texts, labels and paths reach the
terminal as plain text, never as rich markup nor as terminal control sequences.

rich reads ``[bold red]`` in a string as a style (the text vanishes into it) and fails on ``[/x]``, a closing tag
that closes nothing; a terminal obeys the escape sequences in what it is sent (ANSI colours, OSC window titles and
links, cursor moves). :func:`plain` escapes every control character (ESC prints as the four characters ``\\x1b``, a
newline as ``\\n``), the line and paragraph separators, and the bidirectional controls that reorder what is shown;
:func:`cell` hands the result to rich as a ``Text``, which rich never parses for markup. Every table printer
(``sql``, ``attribute``, ``overlap``, ``diff``, ``paper``) goes through them; data formats (CSV, JSON, Parquet)
keep values exactly.
"""

from __future__ import annotations

import unicodedata

# bidirectional embeddings, overrides and isolates, and the marks: they reorder or hide what follows them
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def plain(value: object) -> str:
    """``value`` as text a terminal shows as it is: control characters (and line separators, bidirectional
    controls) escaped as Python writes them in a string (``\\x1b``, ``\\n``, ``\\u202e``); everything else kept."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():  # no control character at all: the common case
        return text
    return "".join(_escaped(c) for c in text)


def _escaped(c: str) -> str:
    if not (unicodedata.category(c) in ("Cc", "Zl", "Zp") or c in _BIDI):
        return c
    if c in _NAMED:
        return _NAMED[c]
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def cell(value: object):
    """``value`` as a rich ``Text`` of :func:`plain` text: a table cell, a column header or a printed line that rich
    never reads as markup (nor as emoji codes)."""
    from rich.text import Text

    return Text(plain(value))


TABLE_WIDTH = 100  # the width of tables written to a file or a pipe (a terminal's own width otherwise)


def table_width() -> int:
    """Columns for a table: the terminal's own (at least 60) on a terminal, else ``COLUMNS`` if set, else
    ``TABLE_WIDTH``; rich wraps cells that do not fit (names are never cut)."""
    import os
    import shutil
    import sys

    if sys.stdout.isatty():
        return max(shutil.get_terminal_size((TABLE_WIDTH, 40)).columns, 60)
    columns = os.environ.get("COLUMNS", "")
    return max(int(columns), 60) if columns.isdigit() else TABLE_WIDTH


def ms(ns: float | None) -> str:
    """A duration in milliseconds, with the decimals a short one needs (one unit per column: never 'us')."""
    if ns is None:
        return "-"
    v = ns / 1e6
    return f"{v:.3f}" if abs(v) >= 0.01 or v == 0 else f"{v:.4f}" if abs(v) >= 0.001 else f"{v:.6f}"


def run_names(runs: list[dict]) -> dict[str, str]:
    """One name per run for tables: the name it was collected under (``traceql collect --name``, its ``name``
    label), else its trace's file name; the run id's first 8 characters after it where two runs share a name (JSON
    and CSV keep the whole id)."""
    base = {r["run_id"]: r.get("name") or (r.get("source_path") or r["run_id"]).rstrip("/").rsplit("/", 1)[-1]
            for r in runs}
    return {rid: b if list(base.values()).count(b) == 1 else f"{b} ({rid[:8]})" for rid, b in base.items()}
