"""Contention microbenchmark: co-runners whose cause of slowdown is known by construction.

On one GPU, each victim kernel runs alone and then beside a co-runner:

* ``spin``: a kernel that holds N SMs (one 1024-thread CTA per SM, forced by a large dynamic
  shared-memory request) and spins on the global timer: it takes SMs and touches no memory;
* ``copy_d2d`` / ``copy_peer``: copy-engine copies on the same device and to a peer GPU (no SMs);
* ``half``: pinned kernels on half the SMs each (grid = S/2, one CTA per SM, grid-stride loops)
  over a working set that either streams from DRAM (``ws=dram``) or fits in L2 alone but not
  beside its twin (``ws=l2``): DRAM-bandwidth and cache contention without SM loss.

Victims: a tensor-core GEMM (bf16, 8192^3 by default), a bandwidth-bound elementwise add
(``torch.add`` over 1 GiB tensors) and the pinned ``half`` kernel itself.
Every case runs inside ``case:<victim>_<corunner>;ctas=N;...`` NVTX ranges.

``--ncu`` instead runs each kernel once, alone, inside an NVTX range ``profile`` for Nsight
Compute (``ncu --nvtx --nvtx-include profile/``).
"""

from __future__ import annotations

import argparse
import os
import sys

SPIN_SRC = r"""
extern "C" __global__ void spin_hold_sms(unsigned long long duration_ns, int *sink) {
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

extern "C" __global__ void half_sm_stream(float *buf, long long n, int passes) {
    extern __shared__ int smem[];
    long long stride = (long long)gridDim.x * blockDim.x;
    for (int p = 0; p < passes; ++p) {
        for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
            buf[i] = buf[i] * 0.999f + 1.0f;
        }
    }
    if (n < 0) buf[0] = smem[threadIdx.x];
}
"""


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gemm", type=int, default=8192)
    p.add_argument("--ctas", default="16,33,66", help="comma list of SMs held by the spin kernel")
    p.add_argument("--reps", type=int, default=8, help="victim launches per case")
    p.add_argument("--ncu", action="store_true", help="run each kernel once alone for Nsight Compute")
    p.add_argument("--profile-range", action="store_true")
    return p.parse_args(argv)


class Bench:
    def __init__(self, args: argparse.Namespace):
        import cupy as cp
        import torch

        self.torch, self.cp, self.args = torch, cp, args
        torch.cuda.set_device(0)
        props = torch.cuda.get_device_properties(0)
        self.sms = props.multi_processor_count
        self.l2_bytes = getattr(props, "L2_cache_size", 50 * 2**20)
        mod = cp.RawModule(code=SPIN_SRC, options=("-std=c++17",))
        self.spin = mod.get_function("spin_hold_sms")
        self.half = mod.get_function("half_sm_stream")
        self.big_smem = 160 * 1024  # one CTA per SM; leaves no room for a GEMM CTA beside it
        for k in (self.spin, self.half):
            k.max_dynamic_shared_size_bytes = self.big_smem + 1024
        self.sink = cp.zeros(1024, dtype=cp.int32)
        self.victim_stream = torch.cuda.Stream()
        self.corunner_stream = torch.cuda.Stream()
        gen = torch.Generator(device="cuda").manual_seed(7)
        n = args.gemm
        self.a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)
        self.b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)
        self.c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
        elems = 2**28  # 1 GiB of fp32
        self.x = torch.rand(elems, device="cuda", generator=gen)
        self.y = torch.rand(elems, device="cuda", generator=gen)
        self.z = torch.empty_like(self.x)
        self.copy_src = torch.rand(2**29, device="cuda", generator=gen)  # 2 GiB
        self.copy_dst = torch.empty_like(self.copy_src)
        self.peer_dst = (torch.empty(2**29, device="cuda:1") if torch.cuda.device_count() > 1 else None)
        if self.peer_dst is not None:
            torch.cuda.set_device(0)
        l2_ws = int(self.l2_bytes * 0.6) // 4  # fits alone, not beside its twin
        self.half_bufs = {
            "l2": [torch.rand(l2_ws, device="cuda", generator=gen) for _ in range(2)],
            "dram": [torch.rand(2**29, device="cuda", generator=gen) for _ in range(2)],
        }
        self.half_passes = {"l2": 200, "dram": 2}

    # kernels ---------------------------------------------------------------
    def gemm(self):
        self.torch.matmul(self.a, self.b, out=self.c)

    def add(self):
        self.torch.add(self.x, self.y, out=self.z)

    def run_half(self, ws: str, which: int):
        cp = self.cp
        buf = self.half_bufs[ws][which]
        # One more KiB of shared memory for the L2 variant: still one CTA per SM, but a signature of its own,
        # so its isolated baseline is not mixed with the DRAM variant's.
        smem = self.big_smem + (1024 if ws == "l2" else 0)
        self.half((self.sms // 2,), (1024,),
                  (buf.data_ptr(), cp.int64(buf.numel()), cp.int32(self.half_passes[ws])),
                  shared_mem=smem, stream=self._cp_stream())

    def run_spin(self, ctas: int, duration_ns: int):
        cp = self.cp
        self.spin((ctas,), (1024,), (cp.uint64(duration_ns), self.sink), shared_mem=self.big_smem,
                  stream=self._cp_stream())

    def _cp_stream(self):
        s = self.torch.cuda.current_stream()
        return self.cp.cuda.ExternalStream(s.cuda_stream)  # noqa: the newer from_external is not in every CuPy

    # timing ----------------------------------------------------------------
    def timed(self, fn, reps: int) -> float:
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.victim_stream):
            start.record()
            for _ in range(reps):
                fn()
            end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / reps * 1e6  # ns per launch

    def case(self, victim: str, corunner: str, fn, co, reps: int, **labels) -> None:
        """Victim alone, then beside the co-runner, in one labelled NVTX range each."""
        from labels import case_range  # type: ignore[import-not-found]

        torch = self.torch
        torch.cuda.synchronize()
        with case_range(f"{victim}_alone", corunner="none", **labels):
            alone = self.timed(fn, reps)
        with case_range(f"{victim}_{corunner}", corunner=corunner, **labels):
            with torch.cuda.stream(self.corunner_stream):
                co(alone * reps)
            beside = self.timed(fn, reps)
            torch.cuda.synchronize()
        print(f"{victim:>6} beside {corunner:<10} {labels}: alone {alone/1e6:.3f} ms, beside {beside/1e6:.3f} ms "
              f"({beside/alone-1:+.1%})", flush=True)

    def main(self) -> None:
        torch, args = self.torch, self.args
        for _ in range(3):  # warm up: module load, cuBLAS handles, clocks
            self.gemm(); self.add(); self.run_half("l2", 0); self.run_spin(1, 10_000)
        torch.cuda.synchronize()
        if args.ncu:
            from labels import nvtx_range  # type: ignore[import-not-found]

            with nvtx_range("profile"):
                self.gemm(); self.add(); self.run_spin(16, 1_000_000)
                self.run_half("l2", 0); self.run_half("dram", 0)
                torch.cuda.synchronize()
            return
        if args.profile_range:
            torch.cuda.cudart().cudaProfilerStart()
        reps = args.reps
        for ctas in [int(c) for c in args.ctas.split(",")]:
            # the spin co-runner outlasts all victim launches (they slow down at most ~2x here)
            self.case("gemm", "spin", self.gemm, lambda t, n=ctas: self.run_spin(n, int(t * 2.2)), reps,
                      ctas=ctas, dtype="bf16", m=args.gemm)
        self.case("add", "spin", self.add, lambda t: self.run_spin(33, int(t * 2.2)), reps, ctas=33, bytes=3 * 2**30)

        def copies(total_ns: float, dst) -> None:
            n = max(1, int(total_ns / 0.45e6) + 1)  # each 2 GiB copy takes ~1 ms; cover the victims
            for _ in range(n):
                dst.copy_(self.copy_src, non_blocking=True)

        for name, dst in (("copy_d2d", self.copy_dst), ("copy_peer", self.peer_dst)):
            if dst is None:
                continue
            self.case("gemm", name, self.gemm, lambda t, d=dst: copies(t, d), reps, ctas=0, dtype="bf16", m=args.gemm)
            self.case("add", name, self.add, lambda t, d=dst: copies(t, d), reps, ctas=0, bytes=3 * 2**30)
        for ws in ("dram", "l2"):
            r = reps if ws == "dram" else max(2, reps // 2)
            self.case("half", "half", lambda w=ws: self.run_half(w, 0),
                      lambda t, w=ws, n=r: [self.run_half(w, 1) for _ in range(n)], r,
                      ctas=self.sms // 2, ws=ws)
        torch.cuda.synchronize()
        if args.profile_range:
            torch.cuda.cudart().cudaProfilerStop()


def main(argv=None) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    Bench(parse_args(argv)).main()


if __name__ == "__main__":
    main()
