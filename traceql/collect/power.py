"""NVML power sampler: a side process that records power, energy, clocks, temperature and throttle reasons.

Run as ``python -m traceql.collect.power OUT.parquet --interval-ms 15`` (``traceql collect --power`` does);
it samples every GPU until SIGTERM/SIGINT, then writes one Parquet file. Times are UTC epoch
nanoseconds; ingest moves them onto the trace's timeline with the session start nsys records.

Samples fall on a fixed grid (start + k x period), whatever the reads cost: a sleep that follows the
reads would stretch the period by the time the reads take (about 10 ms for two GPUs), and more with
more GPUs. A tick whose time passed while the previous one was still reading is skipped, not caught
up in a burst. The energy counters of all GPUs are read first, back to back, and each sample's time
is the middle of its own energy read: the energy counter is what per-range energy is interpolated
from (``queries/range_energy.sql``), so its reading is the one that needs an exact time.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pyarrow.parquet as pq

COLUMNS = ("uuid", "epoch_ns", "power_w", "energy_j", "sm_clock_mhz", "mem_clock_mhz", "temp_c",
           "throttle_reasons", "power_limit_w", "read_ns")
STATE = ("power_w", "sm_clock_mhz", "mem_clock_mhz", "temp_c", "throttle_reasons", "power_limit_w")


class Reader(Protocol):
    """What the sampler reads: NVML on a GPU machine, anything with the same methods in tests."""

    uuids: list[str]

    def energy_j(self, i: int) -> float: ...  # the GPU's energy counter (J since the driver loaded)

    def state(self, i: int) -> dict[str, float]: ...  # the STATE columns

    def close(self) -> None: ...


class NvmlReader:
    def __init__(self) -> None:
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        uuids = [pynvml.nvmlDeviceGetUUID(h) for h in self.handles]
        self.uuids = [u.decode() if isinstance(u, bytes) else u for u in uuids]

    def energy_j(self, i: int) -> float:
        return self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handles[i]) / 1000.0  # mJ

    def state(self, i: int) -> dict[str, float]:
        n, h = self.nvml, self.handles[i]
        return {"power_w": n.nvmlDeviceGetPowerUsage(h) / 1000.0,
                "sm_clock_mhz": float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
                "mem_clock_mhz": float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
                "temp_c": float(n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
                "throttle_reasons": int(n.nvmlDeviceGetCurrentClocksEventReasons(h)),
                "power_limit_w": n.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0}

    def close(self) -> None:
        self.nvml.nvmlShutdown()


def sample(out: Path, interval_ms: float = 15.0, max_s: float | None = None, *, reader: Reader | None = None,
           clock: Callable[[], int] = time.monotonic_ns, sleep: Callable[[float], None] = time.sleep,
           wall: Callable[[], int] = time.time_ns, stop: Callable[[], bool] | None = None,
           parent: int | None = None) -> int:
    """Sample every ``interval_ms`` until SIGTERM/SIGINT, ``max_s``, ``stop()`` or (without ``stop``) the end of the
    process that started it (``parent``, by default the parent process); write ``out``; return the rows.

    ``reader``, ``clock``, ``sleep``, ``wall`` and ``stop`` are for tests (a fake NVML and a fake clock).
    """
    reader = reader if reader is not None else NvmlReader()
    period = int(interval_ms * 1e6)
    rows: dict[str, list] = {c: [] for c in COLUMNS}
    signalled = False

    def _stop(*_):
        nonlocal signalled
        signalled = True

    if stop is None:
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        parent = parent or os.getppid()

        def stop() -> bool:  # the process that started the sampler is gone (killed before it could stop it)
            return os.getppid() != parent
    start = clock()
    end = None if max_s is None else start + int(max_s * 1e9)
    tick, skipped = 0, 0
    try:
        while not signalled and not (stop is not None and stop()) and (end is None or clock() < end):
            stamps = []
            for i in range(len(reader.uuids)):
                before = wall()
                energy = reader.energy_j(i)
                after = wall()
                stamps.append(((before + after) // 2, energy))
            for i, uuid in enumerate(reader.uuids):
                t = clock()
                state = reader.state(i)
                rows["uuid"].append(uuid)
                rows["epoch_ns"].append(stamps[i][0])
                rows["energy_j"].append(stamps[i][1])
                for c in STATE:
                    rows[c].append(state[c])
                rows["read_ns"].append(clock() - t)
            tick += 1
            now = clock()
            if now >= start + tick * period:  # the reads outlasted the period: skip the ticks that passed
                late = (now - start) // period + 1
                skipped += late - tick
                tick = late
            sleep((start + tick * period - now) / 1e9)
    finally:
        reader.close()
    table = pa.table({c: pa.array(rows[c], type=_TYPES[c]) for c in COLUMNS})
    table = table.replace_schema_metadata({"traceql.power.interval_ms": str(interval_ms),
                                           "traceql.power.ticks": str(tick),
                                           "traceql.power.skipped_ticks": str(skipped)})
    tmp = out.with_suffix(".tmp")
    pq.write_table(table, tmp)
    tmp.rename(out)
    return table.num_rows


_TYPES = {"uuid": pa.string(), "epoch_ns": pa.int64(), "power_w": pa.float64(), "energy_j": pa.float64(),
          "sm_clock_mhz": pa.float64(), "mem_clock_mhz": pa.float64(), "temp_c": pa.float64(),
          "throttle_reasons": pa.int64(), "power_limit_w": pa.float64(), "read_ns": pa.int64()}


if __name__ == "__main__":  # python -m traceql.collect.power OUT.parquet [--interval-ms MS] [--parent PID]
    interval = float(sys.argv[sys.argv.index("--interval-ms") + 1]) if "--interval-ms" in sys.argv else 15.0
    starter = int(sys.argv[sys.argv.index("--parent") + 1]) if "--parent" in sys.argv else None
    sample(Path(sys.argv[1]), interval, parent=starter)
