"""Errors and exit codes, mapped in one place.

Exit codes: 0 ok; 1 the analysis found what it was asked to flag (a gate); 2 bad usage or bad
input (a file that is not an export, a missing table, an unknown schema version, no nsys); 130 Ctrl-C; 143 SIGTERM.
Every library error subclasses :class:`TraceqlError` and the builtin it resembles, so callers
can catch either.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FLAGGED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT: Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM


class TraceqlError(Exception):
    """Base of every error traceql raises on purpose; ``exit_code`` is what the CLI returns."""

    exit_code = EXIT_BAD_INPUT


class BadInputError(TraceqlError, ValueError):
    """An input file or directory is not what it should be; the message names it and the next step."""


class MissingInputError(TraceqlError, FileNotFoundError):
    """An input path does not exist."""


class NsysNotFoundError(TraceqlError, FileNotFoundError):
    """No Nsight Systems executable was found for a step that needs one."""


class SchemaVersionError(BadInputError):
    """A run store or export carries a schema version this traceql does not know."""


class UsageError(TraceqlError, ValueError):
    """Contradictory or invalid options."""


ON_ERROR = ("raise", "skip")


def check_on_error(on_error: str) -> None:
    """``on_error`` of the commands that take many inputs: ``raise`` stops at a bad one, ``skip`` goes on."""
    if on_error not in ON_ERROR:
        raise UsageError(f"on_error {on_error!r}: choose raise or skip")


class WorkerLostError(TraceqlError, RuntimeError):
    """The worker running one unit of work (a rank file, a run) died and the unit could not be finished elsewhere."""


class Interrupted(TraceqlError):
    """The user pressed Ctrl-C; the work stopped and left nothing half-written."""

    exit_code = EXIT_INTERRUPTED


class Terminated(BaseException):
    """The process was sent SIGTERM; the work stops as it does on Ctrl-C. Like KeyboardInterrupt, not an error: no
    handler of errors (a unit's, a batch's failure policy) takes it for one."""

    exit_code = EXIT_TERMINATED
