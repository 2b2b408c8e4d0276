"""Run a profiler around a program so that nothing it started outlives traceql.

Ending the profiler's process group is not enough: nsys starts the program in a session of its
own (its launcher calls ``setsid``), and a child that ignores SIGINT and SIGTERM outlives both.
:class:`ProcessTree` watches ``/proc`` for the descendants of the process it started and remembers
their process groups, split into the profiler's own processes (executables inside an
``nsight-systems*`` / ``nsight-compute*`` folder) and the program's. Ending a run stops the
program first, so that the profiler can still write its report, then whatever is left.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SCAN_EVERY_S = 0.5
PROGRAM_GRACE_S = 10.0  # after SIGINT, then after SIGTERM, before the next signal to the program
REPORT_GRACE_S = 300.0  # for the profiler to write its report once the program is gone
LEFTOVER_GRACE_S = 3.0
PROGRESS_LINE = re.compile(r"^\[\d+/\d+\] \[")  # nsys' progress bars: one line per redraw
TOOL_DIRS = ("nsight-systems", "nsight-compute")
TOOL_NAMES = ("nsys", "ncu", "Qdstrm", "QdstrmImporter")


@dataclass
class Outcome:
    """How a profiled run ended: exit code, the output's last lines, why it was ended, what was cleaned up."""

    returncode: int
    tail: str
    ended_by: str | None = None  # None, "timeout" or "interrupt"
    leftovers: list[int] = field(default_factory=list)  # pids ended after the profiler exited


def _proc_table() -> dict[int, tuple[int, int, int, str]]:
    """pid -> (ppid, pgid, start time in clock ticks, state) for every process we can read."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2:].split()  # the command name in parentheses may hold spaces
        table[int(entry.name)] = (int(rest[1]), int(rest[2]), int(rest[19]), rest[0])
    return table


def _is_tool(pid: int) -> bool:
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        try:
            return Path(f"/proc/{pid}/comm").read_text().strip().startswith(TOOL_NAMES)
        except OSError:
            return False
    return any(part.lower().startswith(TOOL_DIRS) for part in Path(exe).parts)


class ProcessTree:
    """The processes started from ``root``: their process groups, whether they ran the tool or the program."""

    def __init__(self, root: int):
        self.root = root
        self.enabled = os.path.isdir("/proc")
        table = _proc_table() if self.enabled else {}
        self.since = table[root][2] if root in table else 0
        self.tool_groups: set[int] = {root}  # the profiler runs as leader of its own session
        self.program_groups: set[int] = set()
        self.program_pids: set[int] = set()  # program processes inside the tool's group, if any

    def scan(self) -> None:
        if not self.enabled:
            return
        table = _proc_table()
        children: dict[int, list[int]] = {}
        for pid, (ppid, *_rest) in table.items():
            children.setdefault(ppid, []).append(pid)
        todo = list(children.get(self.root, []))
        while todo:
            pid = todo.pop()
            todo.extend(children.get(pid, []))
            pgid = table[pid][1]
            if _is_tool(pid):
                self.tool_groups.add(pgid)
            elif pgid in self.tool_groups:
                self.program_pids.add(pid)
            else:
                self.program_groups.add(pgid)

    def adopt_agents(self) -> None:
        """nsys' agent daemonizes out of the tree; it names its session after the nsys that started it."""
        if not self.enabled:
            return
        tag = f"-{self.root}".encode()
        for pid, (_, pgid, start, state) in _proc_table().items():
            if start < self.since or state == "Z":
                continue
            try:
                args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(a.startswith(b"--session-name=") and a.endswith(tag) for a in args) and _is_tool(pid):
                self.tool_groups.add(pgid)

    def live(self, which: str = "all") -> list[int]:
        """Live (not zombie) processes, started after the root, in the program's groups or in all groups."""
        if not self.enabled:
            return []
        groups = self.program_groups if which == "program" else self.program_groups | self.tool_groups
        me = os.getpid()
        return sorted(pid for pid, (_, pgid, start, state) in _proc_table().items()
                      if pid != me and state != "Z" and start >= self.since
                      and (pgid in groups or (which == "program" and pid in self.program_pids)))

    def signal(self, which: str, sig: int) -> None:
        groups = self.program_groups if which == "program" else self.program_groups | self.tool_groups
        targets = [(os.killpg, g) for g in groups] + [(os.kill, p) for p in self.program_pids]
        for send, target in targets:
            if target == os.getpgid(0):  # never our own group (when run without a new session)
                continue
            try:
                send(target, sig)
            except (ProcessLookupError, PermissionError):
                pass


def _wait_for(done: Callable[[], bool], seconds: float, tree: ProcessTree) -> bool:
    """Poll ``done`` for up to ``seconds``; a Ctrl-C cuts the wait short (the caller escalates)."""
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            if done():
                return True
            tree.scan()
            time.sleep(0.1)
    except KeyboardInterrupt:
        pass
    return done()


def _stop(proc: subprocess.Popen, tree: ProcessTree, log: Callable[[str], None]) -> None:
    """SIGINT to the profiler (it forwards it and writes its report); then SIGTERM, SIGKILL to the program."""
    tree.scan()
    try:
        os.killpg(proc.pid, signal.SIGINT)
    except ProcessLookupError:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if _wait_for(lambda: proc.poll() is not None or not tree.live("program"), PROGRAM_GRACE_S, tree):
            break
        log(f"traceql: the program still runs; sending it {sig.name}")
        tree.signal("program", sig)
    if _wait_for(lambda: proc.poll() is not None, REPORT_GRACE_S, tree):
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        log(f"traceql: the profiler did not finish; sending it {sig.name}")
        tree.signal("all", sig)
        if _wait_for(lambda: proc.poll() is not None, 20, tree):
            return


def end_leftovers(tree: ProcessTree) -> list[int]:
    """After the profiler exited: end what still runs in the groups seen (SIGTERM, then SIGKILL); their pids."""
    tree.adopt_agents()
    if not tree.live() or _wait_for(lambda: not tree.live(), LEFTOVER_GRACE_S, tree):
        return []
    left = tree.live()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        tree.signal("all", sig)
        if _wait_for(lambda: not tree.live(), 5, tree):
            break
    return left


def run(cmd: list[str], timeout: float | None, log: Callable[[str], None]) -> Outcome:
    """Run ``cmd`` (a profiler and its program) in a new session; end everything on timeout or Ctrl-C."""
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1, errors="replace")
    tree = ProcessTree(proc.pid)
    tail: list[str] = []

    def pump() -> None:
        for line in proc.stdout:
            tail.append(line)
            del tail[:-200]
            if not PROGRESS_LINE.match(line):
                log(line.rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    ended_by = None
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        next_scan = 0.0
        while proc.poll() is None:
            now = time.monotonic()
            if deadline is not None and now > deadline:
                ended_by = "timeout"
                log(f"traceql: --timeout of {timeout:g} s reached; ending the program and everything it started")
                break
            if now >= next_scan:
                tree.scan()
                next_scan = now + SCAN_EVERY_S
            time.sleep(0.1)
    except KeyboardInterrupt:
        ended_by = "interrupt"
        log("traceql: interrupted; ending the program and everything it started, keeping what the profiler wrote")
    if ended_by:
        _stop(proc, tree, log)
    leftovers = end_leftovers(tree)
    reader.join(5)
    return Outcome(proc.wait(), "".join(tail), ended_by, leftovers)
