"""One ``ncu_kernels`` row from a profiled kernel's metrics: demand, occupancy and roofline position.

Every value is read from named Nsight Compute metrics (the tuples below, first one present wins: ncu
renamed some across releases, e.g. ``dram__throughput`` became ``gpu__dram_throughput``). A value
whose metrics the report lacks (a smaller section set was collected) is NULL, and the first name it
could have come from is listed in the row's ``missing`` column.

Roofline position. ``compute_peak_fraction`` is the SM throughput of Speed Of Light (the busiest SM
pipeline or unit against its peak: the tensor pipe for a tensor-core GEMM, the FMA pipe for FP32
code) and ``dram_peak_fraction`` the achieved DRAM bytes/s against the device's peak. A kernel is
``compute``-bound when the first is at least the second, else ``memory``-bound: on a roofline whose
compute roof is the busiest pipe, arithmetic intensity >= ridge point is the same test. FLOP counts
(``flop_count``, ``flop_per_s``, ``arithmetic_intensity_flop_per_byte``) come from the SASS
floating-point instruction counters (FMA counts twice) plus the tensor-core op counters, when
collected; when the tensor pipe is busy and no tensor-core op count was collected, they are NULL
rather than an undercount.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .report import Metric, ProfiledKernel

DURATION = ("gpu__time_duration.sum",)
SM_THROUGHPUT = ("sm__throughput.avg.pct_of_peak_sustained_elapsed",)
MEMORY_THROUGHPUT = ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",)
TENSOR_PIPE = ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",)
DRAM_READ = ("dram__bytes_read.sum",)
DRAM_WRITE = ("dram__bytes_write.sum",)
DRAM_THROUGHPUT = ("dram__throughput.avg.pct_of_peak_sustained_elapsed",
                   "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed")
DRAM_RATE = ("dram__bytes.sum.per_second",)
L2_HIT = ("lts__t_sector_hit_rate.pct",)
L1_HIT = ("l1tex__t_sector_hit_rate.pct",)
ACHIEVED_OCCUPANCY = ("sm__warps_active.avg.pct_of_peak_sustained_active",)
THEORETICAL_OCCUPANCY = ("sm__maximum_warps_per_active_cycle_pct",)
WAVES = ("launch__waves_per_multiprocessor",)
# CTAs per SM is the tightest of these limits (the Occupancy section); barriers is newer and optional.
OCCUPANCY_LIMITS = {what: f"launch__occupancy_limit_{what}"
                    for what in ("registers", "shared_mem", "warps", "blocks", "barriers")}
OPTIONAL_LIMITS = ("barriers",)
# Peak DRAM bandwidth: the roofline sections' own peak, else the device's (2 transfers per memory clock).
DRAM_PEAK = ("dram__bytes.sum.peak_sustained", "dram__cycles_elapsed.avg.per_second")
MEM_CLOCK_KHZ, BUS_WIDTH_BITS = "device__attribute_memory_clock_rate", "device__attribute_global_memory_bus_width"
# SASS floating-point thread instructions and the FLOPs each counts; fp32 and fp64 are required for a count.
FLOP_OPS = {"ffma": 2, "fadd": 1, "fmul": 1, "dfma": 2, "dadd": 1, "dmul": 1, "hfma": 2, "hadd": 1, "hmul": 1}
REQUIRED_FLOP_OPS = ("ffma", "fadd", "fmul", "dfma", "dadd", "dmul")
SASS_COUNT = "smsp__sass_thread_inst_executed_op_{op}_pred_on.sum"
SASS_RATE = "smsp__sass_thread_inst_executed_op_{op}_pred_on.sum.per_cycle_elapsed"
SASS_CLOCK = "smsp__cycles_elapsed.avg.per_second"
# Tensor-core math ops by source type (floating-point sources only; sparsity splits are subsets of these).
TENSOR_OPS = re.compile(r"^sm__ops_path_tensor_(?P<op>op_[a-z0-9]+_)?src_(?:fp|bf|tf)\w*\.sum$")
TENSOR_OPS_NAME = "sm__ops_path_tensor_src_*.sum"
TENSOR_BUSY_PCT = 1.0  # above this tensor-pipe utilization, FLOPs without tensor-core counts are an undercount


class _Reader:
    """Metric lookups that remember what was missing."""

    def __init__(self, metrics: Mapping[str, Metric]):
        self.metrics = metrics
        self.missing: list[str] = []

    def has(self, name: str) -> bool:
        m = self.metrics.get(name)
        return m is not None and m.value is not None

    def get(self, names: tuple[str, ...] | str, *, note: bool = True) -> float | None:
        names = (names,) if isinstance(names, str) else names
        for n in names:
            if self.has(n):
                return self.metrics[n].value
        if note:
            self.note(names[0])
        return None

    def text(self, name: str) -> str | None:
        m = self.metrics.get(name)
        return m.text if m is not None else None

    def note(self, name: str) -> None:
        if name not in self.missing:
            self.missing.append(name)


def _int(v: float | None) -> int | None:
    return None if v is None else int(round(v))


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def _ctas_per_sm(r: _Reader) -> tuple[int | None, str | None]:
    limits = {}
    for what, name in OCCUPANCY_LIMITS.items():
        v = r.get(name, note=what not in OPTIONAL_LIMITS)
        if v is not None:
            limits[what] = v
    if any(w not in limits for w in OCCUPANCY_LIMITS if w not in OPTIONAL_LIMITS):
        return None, None
    limiter = min(limits, key=lambda w: limits[w])  # dict order breaks ties: registers first, blocks last
    return int(limits[limiter]), limiter


def _peak_dram_bps(r: _Reader) -> float | None:
    per_cycle, clock = (r.get(n, note=False) for n in DRAM_PEAK)
    if per_cycle and clock:
        return per_cycle * clock
    khz, bits = r.get(MEM_CLOCK_KHZ, note=False), r.get(BUS_WIDTH_BITS, note=False)
    if khz and bits:
        return 2 * khz * 1e3 * bits / 8
    return None


def _op_count(r: _Reader, op: str, seconds: float | None) -> float | None:
    count = r.get((SASS_COUNT.format(op=op), SASS_COUNT.format(op=op).replace("smsp__", "sm__", 1)), note=False)
    if count is not None:
        return count
    rate, clock = r.get(SASS_RATE.format(op=op), note=False), r.get(SASS_CLOCK, note=False)
    if rate is not None and clock and seconds:
        return rate * clock * seconds
    return None


def _flops(r: _Reader, seconds: float | None, tensor_pipe_pct: float | None) -> float | None:
    counts = {op: _op_count(r, op, seconds) for op in FLOP_OPS}
    absent = [op for op in REQUIRED_FLOP_OPS if counts[op] is None]
    for op in absent:
        r.note(SASS_COUNT.format(op=op))
    tensor = {n: m.value for n, m in r.metrics.items()
              if m.value is not None and "sparsity" not in n and TENSOR_OPS.match(n)}
    generic = {n: v for n, v in tensor.items() if not TENSOR_OPS.match(n)["op"]}
    tensor_ops = sum((generic or tensor).values())
    if tensor_pipe_pct is not None and tensor_pipe_pct > TENSOR_BUSY_PCT and not tensor_ops:
        r.note(TENSOR_OPS_NAME)
        return None
    if absent:
        return None
    return sum(FLOP_OPS[op] * c for op, c in counts.items() if c is not None) + tensor_ops


def derive(kernel: ProfiledKernel) -> dict:
    """The ``ncu_kernels`` row of one profiled kernel (without run_id)."""
    r = _Reader(kernel.metrics)

    def launch(*names: str) -> int | None:  # launch configuration: present for every kernel workload
        return _int(r.get(names, note=False))

    row = dict(
        kernel_id=kernel.kernel_id, range_id=kernel.range_id, workload=kernel.workload, name=kernel.name,
        short_name=kernel.short_name, nvtx=kernel.nvtx,
        **{f"{what}_{axis}": launch(f"launch__{what}_dim_{axis}") for what in ("grid", "block") for axis in "xyz"},
        device_id=launch("launch__device_id"), device_name=r.text("device__attribute_display_name"),
        sm_count=launch("device__attribute_multiprocessor_count", "launch__sm_count"),
        context_id=launch("launch__context_id"), stream_id=launch("launch__stream_id"),
        ctas=launch("launch__grid_size"), threads_per_block=launch("launch__block_size"),
        static_smem_bytes=launch("launch__shared_mem_per_block_static"),
        dynamic_smem_bytes=launch("launch__shared_mem_per_block_dynamic"),
        regs_per_thread=launch("launch__registers_per_thread"),
    )
    duration = r.get(DURATION)
    seconds = duration * 1e-9 if duration else None
    read, write = r.get(DRAM_READ), r.get(DRAM_WRITE)
    dram_bytes = read + write if read is not None and write is not None else None
    dram_pct = r.get(DRAM_THROUGHPUT)
    dram_bps = r.get(DRAM_RATE, note=False)
    if dram_bps is None:
        dram_bps = _div(dram_bytes, seconds)
    peak_dram = _peak_dram_bps(r)
    dram_fraction = _div(dram_bps, peak_dram)
    if dram_fraction is None and dram_pct is not None:
        dram_fraction = dram_pct / 100
    sm_pct = r.get(SM_THROUGHPUT)
    compute_fraction = None if sm_pct is None else sm_pct / 100
    tensor_pct = r.get(TENSOR_PIPE, note=False)
    flops = _flops(r, seconds, tensor_pct)
    ctas_per_sm, limiter = _ctas_per_sm(r)
    bound = None
    if compute_fraction is not None and dram_fraction is not None:
        bound = "compute" if compute_fraction >= dram_fraction else "memory"
    row.update(
        duration_ns=_int(duration), sm_throughput_pct=sm_pct, memory_throughput_pct=r.get(MEMORY_THROUGHPUT),
        tensor_pipe_pct=tensor_pct, dram_bytes_read=_int(read), dram_bytes_write=_int(write),
        dram_throughput_pct=dram_pct, dram_Bps=dram_bps, peak_dram_Bps=peak_dram,
        l2_hit_rate_pct=r.get(L2_HIT), l1_hit_rate_pct=r.get(L1_HIT),
        achieved_occupancy_pct=r.get(ACHIEVED_OCCUPANCY), theoretical_occupancy_pct=r.get(THEORETICAL_OCCUPANCY),
        ctas_per_sm=ctas_per_sm, occupancy_limiter=limiter, waves_per_sm=r.get(WAVES),
        flop_count=flops, flop_per_s=_div(flops, seconds), arithmetic_intensity_flop_per_byte=_div(flops, dram_bytes),
        compute_peak_fraction=compute_fraction, dram_peak_fraction=dram_fraction, bound=bound,
        missing=r.missing,
    )
    return row
