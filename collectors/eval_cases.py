"""Evaluation cases for the attribution: one GPU, victims of kernel families the calibration traces lack.

``tests/data/eval/EXPECTED.md`` lists the cases and their expected classes, fixed before any was collected;
each beside-range carries that class as ``expect=<class>``. Conventions are those of ``known_cause.py``: every
victim runs alone first in ``case:<victim>_alone;corunner=none;...``, then beside its co-runner in
``case:<casename>;corunner=<corunner>;...``; the co-runner is launched first on a stream of its own and is sized
to outlast every victim launch (``covered=yes``); the victim runs on a stream of its own; every configuration is
warmed up before the measured part, which ``--profile-range`` brackets with cudaProfilerStart/Stop. ``cause=``
names the known cause in known_cause's words (``sms``, ``dram``, ``l2``), ``expect=`` the expected class.

Kernels of this file (one CuPy RawModule; sizes come from the device: S SMs, its L2 and shared memory):

* ``hold_spin``: holds N SMs. One 512-thread CTA per SM, forced by a dynamic shared-memory request of the SM's
  shared memory less 32 KiB (196 KiB of 228 KiB on H100/H200): neither a second copy nor a Triton matmul CTA
  (96 KiB) nor a flash-attention CTA (64 KiB and up) fits beside it. Spins on ``%globaltimer``; no memory traffic.
* ``resident_spin``: 128 threads, no shared memory, grid 2S (two CTAs on every SM); spins on ``%globaltimer``.
  The victim's CTAs fit beside it: it takes issue slots on every SM and no memory bandwidth. Its preferred
  shared-memory carveout is set to the maximum: with the default, the driver configured the SMs for no shared
  memory while it ran (it asks for none), so the Triton CTAs (96 KiB) could not be placed beside it and waited
  for its end (seen on H100: kernel time unchanged, every launch queued behind it). Asked to last 6x the victim.
* ``stream_copy``: float4 grid-stride copy between two 2 GiB buffers, ``passes`` times, 1024 threads, grid S/4,
  one CTA per SM (the same shared-memory request as ``hold_spin``).
* ``row_sum_l2`` / ``row_sum_dram``: the same row-sum (float2 loads through L2, eight in flight per thread,
  512 threads per CTA, each CTA's sum added into a small output), pinned to S/2 SMs; two function names as
  known_cause's ``sweep_relax``/``sweep_update``. How they are pinned: see ``--reduce-layout`` and the probe.

Victims: a Triton fp16 matmul (``@triton.jit``, 128x128x64 tiles, 8 warps, 3 stages, no autotune, 4096^3);
``scaled_dot_product_attention`` bf16 (B 8, H 16, L 2048, D 128, not causal); two cuBLAS bf16 GEMMs 8192^3;
a CUDA graph (``torch.cuda.CUDAGraph``) of ``layer_norm`` -> ``gelu`` -> ``add`` over 8192x8192 bf16; the row-sums.

Cases (``tests/data/eval/EXPECTED.md``): ``triton_mm_hold88`` (hold_spin on round(2S/3) SMs), ``triton_mm_resident``,
``sdpa_hold40`` (hold_spin on round(0.4 S) SMs), ``gemm_gemm`` (both GEMMs are victims: each alone on its own
stream, then 20 each on two streams, launches interleaved, in ``case:gemm_gemm;corunner=gemm``),
``graph_norm_dram`` (graph replays beside ``stream_copy``), ``reduce_l2_twin`` (0.45 x L2 per buffer, passes for
~2 ms a launch) and ``reduce_dram_twin`` (2 GiB per buffer, one pass).

Pinning the row-sums to S/2 SMs. With 2 CTAs per SM allowed and grid S, the hardware's CTA scheduler spreads
CTAs breadth-first (one on every SM), so the kernel would not sit on S/2 SMs and the twin would share every SM
with it. Before the measured part a probe kernel (``smid_probe``, not in the capture) records ``%smid`` for that
layout and for the twin launched beside it; ``--reduce-layout auto`` (default) uses 2 CTAs per SM (grid S) only
if the probe saw both kernels on S/2 SMs each, disjoint, 2 CTAs on each; otherwise 1 CTA per SM, grid S/2 (shared
memory as ``hold_spin``), whose twin lands on the other S/2 SMs. The choice is printed and labelled
(``ctas_per_sm=``).
"""

from __future__ import annotations

import argparse
import math

from cuda_bench import CudaBench, run

try:  # the Triton victim; absent on CPU-only machines, where this file is only compiled
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover
    triton = None

if triton is not None:
    @triton.jit
    def triton_mm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
        pid = tl.program_id(0)
        num_pid_m = tl.cdiv(M, BLOCK_M)
        num_pid_n = tl.cdiv(N, BLOCK_N)
        num_pid_in_group = GROUP_M * num_pid_n
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GROUP_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
        pid_n = (pid % num_pid_in_group) // group_size_m
        offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
        offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        offs_k = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        c = acc.to(tl.float16)
        offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
        tl.store(c_ptrs, c, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))

SRC = r"""
__device__ __forceinline__ void spin_for(unsigned long long duration_ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    now = start;
    while (now - start < duration_ns) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    }
}

extern "C" __global__ void __launch_bounds__(512, 1)
hold_spin(unsigned long long duration_ns, int *sink) {
    extern __shared__ int smem[];
    spin_for(duration_ns);
    if (duration_ns == 0xFFFFFFFFFFFFFFFFull) sink[threadIdx.x] = smem[threadIdx.x];  // never: keeps smem allocated
}

extern "C" __global__ void __launch_bounds__(128)
resident_spin(unsigned long long duration_ns, int *sink) {
    spin_for(duration_ns);
    if (duration_ns == 0xFFFFFFFFFFFFFFFFull) sink[threadIdx.x] = (int)threadIdx.x;  // never
}

extern "C" __global__ void __launch_bounds__(1024, 1)
stream_copy(float4 *__restrict__ dst, const float4 *__restrict__ src, long long n4, int passes) {
    extern __shared__ int smem[];
    long long stride = (long long)gridDim.x * blockDim.x;
    long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (int p = 0; p < passes; ++p) {
        long long i = tid;
        for (; i + 3 * stride < n4; i += 4 * stride) {  // four loads in flight per thread
            float4 v0 = src[i], v1 = src[i + stride], v2 = src[i + 2 * stride], v3 = src[i + 3 * stride];
            dst[i] = v0; dst[i + stride] = v1; dst[i + 2 * stride] = v2; dst[i + 3 * stride] = v3;
        }
        for (; i < n4; i += stride) dst[i] = src[i];
    }
    if (n4 < 0) dst[0].x = (float)smem[threadIdx.x];
}

__device__ __forceinline__ void row_sum_body(const float2 *buf, long long n2, int passes, float *out) {
    __shared__ float part[32];
    long long stride = (long long)gridDim.x * blockDim.x;
    long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;
    for (int p = 0; p < passes; ++p) {
        long long i = tid;
        for (; i + 7 * stride < n2; i += 8 * stride) {  // eight float2 loads in flight per thread, through L2
            float2 v0 = __ldcg(buf + i), v1 = __ldcg(buf + i + stride), v2 = __ldcg(buf + i + 2 * stride),
                   v3 = __ldcg(buf + i + 3 * stride), v4 = __ldcg(buf + i + 4 * stride),
                   v5 = __ldcg(buf + i + 5 * stride), v6 = __ldcg(buf + i + 6 * stride),
                   v7 = __ldcg(buf + i + 7 * stride);
            acc += ((v0.x + v0.y) + (v1.x + v1.y)) + ((v2.x + v2.y) + (v3.x + v3.y))
                 + ((v4.x + v4.y) + (v5.x + v5.y)) + ((v6.x + v6.y) + (v7.x + v7.y));
        }
        for (; i < n2; i += stride) { float2 v = __ldcg(buf + i); acc += v.x + v.y; }
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) atomicAdd(out + (blockIdx.x & 63), v);
    }
}

extern "C" __global__ void __launch_bounds__(512)
row_sum_l2(const float2 *buf, long long n2, int passes, float *out) {
    extern __shared__ int smem[];
    row_sum_body(buf, n2, passes, out);
    if (n2 < 0) out[0] = (float)smem[threadIdx.x];
}

extern "C" __global__ void __launch_bounds__(512)
row_sum_dram(const float2 *buf, long long n2, int passes, float *out) {
    extern __shared__ int smem[];
    row_sum_body(buf, n2, passes, out);
    if (n2 < 0) out[0] = (float)smem[threadIdx.x];
}

extern "C" __global__ void __launch_bounds__(512)
smid_probe(unsigned long long duration_ns, int *out) {
    extern __shared__ int smem[];
    unsigned int id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    if (threadIdx.x == 0) out[blockIdx.x] = (int)id;
    spin_for(duration_ns);
    if (duration_ns == 0xFFFFFFFFFFFFFFFFull) out[0] = smem[threadIdx.x];  // never
}
"""

GiB = 2**30
KiB = 1024


def hold_smem(smem_sm: int, optin: int) -> int:
    """The dynamic shared memory of hold_spin, stream_copy and the 1-CTA row-sums: more than half the SM's (one CTA
    per SM), and less than 32 KiB left beside it, so no Triton (96 KiB) or flash-attention (>= 64 KiB) CTA fits
    there."""
    return min(optin, (smem_sm - 32 * KiB) // KiB * KiB)

# expected class (tests/data/eval/EXPECTED.md) and known_cause's cause word, per case
EXPECT = {"triton_mm_hold88": ("sm", "sms"), "triton_mm_resident": ("sm", "sms"), "sdpa_hold40": ("sm", "sms"),
          "gemm_gemm": ("sm", "sms"), "graph_norm_dram": ("dram_bw", "dram"), "reduce_l2_twin": ("cache", "l2"),
          "reduce_dram_twin": ("dram_bw", "dram")}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=20, help="victim launches per case (>= 20)")
    p.add_argument("--cases", default=",".join(EXPECT), help="comma-separated subset of the cases, in this order")
    p.add_argument("--reduce-layout", choices=("auto", "1", "2"), default="auto",
                   help="row-sum CTAs per SM: 2 (grid S) only if the probe shows it pinned to S/2 SMs (auto)")
    p.add_argument("--l2-ms", type=float, default=2.0, help="target duration of one row_sum_l2 launch (ms)")
    p.add_argument("--profile-range", action="store_true", help="cudaProfilerStart/Stop around the measured part")
    return p.parse_args(argv)


class Eval(CudaBench):
    def __init__(self, args: argparse.Namespace):
        super().__init__()
        torch, cp, self.args = self.torch, self.cp, args
        S, smem_sm, optin, reserved = self.sms, self.smem_sm, self.smem_optin, self.smem_reserved
        self.hold_smem = hold_smem(smem_sm, optin)
        assert 2 * (self.hold_smem + reserved) > smem_sm, (smem_sm, self.hold_smem)
        # 2-CTA row-sums: two fit on an SM, three don't (512 threads: threads would allow 4)
        lo, hi = smem_sm // 3 - reserved, smem_sm // 2 - reserved  # ask for more than lo, at most hi
        self.two_smem = (lo + hi) // 2 // KiB * KiB
        assert lo < self.two_smem <= hi, (lo, self.two_smem, hi)
        self.held = {"hold88": round(2 * S / 3), "hold40": round(0.4 * S)}

        mod = cp.RawModule(code=SRC, options=("-std=c++17",))
        self.k_hold = mod.get_function("hold_spin")
        self.k_resident = mod.get_function("resident_spin")
        self.k_copy = mod.get_function("stream_copy")
        self.k_rowsum = {"l2": mod.get_function("row_sum_l2"), "dram": mod.get_function("row_sum_dram")}
        self.k_probe = mod.get_function("smid_probe")
        self.k_resident.preferred_shared_memory_carveout = 100  # max shared: the victim's CTAs must fit beside it
        for k in (self.k_hold, self.k_copy, self.k_probe, *self.k_rowsum.values()):
            k.max_dynamic_shared_size_bytes = self.hold_smem
        self.sink = cp.zeros(1024, dtype=cp.int32)
        self.sums = cp.zeros(64, dtype=cp.float32)

        self.victim_stream = torch.cuda.Stream()
        self.corunner_stream = torch.cuda.Stream()
        gen = torch.Generator(device="cuda").manual_seed(11)

        # Triton matmul, fp16 4096^3
        n = self.mm_n = 4096
        self.ma = torch.randn(n, n, device="cuda", dtype=torch.float16, generator=gen)
        self.mb = torch.randn(n, n, device="cuda", dtype=torch.float16, generator=gen)
        self.mc = torch.empty(n, n, device="cuda", dtype=torch.float16)
        # sdpa, bf16 (B, H, L, D)
        self.sdpa_shape = (8, 16, 2048, 128)
        self.q, self.k, self.v = (torch.randn(*self.sdpa_shape, device="cuda", dtype=torch.bfloat16, generator=gen)
                                  for _ in range(3))
        self.o = None
        # two cuBLAS GEMMs, bf16 8192^3, different buffers
        g = self.gemm_n = 8192
        self.gab = [(torch.randn(g, g, device="cuda", dtype=torch.bfloat16, generator=gen),
                     torch.randn(g, g, device="cuda", dtype=torch.bfloat16, generator=gen),
                     torch.empty(g, g, device="cuda", dtype=torch.bfloat16)) for _ in range(2)]
        # CUDA graph: layer_norm -> gelu -> add over 8192 x 8192 bf16
        self.norm_n = 8192
        self.gx = torch.randn(self.norm_n, self.norm_n, device="cuda", dtype=torch.bfloat16, generator=gen)
        self.gres = torch.randn(self.norm_n, self.norm_n, device="cuda", dtype=torch.bfloat16, generator=gen)
        self.graph = None
        # stream_copy: two 2 GiB buffers, grid S/4
        self.copy_bytes = 2 * GiB
        self.copy_src = torch.rand(self.copy_bytes // 4, device="cuda", generator=gen)
        self.copy_dst = torch.empty_like(self.copy_src)
        self.copy_grid = S // 4
        # row-sums: 0.45 x L2 per buffer (L2) / 2 GiB (DRAM), two buffers each
        self.rs_bytes = {"l2": int(0.45 * self.l2_bytes) // 64 * 64, "dram": 2 * GiB}
        self.rs_bufs = {ws: [torch.rand(b // 4, device="cuda", generator=gen) for _ in range(2)]
                        for ws, b in self.rs_bytes.items()}
        self.rs_passes = {"l2": 64, "dram": 1}  # l2: calibrated in warm_up
        self.rs_ctas_per_sm = 1
        torch.cuda.synchronize()

    # kernels ---------------------------------------------------------------
    def hold(self, ctas: int, duration_ns: float):
        self.k_hold((ctas,), (512,), (self.np.uint64(int(duration_ns)), self.sink),
                    shared_mem=self.hold_smem, stream=self._cp_stream())

    def resident(self, duration_ns: float):
        self.k_resident((2 * self.sms,), (128,), (self.np.uint64(int(duration_ns)), self.sink),
                        stream=self._cp_stream())

    def stream_copy(self, passes: int):
        np = self.np
        self.k_copy((self.copy_grid,), (1024,),
                    (self.copy_dst.data_ptr(), self.copy_src.data_ptr(), np.int64(self.copy_src.numel() // 4),
                     np.int32(passes)), shared_mem=self.hold_smem, stream=self._cp_stream())

    def row_sum(self, ws: str, which: int):
        np = self.np
        buf = self.rs_bufs[ws][which]
        two = self.rs_ctas_per_sm == 2
        grid = self.sms if two else self.sms // 2
        self.k_rowsum[ws]((grid,), (512,), (buf.data_ptr(), np.int64(buf.numel() // 2), np.int32(self.rs_passes[ws]),
                                            self.sums),
                          shared_mem=self.two_smem if two else self.hold_smem, stream=self._cp_stream())

    def tmm(self):
        n, a, b, c = self.mm_n, self.ma, self.mb, self.mc
        grid = (triton.cdiv(n, 128) * triton.cdiv(n, 128),)
        triton_mm[grid](a, b, c, n, n, n, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1), BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)

    def sdpa(self):
        self.o = self.torch.nn.functional.scaled_dot_product_attention(self.q, self.k, self.v, is_causal=False)

    def gemm(self, i: int):
        a, b, c = self.gab[i]
        self.torch.matmul(a, b, out=c)

    def norm_graph_body(self):
        F = self.torch.nn.functional
        return F.gelu(F.layer_norm(self.gx, (self.norm_n,))) + self.gres

    def capture_graph(self):
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self.norm_graph_body()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.gout = self.norm_graph_body()
        torch.cuda.synchronize()

    def replay(self):
        self.graph.replay()

    # timing ----------------------------------------------------------------
    def once_ms(self, fn, stream=None) -> float:
        """One launch of ``fn`` alone (outside any case), in ms."""
        self.torch.cuda.synchronize()
        s, e = self.timed(fn, 1, stream or self.victim_stream)
        self.torch.cuda.synchronize()
        return s.elapsed_time(e)

    def case(self, victim: str, casename: str, corunner: str, fn, co, cover: float, reps: int, **labels):
        """Victim alone, then beside the co-runner, each in a labelled NVTX range (known_cause's ``case``).

        ``co(total_ms)`` launches the co-runner on the current stream (the co-runner's), asked to last at least
        ``total_ms``: the victim's alone time for all its launches times ``cover``.
        """
        expect, cause = EXPECT[casename]
        labels = dict(cause=cause, **labels, reps=reps)
        alone, beside, co_ms, covered = self.alone_then_beside(
            fn, co, cover, reps, (f"{victim}_alone", dict(corunner="none", **labels)),
            (casename, dict(corunner=corunner, expect=expect, **labels)))
        shown = {k: v for k, v in labels.items() if k not in ("reps", "cause")}
        print(f"{casename:>18} victim {victim:<12} beside {corunner:<13} expect={expect:<7} {shown}: "
              f"alone {alone:.3f} ms, beside {beside:.3f} ms ({beside / alone - 1:+.1%}), "
              f"co-runner {co_ms:.1f} ms, covered={'yes' if covered else 'NO'}", flush=True)
        return alone, beside

    def gemm_gemm(self, reps: int) -> None:
        """Both GEMMs are victims: each alone on its own stream, then 20 each, launches interleaved."""
        from labels import case_range  # type: ignore[import-not-found]

        torch, n = self.torch, self.gemm_n
        expect, cause = EXPECT["gemm_gemm"]
        labels = dict(cause=cause, m=n, n=n, k=n, dtype="bf16", reps=reps)
        streams = (self.victim_stream, self.corunner_stream)
        alone = []
        for i in (0, 1):
            torch.cuda.synchronize()
            with case_range("gemm_alone", corunner="none", stream=i + 1, **labels):
                s, e = self.timed(lambda i=i: self.gemm(i), reps, streams[i])
                torch.cuda.synchronize()
            alone.append(s.elapsed_time(e) / reps)
        torch.cuda.synchronize()
        with case_range("gemm_gemm", corunner="gemm", expect=expect, **labels):
            starts, ends = [self._event(), self._event()], [self._event(), self._event()]
            for i in (1, 0):  # stream 2's GEMMs go first in every round
                with torch.cuda.stream(streams[i]):
                    starts[i].record()
            for _ in range(reps):
                for i in (1, 0):
                    with torch.cuda.stream(streams[i]):
                        self.gemm(i)
            for i in (1, 0):
                with torch.cuda.stream(streams[i]):
                    ends[i].record()
            torch.cuda.synchronize()
        beside = [starts[i].elapsed_time(ends[i]) / reps for i in (0, 1)]
        span = min(starts[0].elapsed_time(ends[1]), starts[1].elapsed_time(ends[0]))  # > 0: the two streams overlap
        for i in (0, 1):
            print(f"{'gemm_gemm':>18} victim gemm(stream {i + 1}) beside gemm(stream {2 - i}) expect={expect:<7} "
                  f"{{'m': {n}, 'n': {n}, 'k': {n}}}: alone {alone[i]:.3f} ms, beside {beside[i]:.3f} ms "
                  f"({beside[i] / alone[i] - 1:+.1%}), streams overlap={'yes' if span > 0 else 'NO'}", flush=True)

    def sm_cover(self, held: int) -> float:
        """How much longer than the victim's alone time a co-runner holding ``held`` SMs must last."""
        return 1.5 * self.sms / (self.sms - held) + 0.25

    # probe -----------------------------------------------------------------
    def probe_layout(self) -> str:
        """Where the row-sum CTAs land: returns a one-line report and sets ``rs_ctas_per_sm``."""
        cp, np, torch, S = self.cp, self.np, self.torch, self.sms
        out = cp.full((2, S), -1, dtype=cp.int32)
        spin = np.uint64(3_000_000)  # 3 ms: every CTA of both launches is resident at once

        def launch(grid, smem, row, stream):
            with torch.cuda.stream(stream):
                self.k_probe((grid,), (512,), (spin, out[row]), shared_mem=smem, stream=self._cp_stream())

        res = {}
        for per_sm, grid, smem in ((2, S, self.two_smem), (1, S // 2, self.hold_smem)):
            out.fill(-1)
            torch.cuda.synchronize()
            launch(grid, smem, 0, self.victim_stream)
            launch(grid, smem, 1, self.corunner_stream)
            torch.cuda.synchronize()
            ids = out.get()
            a, b = set(ids[0, :grid].tolist()), set(ids[1, :grid].tolist())
            per = max(np.bincount(ids[0, :grid]).max(), np.bincount(ids[1, :grid]).max())
            pinned = len(a) == S // 2 and len(b) == S // 2 and not (a & b) and per == per_sm
            res[per_sm] = (len(a), len(b), len(a & b), int(per), pinned)
        choice = self.args.reduce_layout
        self.rs_ctas_per_sm = (2 if res[2][4] else 1) if choice == "auto" else int(choice)
        parts = [f"{k} CTA/SM (grid {S if k == 2 else S // 2}): kernel on {v[0]} SMs, twin on {v[1]} SMs, "
                 f"{v[2]} shared, max {v[3]} CTAs/SM, pinned={'yes' if v[4] else 'NO'}" for k, v in res.items()]
        return "row_sum placement probe: " + "; ".join(parts) + f" -> using {self.rs_ctas_per_sm} CTA/SM"

    # main --------------------------------------------------------------------
    def warm_up(self) -> None:
        torch = self.torch
        self.capture_graph()
        for _ in range(3):
            with torch.cuda.stream(self.victim_stream):
                self.tmm()
                self.sdpa()
                self.gemm(0)
                self.replay()
                for ws in ("l2", "dram"):
                    self.row_sum(ws, 0)
            with torch.cuda.stream(self.corunner_stream):
                self.gemm(1)
                self.hold(self.held["hold88"], 20_000)
                self.resident(20_000)
                self.stream_copy(1)
                for ws in ("l2", "dram"):
                    self.row_sum(ws, 1)
            torch.cuda.synchronize()
        # the Triton matmul computes the product
        ref = torch.matmul(self.ma, self.mb)
        self.tmm()
        torch.cuda.synchronize()
        self.mm_err = float((self.mc.float() - ref.float()).norm() / ref.float().norm())
        assert self.mm_err < 1e-2, self.mm_err
        # row_sum_l2: passes for about --l2-ms a launch
        t = min(self.once_ms(lambda: self.row_sum("l2", 0)) for _ in range(3))
        self.rs_passes["l2"] = max(8, round(self.rs_passes["l2"] * self.args.l2_ms / t))
        self.row_sum("l2", 0)
        self.row_sum("l2", 1)
        self.copy_pass_ms = min(self.once_ms(lambda: self.stream_copy(1), self.corunner_stream) for _ in range(2))
        torch.cuda.synchronize()

    def main(self) -> None:
        torch, args = self.torch, self.args
        reps, S, mib = args.reps, self.sms, 2**20
        cases = [c.strip() for c in args.cases.split(",") if c.strip()]
        unknown = set(cases) - set(EXPECT)
        if unknown:
            raise SystemExit(f"unknown cases {sorted(unknown)}; known: {list(EXPECT)}")
        probe = self.probe_layout()
        self.warm_up()
        print(f"gpu {self.gpu_name}: {S} SMs, L2 {self.l2_bytes / mib:g} MiB, smem/SM {self.smem_sm // KiB} KiB, "
              f"hold smem {self.hold_smem // KiB} KiB, 2-CTA smem {self.two_smem // KiB} KiB, "
              f"held {self.held}, stream_copy grid {self.copy_grid} ({self.copy_bytes / GiB:g} GiB, "
              f"{self.copy_pass_ms:.2f} ms/pass), row_sum l2 {self.rs_bytes['l2'] / mib:.1f} MiB x "
              f"{self.rs_passes['l2']} passes, dram {self.rs_bytes['dram'] / GiB:g} GiB x 1 pass, "
              f"triton_mm rel err {self.mm_err:.1e}, reps {reps}; torch {torch.__version__}, "
              f"cupy {self.cp.__version__}, triton {triton.__version__}", flush=True)
        print(probe, flush=True)
        if args.profile_range:
            torch.cuda.cudart().cudaProfilerStart()
        n = self.mm_n
        mm = dict(m=n, n=n, k=n, dtype="fp16", tiles="128x128x64")
        bq, hq, lq, dq = self.sdpa_shape
        for c in cases:
            if c == "triton_mm_hold88":
                h = self.held["hold88"]
                self.case("triton_mm", c, "hold_spin", self.tmm, lambda t, h=h: self.hold(h, t * 1e6),
                          self.sm_cover(h), reps, held_sms=h, **mm)
            elif c == "triton_mm_resident":
                self.case("triton_mm", c, "resident_spin", self.tmm, lambda t: self.resident(t * 1e6), 6.0, reps,
                          co_ctas=2 * S, co_threads=128, **mm)
            elif c == "sdpa_hold40":
                h = self.held["hold40"]
                self.case("sdpa", c, "hold_spin", self.sdpa, lambda t, h=h: self.hold(h, t * 1e6),
                          self.sm_cover(h), reps, held_sms=h, b=bq, h=hq, l=lq, d=dq, dtype="bf16", causal=0)
            elif c == "gemm_gemm":
                self.gemm_gemm(reps)
            elif c == "graph_norm_dram":
                self.case("graph_norm", c, "stream_copy", self.replay,
                          lambda t: self.stream_copy(math.ceil(t / self.copy_pass_ms)), 3.0, reps,
                          ops="layer_norm+gelu+add", rows=self.norm_n, cols=self.norm_n, dtype="bf16",
                          co_ctas=self.copy_grid, bytes=self.copy_bytes)
            elif c in ("reduce_l2_twin", "reduce_dram_twin"):
                ws = "l2" if c == "reduce_l2_twin" else "dram"
                per = self.rs_ctas_per_sm
                self.case(f"reduce_{ws}", c, f"row_sum_{ws}", lambda w=ws: self.row_sum(w, 0),
                          lambda t, w=ws: [self.row_sum(w, 1) for _ in range(reps + 3)], 1.0, reps,
                          ws=ws, bytes=self.rs_bytes[ws], passes=self.rs_passes[ws],
                          ctas=S if per == 2 else S // 2, ctas_per_sm=per, sms=S // 2)
        torch.cuda.synchronize()
        if args.profile_range:
            torch.cuda.cudart().cudaProfilerStop()


def main(argv=None) -> None:
    run(Eval, parse_args(argv), least_reps=20)


if __name__ == "__main__":
    main()
