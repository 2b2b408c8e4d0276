"""Launch context: the NVTX range a GPU activity was launched in, by one rule for ``attribute``, ``paper``, ``diff``
and ``report``.

A range opened on any thread of a process covers the activities that every thread of that process launches while it
is open (scope ``process``, the default): PyTorch launches the backward pass and DDP's all-reduces from autograd
threads, inside the ``step`` range that the training loop's thread holds. Scope ``thread`` keeps only the launching
thread's ranges. Among the ranges around a launch, the innermost (the latest to start) is its context. Only the
user's ranges count: those of the default NVTX domain and of the domains the user names; a library's domain (NCCL's
``ncclAllReduce``, CCCL's ``cub::DeviceRadixSort``...) never makes a step.

The rule is the view ``_launch_rule`` (``queries/_launch_rule.sql`` holds the defaults); :func:`set_rule` replaces it
on a connection before the analysis views are computed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import duckdb

from .errors import UsageError

SCOPES = ("process", "thread")
# the column of nvtx and runtime_api that a scope matches ranges and launches on
SCOPE_KEYS = {"process": "global_pid", "thread": "global_tid"}
# the condition on nvtx that keeps the user's ranges
USER_RANGES = "(domain IS NULL OR list_contains((SELECT domains FROM _launch_rule), domain))"


@dataclass(frozen=True)
class Rule:
    """A launch rule: ``scope`` (process or thread) and the NVTX ``domains`` whose ranges are the user's besides the
    default domain's."""

    scope: str = "process"
    domains: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise UsageError(f"unknown NVTX scope {self.scope!r}: use one of {', '.join(SCOPES)}")

    def apply(self, con: duckdb.DuckDBPyConnection) -> None:
        set_rule(con, self.scope, self.domains)


DEFAULT = Rule()


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def set_rule(con: duckdb.DuckDBPyConnection, scope: str = "process", domains: Sequence[str] = ()) -> None:
    """Make ``con``'s launch context follow ``scope`` (process or thread) and count the ranges of ``domains`` (NVTX
    domain names) as the user's, besides the default domain's."""
    if scope not in SCOPES:
        raise UsageError(f"unknown NVTX scope {scope!r}: use one of {', '.join(SCOPES)}")
    names = ", ".join(_literal(str(d)) for d in dict.fromkeys(domains))
    con.execute(f"CREATE OR REPLACE VIEW _launch_rule AS SELECT {_literal(scope)} AS scope, "
                f"[{names}]::VARCHAR[] AS domains")


def rule(con: duckdb.DuckDBPyConnection) -> tuple[str, list[str]]:
    """The scope and the user's named domains that ``con`` follows."""
    [(scope, domains)] = con.sql("SELECT scope, domains FROM _launch_rule").fetchall()
    return scope, list(domains)


def rule_sql(con: duckdb.DuckDBPyConnection) -> tuple[str, str]:
    """The column that ranges and launches are matched on under ``con``'s rule, and the condition (on ``nvtx``) that
    keeps the user's ranges."""
    return SCOPE_KEYS[rule(con)[0]], USER_RANGES
