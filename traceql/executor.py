"""Where per-run work runs: in this process, in local worker processes, or on a Dask cluster.

One run (one rank file) is the unit of work of ``ingest``, ``attribute`` and ``report``; an executor runs one call per
unit and hands each outcome back as it completes, so the caller can show progress and apply its failure policy.

``local``                this process, one unit after another (the default)
``local:N``              N worker processes on this host
``dask://HOST:PORT``     the workers of a running ``dask.distributed`` scheduler (``pip install 'traceql[dask]'``);
                         ``tcp://``, ``tls://`` and ``ucx://`` addresses are taken as they are

A unit that fails with a traceql error (bad input) comes back as that error, never retried: it would fail again.
A worker that dies (killed, out of memory) is different: Dask runs its unit again on another worker, up to the
scheduler's ``distributed.scheduler.allowed-failures`` (3 by default); a unit that still cannot finish, or whose
local worker process died, comes back as :class:`WorkerLostError`. Workers write only their unit's own files (see
:mod:`traceql.store`), so nothing a lost worker started is ever read as a result.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from . import stopping
from .errors import TraceqlError, UsageError, WorkerLostError
from .version import __version__

DASK_SCHEMES = ("dask://", "tcp://", "tls://", "ucx://", "inproc://")
CONNECT_TIMEOUT_S = 30


@dataclass(frozen=True)
class Executor:
    """A parsed ``--executor``: ``kind`` is local or dask; ``workers`` the local processes; ``address`` Dask's."""

    kind: str = "local"
    workers: int = 1
    address: str | None = None

    @property
    def distributed(self) -> bool:
        """Whether the units run on other hosts, which see only paths that all of them share."""
        return self.kind == "dask"

    def __str__(self) -> str:
        return f"dask://{self.address.split('://', 1)[-1]}" if self.kind == "dask" else \
            ("local" if self.workers == 1 else f"local:{self.workers}")


def parse(spec: str | Executor | None, jobs: int = 1) -> Executor:
    """``--executor`` as given (None: ``local``, or ``local:JOBS`` for the older ``-j JOBS``)."""
    if isinstance(spec, Executor):
        return spec
    if spec is None or spec == "":
        return Executor("local", max(1, jobs))
    if spec.startswith(DASK_SCHEMES):
        address = "tcp://" + spec.removeprefix("dask://") if spec.startswith("dask://") else spec
        if address.endswith("://"):
            raise UsageError(f"--executor {spec}: give the scheduler's address, e.g. dask://scheduler-host:8786")
        return Executor("dask", 0, address)
    kind, sep, n = spec.partition(":")
    if kind == "local":
        if not sep:
            return Executor("local", max(1, jobs))
        if n == "auto":
            return Executor("local", len(os.sched_getaffinity(0)))
        if n.isdigit() and int(n) >= 1:
            return Executor("local", int(n))
    raise UsageError(f"--executor {spec!r}: choose local, local:N (N worker processes), local:auto or "
                     "dask://HOST:PORT (a running dask.distributed scheduler)")


Outcome = Any  # the unit's return value, or the TraceqlError it raised


def run_units(executor: Executor, fn: Callable[..., Any], calls: Sequence[tuple], names: Sequence[str]) \
        -> Iterator[tuple[int, Outcome]]:
    """Call ``fn(*calls[i])`` for every unit; yield ``(i, outcome)`` as units complete.

    ``names[i]`` names the unit in errors (the rank file, the run). Errors other than traceql's (bugs) are raised.
    Stopping the iteration (the caller's failure policy) cancels what has not started.
    """
    if not calls:
        return
    if executor.kind == "dask":
        yield from _dask(executor, fn, calls, names)
    elif executor.workers <= 1 or len(calls) == 1:
        for i, args in enumerate(calls):
            try:
                yield i, fn(*args)
            except TraceqlError as exc:
                yield i, exc
    else:
        yield from _pool(executor, fn, calls, names)


def _pool(executor: Executor, fn, calls, names) -> Iterator[tuple[int, Outcome]]:
    # the workers die with this process however it ends, and are ended when its work is stopped (traceql.stopping)
    pool = stopping.track_pool(ProcessPoolExecutor(max_workers=min(executor.workers, len(calls)),
                                                   initializer=stopping.worker_init, initargs=(os.getpid(),)))
    try:
        futures = {pool.submit(stopping.call, fn, *args): i for i, args in enumerate(calls)}
        for fut in as_completed(futures):
            i = futures[fut]
            try:
                yield i, fut.result()
            except TraceqlError as exc:
                yield i, exc
            except (BrokenProcessPool, SystemExit):  # SystemExit: a worker sent SIGTERM by someone else
                yield i, WorkerLostError(f"{names[i]}: a worker process died while this ran (killed, or out of "
                                         "memory?); run it again, with fewer local workers if memory is short")
    except GeneratorExit:  # the caller stopped early (its failure policy): the units started finish
        raise
    except BaseException:  # Ctrl-C, SIGTERM, an error: the units started stop too
        stopping.end_workers(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@dataclass
class _Failed:
    """A unit's traceql error, returned rather than raised: the unit is done, and the worker logs no failure."""

    error: TraceqlError


def _checked(version: str, fn, *args):
    """Run on a Dask worker: refuse to work with another traceql than the client's (results would differ)."""
    if version != __version__:
        return _Failed(UsageError(f"the Dask worker has traceql {__version__}, the client {version}: install the "
                                  "same traceql on the workers"))
    try:
        return fn(*args)
    except TraceqlError as exc:
        return _Failed(exc)


def dask_client(address: str):
    """A client of the scheduler at ``address``; a clear error when Dask is missing or the scheduler unreachable."""
    try:
        from distributed import Client
    except ImportError:
        raise UsageError("--executor dask://...: dask.distributed is not installed; pip install 'traceql[dask]' "
                         "here and on the workers") from None
    try:
        return Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise UsageError(f"--executor {address}: cannot reach the Dask scheduler ({exc}); start one with "
                         "`dask scheduler` and workers with `dask worker ADDRESS`") from None


def _dask(executor: Executor, fn, calls, names) -> Iterator[tuple[int, Outcome]]:
    from distributed import as_completed as dask_completed
    from distributed.client import FutureCancelledError
    from distributed.scheduler import KilledWorker

    client = dask_client(executor.address)
    futures = {}
    try:
        # pure=False: each call is its own unit even with equal arguments; no retries: a bad input fails again
        for i, args in enumerate(calls):
            futures[client.submit(_checked, __version__, fn, *args, pure=False, retries=0)] = i
        for fut in dask_completed(list(futures), loop=client.loop):
            i = futures[fut]
            try:
                result = fut.result()
                yield i, result.error if isinstance(result, _Failed) else result
            except (KilledWorker, FutureCancelledError) as exc:
                yield i, WorkerLostError(f"{names[i]}: the Dask workers running it died, also when it was run again "
                                         f"({type(exc).__name__}); a unit that kills its worker is likely out of "
                                         "memory: give the workers more")
    finally:
        pending = [f for f in futures if not f.done()]
        if pending:
            client.cancel(pending)
        client.close()
