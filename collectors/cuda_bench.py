"""What the one-GPU case collectors (known_cause.py, eval_cases.py) share: the device's limits, CuPy's view of the
current PyTorch stream, CUDA-event timing (the two-GPU ones' too, gemm_allreduce.py), and a victim timed alone and
then beside its co-runner; and the busy_wait kernel they and train.py's straggler hold SMs with. Imported from the
collectors' own folder (run as scripts)."""

from __future__ import annotations

import os
import sys

# a kernel that holds one SM per CTA for a while: one 1024-thread CTA per SM (launch with more than half an SM's
# shared memory, so nothing else fits beside it), spinning on the global timer; the co-runner of the known-cause
# cases and the straggler of the training runs
BUSY_WAIT_SRC = r"""
extern "C" __global__ void __launch_bounds__(1024, 1)
busy_wait(unsigned long long duration_ns, int *sink) {
    extern __shared__ int smem[];
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    now = start;
    int spins = 0;
    while (now - start < duration_ns) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        ++spins;
    }
    if (spins == -1) sink[threadIdx.x] = smem[threadIdx.x];  // never true: keeps smem allocated
}
"""


def timed(torch, fn, reps: int, stream) -> tuple[object, object]:
    """Launch ``fn`` ``reps`` times on ``stream`` between two CUDA timing events; returns the events."""
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    with torch.cuda.stream(stream):
        start.record()
        for _ in range(reps):
            fn()
        end.record()
    return start, end


class CudaBench:
    """GPU 0 with PyTorch, CuPy and numpy at hand, and the limits that size the cases' kernels. A subclass makes
    ``victim_stream`` and ``corunner_stream`` before it runs a case."""

    def __init__(self):
        import cupy as cp
        import numpy as np
        import torch

        self.torch, self.cp, self.np = torch, cp, np
        torch.cuda.set_device(0)
        props = torch.cuda.get_device_properties(0)
        rt = cp.cuda.runtime.getDeviceProperties(0)
        self.gpu_name = props.name
        self.sms = props.multi_processor_count
        self.l2_bytes = int(getattr(props, "L2_cache_size", 0) or rt.get("l2CacheSize", 0))
        self.smem_sm = int(rt.get("sharedMemPerMultiprocessor", 0) or props.shared_memory_per_multiprocessor)
        self.smem_optin = int(rt.get("sharedMemPerBlockOptin", 0) or props.shared_memory_per_block_optin)
        self.smem_reserved = int(rt.get("reservedSharedMemPerBlock", 1024))
        self._cp_streams: dict[int, object] = {}

    def _cp_stream(self):
        """CuPy's view of the current PyTorch stream (made once per stream)."""
        import warnings

        ptr = self.torch.cuda.current_stream().cuda_stream
        if ptr not in self._cp_streams:
            with warnings.catch_warnings():  # ExternalStream is deprecated in CuPy 14 but still the portable way
                warnings.simplefilter("ignore", DeprecationWarning)
                self._cp_streams[ptr] = self.cp.cuda.ExternalStream(ptr)
        return self._cp_streams[ptr]

    def _event(self):
        return self.torch.cuda.Event(enable_timing=True)

    def timed(self, fn, reps: int, stream) -> tuple[object, object]:
        """Launch ``fn`` ``reps`` times on ``stream`` between two timing events (:func:`timed`)."""
        return timed(self.torch, fn, reps, stream)

    def alone_then_beside(self, fn, co, cover: float, reps: int, alone: tuple[str, dict],
                          beside: tuple[str, dict]) -> tuple[float, float, float, bool]:
        """``fn`` ``reps`` times on the victim stream alone, then beside the co-runner, each inside its NVTX case range
        (name, labels). ``co(total_ms)`` launches the co-runner on the co-runner stream first, asked to last at least
        ``total_ms``: the victim's alone time for all launches times ``cover``.

        Returns the victim's mean ms per launch alone and beside, the co-runner's ms, and whether it outlasted the
        victim's last launch."""
        from labels import case_range  # type: ignore[import-not-found]

        torch = self.torch
        torch.cuda.synchronize()
        with case_range(alone[0], **alone[1]):
            s, e = self.timed(fn, reps, self.victim_stream)
            torch.cuda.synchronize()
        alone_ms = s.elapsed_time(e) / reps
        with case_range(beside[0], **beside[1]):
            co_start, co_end = self._event(), self._event()
            with torch.cuda.stream(self.corunner_stream):
                co_start.record()
                co(alone_ms * reps * cover)
                co_end.record()
            s, e = self.timed(fn, reps, self.victim_stream)
            torch.cuda.synchronize()
        return alone_ms, s.elapsed_time(e) / reps, co_start.elapsed_time(co_end), e.elapsed_time(co_end) > 0


def run(bench, args, least_reps: int, why: str = "") -> None:
    """A one-GPU case collector's entry: refuse fewer than ``least_reps`` launches per case (``args.reps``), then run
    ``bench(args).main()`` with the collectors' folder importable (their cases import ``labels`` by name)."""
    if args.reps < least_reps:
        raise SystemExit(f"--reps must be >= {least_reps}{why}")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    bench(args).main()
