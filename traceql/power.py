"""NVML power sampler: a side process that records power, energy, clocks, temperature and throttle reasons.

Run as ``python -m traceql.power OUT.parquet --interval-ms 15`` (``traceql collect --power`` does);
it samples every GPU until SIGTERM/SIGINT, then writes one Parquet file. Times are UTC epoch
nanoseconds; ingest moves them onto the trace's timeline with the session start nsys records.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

COLUMNS = ("uuid", "epoch_ns", "power_w", "energy_j", "sm_clock_mhz", "mem_clock_mhz", "temp_c",
           "throttle_reasons", "power_limit_w")


def sample(out: Path, interval_ms: float = 15.0, max_s: float | None = None) -> int:
    import pynvml

    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    uuids = [pynvml.nvmlDeviceGetUUID(h) for h in handles]
    uuids = [u.decode() if isinstance(u, bytes) else u for u in uuids]
    rows: dict[str, list] = {c: [] for c in COLUMNS}
    stop = False

    def _stop(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    t_end = None if max_s is None else time.monotonic() + max_s
    while not stop and (t_end is None or time.monotonic() < t_end):
        for h, uuid in zip(handles, uuids, strict=True):
            rows["uuid"].append(uuid)
            rows["epoch_ns"].append(time.time_ns())
            rows["power_w"].append(pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0)
            rows["energy_j"].append(pynvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0)
            rows["sm_clock_mhz"].append(float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)))
            rows["mem_clock_mhz"].append(float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)))
            rows["temp_c"].append(float(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)))
            rows["throttle_reasons"].append(int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)))
            rows["power_limit_w"].append(pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0)
        time.sleep(interval_ms / 1000.0)
    pynvml.nvmlShutdown()
    table = pa.table({c: rows[c] for c in COLUMNS})
    tmp = out.with_suffix(".tmp")
    pq.write_table(table, tmp)
    tmp.rename(out)
    return table.num_rows


if __name__ == "__main__":
    interval = float(sys.argv[sys.argv.index("--interval-ms") + 1]) if "--interval-ms" in sys.argv else 15.0
    sample(Path(sys.argv[1]), interval)
