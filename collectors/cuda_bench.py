"""What the one-GPU case collectors (known_cause.py, eval_cases.py) share: the device's limits, CuPy's view of the
current PyTorch stream, and CUDA-event timing. Imported from the collectors' own folder (run as scripts)."""

from __future__ import annotations


class CudaBench:
    """GPU 0 with PyTorch, CuPy and numpy at hand, and the limits that size the cases' kernels."""

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
        """Launch ``fn`` ``reps`` times on ``stream`` between two timing events; returns the events."""
        start, end = self._event(), self._event()
        with self.torch.cuda.stream(stream):
            start.record()
            for _ in range(reps):
                fn()
            end.record()
        return start, end
