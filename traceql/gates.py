"""Gates: a small expression language over the columns of a diff's per-device summary, for CI.

    compute_slowdown < 0.15                      B's compute slowdown on every device below 15%
    exposed_comm_ms.delta < 5                    exposed communication grew by less than 5 ms
    step_ms.rel <= 2% and energy_j.rel <= 5%     both
    step_ms.lo < 0 or step_ms.b < 100            ``and`` binds tighter than ``or``

Grammar (no parentheses, no arithmetic, nothing evaluated as Python)::

    gate       := clause (("and" | "or") clause)*
    clause     := column ["." part] operator number
    part       := a | b | delta | rel | lo | hi
    operator   := < | <= | > | >= | == | !=
    number     := [+-]digits[.digits][e[+-]digits][%]      (15% is 0.15)

A column measured on both sides (``step_ms``) is its value in B unless a part is named: ``a``, ``b``, ``delta``
(b - a), ``rel`` (b / a - 1), and ``lo``/``hi``, the 95% interval of ``delta`` (run-to-run noise included). A column
of the diff itself (``slower_signatures``) has one value and no parts. A gate holds when it holds on every device;
a device where a column has no value (NULL) neither holds nor violates it (three-valued logic, as in SQL).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import UsageError

PARTS = ("a", "b", "delta", "rel", "lo", "hi")
OPERATORS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
             "!=": operator.ne}
_TOKEN = re.compile(r"""\s*(?:
    (?P<number>[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?%?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)
  | (?P<op><=|>=|==|!=|<|>)
  | (?P<bad>\S+))""", re.VERBOSE)


class GateError(UsageError):
    """A gate that cannot be parsed, or names a column the summary does not have."""


@dataclass(frozen=True)
class Clause:
    column: str
    part: str | None  # b when none is named on a column measured on both sides; None on a column of the diff
    op: str
    value: float

    @property
    def key(self) -> str:
        """The summary column this clause reads."""
        return f"{self.column}_{self.part}" if self.part else self.column

    @property
    def text(self) -> str:
        return f"{self.column}{'.' + self.part if self.part else ''} {self.op} {self.value:g}"


@dataclass(frozen=True)
class Gate:
    text: str
    any_of: tuple[tuple[Clause, ...], ...]  # OR of ANDs


@dataclass(frozen=True)
class Violation:
    gate: str
    device: str
    values: dict[str, float | None]  # the clause values on that device

    def describe(self) -> str:
        shown = ", ".join(f"{k} = {_show(v)}" for k, v in self.values.items())
        return f"gate '{self.gate}' violated on {self.device} ({shown})"


def _show(v: float | None) -> str:
    return "NULL" if v is None else f"{v:.6g}"


def parse(text: str, columns: Mapping[str, bool]) -> Gate:
    """Parse ``text``; ``columns`` maps each column name to whether it is measured on both sides (has parts)."""
    tokens = _tokens(text)
    groups: list[list[Clause]] = [[]]
    pos = 0
    while True:
        clause, pos = _clause(text, tokens, pos, columns)
        groups[-1].append(clause)
        if pos == len(tokens):
            break
        kind, word, at = tokens[pos]
        if kind != "name" or word.lower() not in ("and", "or"):
            raise _error(text, at, f"expected 'and', 'or' or the end, found {word!r}")
        if word.lower() == "or":
            groups.append([])
        pos += 1
        if pos == len(tokens):
            raise _error(text, len(text), f"a clause must follow {word!r}")
    return Gate(text.strip(), tuple(tuple(g) for g in groups))


def _tokens(text: str) -> list[tuple[str, str, int]]:
    out = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind is None:
            continue
        if kind == "bad":
            raise _error(text, m.start(kind), f"unexpected {m.group(kind)!r}")
        out.append((kind, m.group(kind), m.start(kind)))
    if not out:
        raise GateError("empty gate: write COLUMN[.PART] OPERATOR NUMBER, e.g. 'exposed_comm_ms.delta < 5'")
    return out


def _clause(text: str, tokens: list, pos: int, columns: Mapping[str, bool]) -> tuple[Clause, int]:
    want = ("name", "op", "number")
    got = tokens[pos:pos + 3]
    for i, kind in enumerate(want):
        if i >= len(got):
            raise _error(text, len(text), f"incomplete clause: expected {_WHAT[kind]} at the end")
        if got[i][0] != kind:
            raise _error(text, got[i][2], f"expected {_WHAT[kind]}, found {got[i][1]!r}")
    (_, ref, at), (_, op, _), (_, number, _) = got
    column, _, part = ref.partition(".")
    if column not in columns:
        raise _error(text, at, f"unknown column {column!r}; columns: {', '.join(sorted(columns))}")
    if part:
        if not columns[column]:
            raise _error(text, at, f"{column} has one value per device (it belongs to the diff): no .{part}")
        if part not in PARTS:
            raise _error(text, at, f"unknown part .{part}; parts: {', '.join('.' + p for p in PARTS)}")
    value = float(number.rstrip("%")) / (100 if number.endswith("%") else 1)
    return Clause(column, part or ("b" if columns[column] else None), op, value), pos + 3


_WHAT = {"name": "a column (e.g. step_ms.delta)", "op": "an operator (< <= > >= == !=)", "number": "a number"}


def _error(text: str, at: int, msg: str) -> GateError:
    return GateError(f"gate {text.strip()!r}: {msg}\n  {text}\n  {' ' * at}^")


def holds(gate: Gate, row: Mapping[str, float | None]) -> bool | None:
    """Whether ``gate`` holds on one summary row: True, False, or None when a value it needs is NULL."""
    result: bool | None = False
    for clauses in gate.any_of:
        conj: bool | None = True
        for c in clauses:
            v = row.get(c.key)
            ok = None if v is None else OPERATORS[c.op](float(v), c.value)
            conj = False if (conj is False or ok is False) else (None if (conj is None or ok is None) else True)
        result = True if (result is True or conj is True) else (None if (result is None or conj is None) else False)
    return result


def check(gates: list[Gate], rows: list[Mapping], device_of) -> tuple[list[Violation], list[str]]:
    """Violations of ``gates`` over ``rows`` (one per device; ``device_of(row)`` names it), and notes on gates that
    could not be evaluated on some device. A gate no device has the values for is an error: it would never fail."""
    violations, notes = [], []
    for g in gates:
        unknown = []
        for row in rows:
            ok = holds(g, row)
            values = {c.text.rsplit(" ", 2)[0]: row.get(c.key) for cl in g.any_of for c in cl}
            if ok is False:
                violations.append(Violation(g.text, device_of(row), values))
            elif ok is None:
                unknown.append(device_of(row))
        if rows and len(unknown) == len(rows):
            raise GateError(f"gate '{g.text}': no device has a value for it (NULL on {', '.join(unknown)}); gate on a "
                            "column these runs measure")
        if unknown:
            notes.append(f"gate '{g.text}' could not be evaluated on {', '.join(unknown)}: a value it reads is NULL")
    return violations, notes
