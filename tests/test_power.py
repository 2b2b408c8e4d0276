"""The NVML sampler keeps a fixed period whatever its reads cost (no GPU: a fake NVML reader, a fake clock)."""

from __future__ import annotations

import time

import pyarrow.parquet as pq
import pytest

from traceql.collect.power import STATE, sample

MS = 1_000_000


class FakeTime:
    """A clock that moves only when the sampler reads a GPU or sleeps."""

    def __init__(self) -> None:
        self.ns = 1_700_000_000 * 10**9

    def clock(self) -> int:
        return self.ns

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0, "the sampler asked to sleep a negative time"
        self.ns += int(seconds * 1e9)


class FakeNvml:
    """Two GPUs whose energy counter grows at ``watts``; each read costs the given time."""

    def __init__(self, advance, energy_read_ns: int, state_read_ns: int, watts: float = 500.0, gpus: int = 2):
        self.uuids = [f"GPU-fake-{i}" for i in range(gpus)]
        self.advance, self.watts = advance, watts
        self.energy_read_ns, self.state_read_ns = energy_read_ns, state_read_ns
        self.now = None
        self.closed = False

    def energy_j(self, i: int) -> float:
        t = self.now()
        self.advance(self.energy_read_ns)
        return self.watts * (t + self.energy_read_ns / 2) / 1e9

    def state(self, i: int) -> dict[str, float]:
        self.advance(self.state_read_ns)
        return dict.fromkeys(STATE, 1.0)

    def close(self) -> None:
        self.closed = True


def _sample(tmp_path, energy_read_ns, state_read_ns, ticks, interval_ms=15.0):
    ft = FakeTime()
    reader = FakeNvml(lambda ns: setattr(ft, "ns", ft.ns + ns), energy_read_ns, state_read_ns)
    reader.now = ft.clock
    calls = []

    def stop() -> bool:
        calls.append(ft.ns)
        return len(calls) > ticks

    out = tmp_path / "p.parquet"
    rows = sample(out, interval_ms, reader=reader, clock=ft.clock, sleep=ft.sleep, wall=ft.clock, stop=stop)
    return rows, pq.read_table(out), reader


def test_period_is_fixed_whatever_the_reads_cost(tmp_path):
    # 4 ms per GPU for power, clocks and the rest: a sleep after the reads would make the period 15 + 8.4 ms.
    rows, table, reader = _sample(tmp_path, energy_read_ns=200_000, state_read_ns=4 * MS, ticks=200)
    assert rows == 400 and reader.closed
    t = table.to_pylist()
    for uuid in reader.uuids:
        stamps = [r["epoch_ns"] for r in t if r["uuid"] == uuid]
        gaps = {b - a for a, b in zip(stamps, stamps[1:], strict=False)}
        assert gaps == {15 * MS}, f"{uuid}: sample gaps {sorted(gaps)[:5]} ns, not the 15 ms period"
        assert stamps[-1] - stamps[0] == 199 * 15 * MS  # no drift over 200 samples
    assert table.schema.metadata[b"traceql.power.skipped_ticks"] == b"0"


def test_energy_is_stamped_at_the_middle_of_its_read(tmp_path):
    _, table, reader = _sample(tmp_path, energy_read_ns=300_000, state_read_ns=2 * MS, ticks=20)
    for r in table.to_pylist():  # the fake counter is watts x the middle of its read (0.075 J off at its start)
        assert r["energy_j"] == pytest.approx(reader.watts * r["epoch_ns"] / 1e9, abs=1e-3)
    first = [r for r in table.to_pylist() if r["uuid"] == reader.uuids[0]]
    second = [r for r in table.to_pylist() if r["uuid"] == reader.uuids[1]]
    # Both counters are read before anything else: the second GPU's follows the first's by one energy read.
    assert {b["epoch_ns"] - a["epoch_ns"] for a, b in zip(first, second, strict=True)} == {300_000}
    assert all(r["read_ns"] == 2 * MS for r in table.to_pylist())


def test_slow_reads_skip_ticks_and_stay_on_the_grid(tmp_path):
    # 20 ms per GPU (two GPUs: 40 ms) against a 15 ms period: every sample lands on the next free grid point.
    rows, table, reader = _sample(tmp_path, energy_read_ns=100_000, state_read_ns=20 * MS, ticks=30)
    stamps = [r["epoch_ns"] for r in table.to_pylist() if r["uuid"] == reader.uuids[0]]
    gaps = {b - a for a, b in zip(stamps, stamps[1:], strict=False)}
    assert gaps == {45 * MS}, f"gaps {sorted(gaps)} ns: samples left the 15 ms grid"
    assert int(table.schema.metadata[b"traceql.power.skipped_ticks"]) == 2 * 30  # two pass during each sample


CHILD = """
import sys
from pathlib import Path
from traceql.collect.power import STATE, sample

class Reader:
    uuids = ["GPU-a"]
    def energy_j(self, i):
        Path(sys.argv[1] + ".sampling").touch()  # tells the starter that sampling began
        return 1.0
    def state(self, i): return dict.fromkeys(STATE, 0.0)
    def close(self): pass

sample(Path(sys.argv[1]), 15.0, reader=Reader(), parent=int(sys.argv[2]))
"""


def test_sampler_stops_when_its_starter_is_killed(tmp_path):
    """`traceql collect` killed before it could stop the sampler (SIGKILL, or SIGTERM to the CLI): the sampler sees
    that the process that started it is gone, writes its samples and exits instead of running on."""
    import subprocess
    import sys

    out = tmp_path / "p.parquet"
    # the starter launches the sampler and dies at once, as a killed `traceql collect` would
    starter = (f"import subprocess, sys, os, time; subprocess.Popen([sys.executable, '-c', {CHILD!r}, {str(out)!r}, "
               f"str(os.getpid())]); [time.sleep(0.05) for _ in range(600) if not os.path.exists({str(out)!r} + "
               "'.sampling')]; time.sleep(0.2); os._exit(0)")
    subprocess.run([sys.executable, "-c", starter], check=True, timeout=30)
    deadline = time.monotonic() + 20
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert out.exists(), "the orphaned sampler kept running"
    assert pq.read_table(out).num_rows >= 1
