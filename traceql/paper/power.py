"""Energy and power per mode, from the NVML samples inside each mode range (``paper_power``).

NVML's energy counter is exact but changes only every ~100 ms on H200 (the run's own median is used in messages),
and its power reading changes at the same pace: a mode range needs at least three counter changes inside it for
an energy figure, and the figure covers the time between its first and last change. Mean power is the counter's
energy over that time (ratio of sums over the intervals between changes); its interval resamples those intervals.
The peak is the highest power reading inside the range (a reading NVML has itself averaged, so a lower bound of
the instantaneous peak); its interval resamples the readings (each reading once, however often it was sampled).
Energy per iteration is mean power x GPUs x iteration time. A change is taken to happen midway between the sample
that shows it and the one before. Where the data cannot give a number, ``note`` says why instead.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from .figures import N_BOOT, Est, combine, resample_rows

# counter changes inside a mode: two intervals between them, the least that gives the mean power an interval; a
# change is seen up to one sampling period late, so one interval alone can be off by that much (15% of 100 ms at
# 15 ms sampling; single-interval estimates above the enforced power limit came out of the 2 x H200 runs)
MIN_UPDATES = 3


def mode_power(rows: list[dict], wall: Est | None, key: tuple, n_boot: int = N_BOOT) -> dict:
    """Energy per iteration (all GPUs), mean and peak power per GPU for one (configuration, mode)."""
    devices: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        devices[(r["global_pid"], r["device_id"])].append(r)
    out: dict = dict(power_samples=0, counter_updates=None, power_limit_w=None, note=None, mean_power_w=Est(np.nan),
                     peak_power_w=Est(np.nan), energy_per_iter_j=Est(np.nan), clock_mhz=None)
    # the SM clock the mode ran at: the mean NVML reading inside its ranges (None where no reading fell inside)
    clocks = [r["sm_clock_mhz"] for r in rows if r.get("ts_ns") is not None and r.get("sm_clock_mhz") is not None]
    if clocks:
        out["clock_mhz"] = float(np.mean(clocks))
    if not devices or all((r["run_samples"] or 0) == 0 for r in rows):
        out["note"] = "no NVML power in this run (collect with traceql collect --power)"
        return out
    means, peaks, updates = [], [], []
    for dev in sorted(devices):
        dev_rows = devices[dev]
        inside = sorted((r for r in dev_rows if r["ts_ns"] is not None), key=lambda r: r["ts_ns"])
        out["power_samples"] += len(inside)
        limits = [r["power_limit_w"] for r in inside if r["power_limit_w"] is not None]
        if limits:
            out["power_limit_w"] = max(limits + [out["power_limit_w"] or 0.0])
        d_e, d_t, n_upd = [], [], 0
        by_range: dict[int, list[dict]] = defaultdict(list)
        for r in inside:
            if r["energy_update"]:
                by_range[r["mode_start_ns"]].append(r)
        for changes in by_range.values():
            n_upd += len(changes)
            for a, b in zip(changes, changes[1:], strict=False):
                d_e.append(b["energy_j"] - a["energy_j"])
                d_t.append((b["update_ns"] - a["update_ns"]) / 1e9)
        updates.append(n_upd)
        if n_upd < MIN_UPDATES or not d_t:
            continue
        e, t = np.array(d_e), np.array(d_t)
        reps = None
        if len(e) >= 2:
            idx = resample_rows(len(e), key=(*key, *dev, "energy"), n_boot=n_boot)
            reps = e[idx].sum(axis=1) / t[idx].sum(axis=1)
        means.append(Est(float(e.sum() / t.sum()), reps))
        # NVML refreshes its reading about as often as the counter, far less often than it is sampled: a repeated
        # reading is one measurement, so the units resampled are the readings as they change
        readings = np.array([r["power_w"] for i, r in enumerate(inside) if r["power_w"] is not None
                             and (i == 0 or r["power_w"] != inside[i - 1]["power_w"])])
        if readings.size:
            peak_reps = None
            if readings.size >= 2:
                peak_reps = readings[resample_rows(readings.size, key=(*key, *dev, "peak"), n_boot=n_boot)].max(axis=1)
            peaks.append(Est(float(readings.max()), peak_reps))
    out["counter_updates"] = min(updates)
    if len(means) < len(devices):
        spans = [(r["span_end_ns"] - r["span_start_ns"]) / 1e6 for r in rows]
        period = np.nanmedian([r["run_update_ns"] or np.nan for r in rows]) / 1e6
        out["note"] = (f"NVML's energy counter changed {min(updates)} time(s) inside the {max(spans):.0f} ms mode "
                       f"(every {period:.0f} ms in this run): energy needs {MIN_UPDATES}+ changes inside a mode, so "
                       f"modes of {(MIN_UPDATES + 1) * period:.0f} ms or more get a number")
        return out
    out["mean_power_w"] = combine(lambda *xs: sum(xs) / len(xs), *means)
    out["peak_power_w"] = combine(lambda *xs: np.maximum.reduce(xs), *peaks) if len(peaks) == len(means) \
        else Est(np.nan)
    gpus = len(means)
    out["energy_per_iter_j"] = combine(lambda p, w: p * gpus * w / 1e9, out["mean_power_w"], wall)
    return out
