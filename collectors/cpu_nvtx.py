"""CPU-only NVTX workload: nested push/pop ranges and marks on two threads, no GPU.

Used to produce small, real Nsight Systems test exports (see tests/data/nsys2022/README.md)::

    nsys profile -t nvtx,osrt -s none --cpuctxsw=none -o OUT python3 collectors/cpu_nvtx.py

Per thread and step: an outer range ``case:cpu_demo;step=N;thread=T`` containing an inner
``forward`` range, plus a mark ``mark:step=N;thread=T``. Thread 0 also emits one range whose
text is ``<script>alert(1)</script> & co`` (for HTML-escaping tests). Every range uses the
default NVTX domain. Runs about 0.5 s in total (0.15 s of ranges, then a 0.3 s linger).
Worker OS threads are named ``cpu_nvtx_0`` / ``cpu_nvtx_1``.

Options for testing ``traceql collect`` (the defaults change nothing above):
``--exit-code N`` exits with N after the ranges; ``--hold S`` stays alive S seconds after them
(to be cut short by ``--timeout`` or Ctrl-C); ``--child-pidfile PATH`` starts a child that
ignores SIGINT and SIGTERM and sleeps (so it would outlive the program), and once the ranges
are done writes ``PROGRAM_PID CHILD_PID`` to PATH.

Compatibility note: recent ``nvtx`` wheels (seen with 0.2.17) ask the attached tool
``nvtxDomainIsEnabled``; Nsight Systems 2022.4 answers "disabled", so ``nvtx.get_domain()``
hands back a no-op ``DummyDomain`` and the report holds no ranges at all (compare
NVIDIA/NVTX#126). When a tool is injected (``NVTX_INJECTION64_PATH`` set) but the domain
looks disabled, we build a real ``nvtx`` Domain without that check and call
push_range/pop_range/mark on it, which records fine in 2022.4.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import threading
import time

import nvtx

STEPS = 3
THREADS = 2
STEP_S = 0.03  # per step: 0.5*STEP_S outer + STEP_S inner busy time (~0.15 s of ranges per thread)
# nsys 2022.4 (with -s none --cpuctxsw=none) seems to learn thread names from a periodic scan;
# threads that exit too soon get no ThreadNames row. Keep the workers alive a little longer.
LINGER_S = 0.3
ESCAPE_TEXT = "<script>alert(1)</script> & co"
CHILD_SRC = ("import signal, time\n"
             "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
             "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
             "time.sleep(600)\n")


def _default_domain():
    """The default NVTX domain as an ``nvtx`` Domain object (see the module docstring)."""
    domain = nvtx.get_domain(None)
    tool_attached = bool(os.environ.get("NVTX_INJECTION64_PATH"))
    if tool_attached and isinstance(domain, nvtx._lib.lib.DummyDomain):
        from nvtx._lib.lib import Domain, DomainHandle

        domain = object.__new__(Domain)
        domain.handle = DomainHandle(None)  # NULL handle = default domain
        Domain.__init__(domain, None)
    return domain


NVTX = _default_domain()


def _busy(seconds: float) -> None:
    """Burn CPU (not sleep) so the ranges cover real on-CPU time."""
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


def _set_os_thread_name(name: str) -> None:
    """Give the OS thread a name (Linux prctl PR_SET_NAME) so it shows in ThreadNames."""
    try:
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)
    except (AttributeError, OSError):
        pass


def worker(thread_idx: int, barrier: threading.Barrier) -> None:
    _set_os_thread_name(f"cpu_nvtx_{thread_idx}")
    barrier.wait()
    for step in range(STEPS):
        NVTX.push_range(message=f"case:cpu_demo;step={step};thread={thread_idx}")
        _busy(STEP_S / 2)
        NVTX.push_range(message="forward")
        _busy(STEP_S)
        NVTX.pop_range()
        NVTX.mark(message=f"mark:step={step};thread={thread_idx}")
        NVTX.pop_range()
    if thread_idx == 0:
        NVTX.push_range(message=ESCAPE_TEXT)
        _busy(0.01)
        NVTX.pop_range()
    time.sleep(LINGER_S)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exit-code", type=int, default=0, help="exit with this code after the ranges")
    p.add_argument("--hold", type=float, default=0.0, help="seconds to stay alive after the ranges")
    p.add_argument("--child-pidfile", help="start a child that ignores SIGINT/SIGTERM; write both pids here")
    args = p.parse_args(argv)
    child = subprocess.Popen([sys.executable, "-c", CHILD_SRC]) if args.child_pidfile else None
    barrier = threading.Barrier(THREADS)
    threads = [
        threading.Thread(target=worker, args=(i, barrier), name=f"cpu_nvtx_{i}")
        for i in range(THREADS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if args.child_pidfile:
        tmp = f"{args.child_pidfile}.tmp"
        with open(tmp, "w") as f:
            f.write(f"{os.getpid()} {child.pid}\n")
        os.replace(tmp, args.child_pidfile)  # readers never see half a file
    time.sleep(args.hold)
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
