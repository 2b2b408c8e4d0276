"""Stopping a command: Ctrl-C and SIGTERM end it within moments, with one line, and no process outlives it.

DuckDB holds Ctrl-C while a statement runs and then reports it as an error of its own ("Query interrupted"), or as
a KeyboardInterrupt wrapped in another error, wherever the statement happened to be. So the work of a command that
queries runs in a thread of its own (:func:`run`): the main thread, which alone receives signals, waits; on Ctrl-C
(or SIGTERM, see :func:`on_sigterm`) it interrupts every DuckDB connection still open (:func:`track`), ends the
worker processes (:func:`track_pool`), and raises :class:`~traceql.errors.Interrupted` (exit code 130; 143 for
SIGTERM) once the work has stopped, or after ``STOP_WAIT_S`` whatever it does.

Worker processes of a local pool (:mod:`traceql.executor`) are set up by :func:`worker_init`: Ctrl-C, which reaches
the whole process group, is their parent's to handle; SIGTERM stops the unit they run (its clean-up runs) and ends
them; and they die with their parent however it ends, killed too: on Linux the kernel sends them SIGTERM when it
dies (``PR_SET_PDEATHSIG``), and everywhere a watchdog thread ends a worker whose parent is gone.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

from .errors import EXIT_TERMINATED, Interrupted, Terminated

T = TypeVar("T")

STOP_WAIT_S = 5.0  # after Ctrl-C, how long the work gets to stop before the command exits anyway
WATCH_S = 0.2  # how often a worker looks whether its parent is still there
GRACE_S = 2.0  # how long a worker whose parent is gone, or a stopped worker, gets to clean up before it is ended

_connections: weakref.WeakSet = weakref.WeakSet()  # DuckDB connections to interrupt
_pools: weakref.WeakSet = weakref.WeakSet()  # process pools whose workers to end


def track(con: Any) -> Any:
    """``con`` (a DuckDB connection), interrupted when the command is stopped; returned as it is."""
    _connections.add(con)
    return con


def track_pool(pool: Any) -> Any:
    """``pool`` (a ``ProcessPoolExecutor``), whose workers are ended when the command is stopped; returned as is."""
    _pools.add(pool)
    return pool


def run(work: Callable[[], T], what: str) -> T:
    """``work()``, in a thread of its own so that Ctrl-C stops it within moments: :class:`Interrupted` with the
    message 'interrupted; WHAT' (``what`` says what was kept or not written). Called off the main thread (which alone
    receives signals), ``work`` just runs."""
    if threading.current_thread() is not threading.main_thread():
        return work()
    done: Future = Future()

    def target() -> None:
        try:
            done.set_result(work())
        except BaseException as exc:  # handed to the waiting thread  # noqa: BLE001
            done.set_exception(exc)

    threading.Thread(target=target, name="traceql-work", daemon=True).start()
    try:
        while True:
            try:
                return done.result(timeout=0.2)
            except TimeoutError:
                continue
    except (KeyboardInterrupt, Terminated) as exc:
        stop(done)
        if isinstance(exc, Terminated):
            raise
        raise Interrupted(f"interrupted; {what}") from None


def stop(done: Future | None = None) -> None:
    """Interrupt every open DuckDB connection and end every pool's workers; wait until ``done`` (the work) is, at most
    ``STOP_WAIT_S``."""
    import duckdb

    end_pools()
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline:
        for con in list(_connections):  # again and again: the work may go on to its next statement
            with contextlib.suppress(duckdb.Error, RuntimeError):
                con.interrupt()
        if done is None or done.done():
            return
        with contextlib.suppress(Exception):  # a timeout, or the interrupted work's error
            done.result(timeout=0.1)


def end_pools(grace: float = GRACE_S) -> None:
    """End the workers of every tracked pool: SIGTERM (each stops its unit, cleaning up), then SIGKILL for those still
    there after ``grace`` seconds."""
    for pool in list(_pools):
        end_workers(pool, grace)


def end_workers(pool: Any, grace: float = GRACE_S) -> None:
    """End ``pool``'s worker processes as :func:`end_pools` does."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for p in procs:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            p.terminate()
    deadline = time.monotonic() + grace
    for p in procs:
        with contextlib.suppress(OSError, ValueError, AssertionError, AttributeError):
            p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            if p.is_alive():
                p.kill()


@contextlib.contextmanager
def on_sigterm() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` in the main thread while the block (a command) runs: Python's default would
    end the process at once, leaving temporary files and worker processes behind. Once the command is done, Ctrl-C
    no longer interrupts the interpreter's exit (:func:`_exiting`). Off the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum, frame) -> None:
        raise Terminated("terminated (SIGTERM); what was complete is kept, nothing is half-written")

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if not _exiting.registered:
            atexit.register(_exiting)  # after the command's own exit handlers, so it runs before them
            _exiting.registered = True


def _exiting() -> None:
    """At the process's exit, after a command: Ctrl-C is ignored. Its work is done and its output written; a
    KeyboardInterrupt now would only break Python's exit (a signal death and no message, or a traceback from an exit
    handler)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


_exiting.registered = False


# -- in a worker process ----------------------------------------------------------------------------------------------

PR_SET_PDEATHSIG = 1  # linux/prctl.h
_stopping = threading.Event()  # this worker was told to stop


class _Stop(SystemExit):
    """Raised in a worker told to stop: a unit's clean-up runs, and an idle worker exits quietly."""


def worker_init(parent: int) -> None:
    """The initializer of a pool's worker processes; ``parent`` is the pool's process id."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop_worker)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the kernel was told
        os._exit(1)
    threading.Thread(target=_watch, args=(parent,), name="traceql-parent-watch", daemon=True).start()


def call(fn: Callable[..., T], *args) -> T:
    """``fn(*args)`` in a worker; a worker told to stop (SIGTERM, or its parent gone) exits once the unit's clean-up
    has run, without handing back a result nobody waits for."""
    try:
        return fn(*args)
    except BaseException:
        if _stopping.is_set():  # whatever error the stop became (DuckDB reports its own)
            os._exit(EXIT_TERMINATED)
        raise


def _stop_worker(signum, frame) -> None:
    _stopping.set()
    raise _Stop(EXIT_TERMINATED)


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_S)
    with contextlib.suppress(OSError):
        os.kill(os.getpid(), signal.SIGTERM)  # stop the unit, cleaning up
    time.sleep(GRACE_S)
    os._exit(EXIT_TERMINATED)
