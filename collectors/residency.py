"""Residency: what a kernel loses beside a many-wave co-runner whose CTAs fit beside its own and keep every SM full.

A calibration experiment for the SM model (docs/attribution.md, "SM"): the co-runner holds no SM exclusively and
uses next to no issue slots, memory or power; it only keeps each SM's thread slots taken, CTA after CTA. What the
victim loses there is how many of its CTAs the block scheduler places while the co-runner still has CTAs to place.

Hypotheses, written before the first collection (tests/data/calibration/residency/README.md):
- H1 (left-over): CTAs are placed from the earlier launch first; the victim starts only as the co-runner's last wave
  drains, and is held back (its start late), not slowed;
- H2 (shared): freed slots go to both kernels; the victim keeps part of the SM and its time grows as the share of
  the threads it gets falls below what it used alone;
- H3 (no loss): the victim's CTAs are placed as if alone.

Kernels (one CuPy RawModule):

* ``fill_sleep``: 128 threads, no shared memory, few registers (16 CTAs, 2048 threads on an SM); each CTA sleeps
  ``cta_ns`` (``__nanosleep`` until the global timer has moved on: no memory traffic, few issue slots). Its grid is
  as many waves of 16 CTAs per SM as last the asked time. ``fill_sleep512`` the same with 512-thread CTAs (4 per SM).
* ``chase``: the victim. Each thread follows a chain of dependent loads through a 4 MiB table (L2-resident): its
  time is memory latency, so its throughput follows the warps it has resident. 512 threads per CTA (4 per SM at most
  by threads); grids of S, 2S, 4S (one wave: 1, 2, 4 CTAs per SM) and 16S (4 waves).

Each case: the victim alone (``case:chase_alone``), then beside the co-runner launched first on its own stream and
asked to last 4x the victim's launches (``case:chase_fill;corunner=fill_sleep``). ``ctas_per_sm`` labels what the
victim places per SM alone. ``expect`` is not given: this is calibration data, not an evaluation case.

``--case pairs`` (tests/data/calibration/pairs/README.md): which co-runners take an SM from which victims. Victims
``gemm`` (cuBLAS bf16 GEMM 8192^3) and ``chase4`` (``chase`` with 4S CTAs), each alone and then beside ``hold_half``:
CTAs that sleep on the SMs of even ``%smid`` (the others return at once), k x S of them, sized so that exactly k fit
on an SM (``h1s``, ``h2s``, ``h4s``: 128 threads and shared memory for 1, 2, 4 per SM; ``h2t``: 1024 threads, none;
``h4t``: 384 threads and a quarter of the shared memory).

``--case coresident`` (tests/data/calibration/coresident/README.md): what a bandwidth-bound kernel loses to
co-runners whose CTAs run beside its own on every SM. The victim ``read_stride`` (512 threads, k = 1, 2, 3 CTAs per
SM: one wave striding once over 2 GiB) is launched first; then a co-runner of one wave fills exactly the threads left
on each SM (64 - 16k warps: 128-thread CTAs) and runs until the victim's 20 launches are done: ``co_sleep`` (no work),
``co_stream`` (DRAM reads), ``co_alu`` (FMAs).

``--case pairs66`` (the same README, second set): the GEMM beside ``hold_one`` holders of S/2 CTAs, one per SM,
whose launch configuration says which SMs they hold: ``s60`` and ``s40`` (128 threads, 60% and 40% of the SM's
shared memory), ``t1024`` (1024 threads, no shared memory).

``--case gemms`` (a check of the delays rule, written after it): the victim is PyTorch's elementwise add over two
64 Mi-element fp32 tensors on a non-blocking stream, the co-runner cuBLAS bf16 GEMMs 8192^3 back to back on another
(``case:add_alone``, then ``case:add_gemms;corunner=gemm``).

    python collectors/residency.py [--case fill|gemms|pairs|pairs66|coresident] [--reps 20] [--profile-range]
"""

from __future__ import annotations

import argparse
import contextlib

from cuda_bench import CudaBench, run

SRC = r"""
__device__ __forceinline__ void sleep_for(unsigned long long cta_ns, int *sink) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    now = start;
    while (now - start < cta_ns) {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    }
    if (cta_ns == 0xFFFFFFFFFFFFFFFFull) sink[threadIdx.x] = (int)threadIdx.x;  // never
}

extern "C" __global__ void __launch_bounds__(128) fill_sleep(unsigned long long cta_ns, int *sink) {
    sleep_for(cta_ns, sink);
}

extern "C" __global__ void __launch_bounds__(512) fill_sleep512(unsigned long long cta_ns, int *sink) {
    sleep_for(cta_ns, sink);
}

extern "C" __global__ void __launch_bounds__(1024)
hold_half(unsigned long long cta_ns, int *smids) {
    extern __shared__ int smem[];
    unsigned int id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    if (id & 1u) return;  // only the SMs of even %smid are held
    if (threadIdx.x == 0) smids[blockIdx.x] = (int)id;
    sleep_for(cta_ns, smids);
    if (cta_ns == 0xFFFFFFFFFFFFFFFFull) smids[0] = smem[threadIdx.x];  // never: keeps the shared memory
}

__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// --case coresident: the victim reads a DRAM-sized buffer once per launch, a grid of one wave striding over it
extern "C" __global__ void __launch_bounds__(512, 4)
read_stride(const float4 *__restrict__ buf, long long n4, float *out) {
    long long stride = (long long)gridDim.x * blockDim.x;
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 v = __ldcg(buf + i);
        acc += (v.x + v.y) + (v.z + v.w);
    }
    if (acc == -1.0f) out[0] = acc;  // never: keeps the loads
}

// co-runners of one wave, 128 threads, until cta_ns has passed: no work, DRAM reads, or FMAs
extern "C" __global__ void __launch_bounds__(128, 16)
co_sleep(unsigned long long cta_ns, const float4 *__restrict__ buf, long long n4, float *out) {
    unsigned long long start = now_ns();
    while (now_ns() - start < cta_ns) __nanosleep(1000);
}

extern "C" __global__ void __launch_bounds__(128, 16)
co_stream(unsigned long long cta_ns, const float4 *__restrict__ buf, long long n4, float *out) {
    unsigned long long start = now_ns();
    long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;
    while (now_ns() - start < cta_ns) {
        for (int r = 0; r < 64; ++r) {
            float4 v = __ldcg(buf + i);
            acc += (v.x + v.y) + (v.z + v.w);
            i += stride;
            if (i >= n4) i -= n4;
        }
    }
    if (acc == -1.0f) out[1] = acc;
}

extern "C" __global__ void __launch_bounds__(128, 16)
co_alu(unsigned long long cta_ns, const float4 *__restrict__ buf, long long n4, float *out) {
    unsigned long long start = now_ns();
    float a = threadIdx.x * 1e-3f, b = 1.0001f, c = 1e-4f, d = 0.5f;
    while (now_ns() - start < cta_ns) {
        for (int r = 0; r < 256; ++r) {
            a = fmaf(a, b, c); d = fmaf(d, b, c); c = fmaf(c, b, a); b = fmaf(b, 0.9999f, d * 1e-9f);
        }
    }
    if (a + b + c + d == -1.0f) out[2] = a;
}

// --case pairs66: one CTA per SM on as many SMs as CTAs (no filter: the launch configuration says where it is)
extern "C" __global__ void __launch_bounds__(1024)
hold_one(unsigned long long cta_ns, int *smids) {
    extern __shared__ int smem[];
    unsigned int id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    if (threadIdx.x == 0) smids[blockIdx.x] = (int)id;
    sleep_for(cta_ns, smids);
    if (cta_ns == 0xFFFFFFFFFFFFFFFFull) smids[0] = smem[threadIdx.x];  // never: keeps the shared memory
}

extern "C" __global__ void __launch_bounds__(512)
chase(const unsigned int *__restrict__ next, unsigned int mask, int steps, unsigned int *out) {
    unsigned int i = (blockIdx.x * blockDim.x + threadIdx.x) & mask;
    for (int s = 0; s < steps; ++s) i = __ldcg(next + i);
    if (i == 0xFFFFFFFFu) out[0] = i;  // never: keeps the chain
}
"""


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=20, help="victim launches per case (>= 20)")
    p.add_argument("--steps", type=int, default=4000, help="dependent loads per victim thread")
    p.add_argument("--cta-us", type=float, default=20.0, help="how long each co-runner CTA sleeps (us)")
    p.add_argument("--case", choices=("fill", "gemms", "pairs", "pairs66", "coresident"), default="fill",
                   help="which experiment (see above)")
    p.add_argument("--profile-range", action="store_true", help="cudaProfilerStart/Stop around the measured part")
    return p.parse_args(argv)


def outcome(alone: float, beside: float, co_ms: float, covered: bool) -> str:
    """A case's line of the log, from :meth:`CudaBench.alone_then_beside`'s figures."""
    return (f"alone {alone:.3f} ms, beside {beside:.3f} ms ({beside / alone - 1:+.1%}), co-runner {co_ms:.1f} ms, "
            f"covered={'yes' if covered else 'NO'}")


class Residency(CudaBench):
    def __init__(self, args: argparse.Namespace):
        super().__init__()
        cp, np, torch = self.cp, self.np, self.torch
        self.args = args
        mod = cp.RawModule(code=SRC, options=("-std=c++17",))
        self.k_fill = {128: mod.get_function("fill_sleep"), 512: mod.get_function("fill_sleep512")}
        self.k_chase = mod.get_function("chase")
        self.k_hold, self.k_one = mod.get_function("hold_half"), mod.get_function("hold_one")
        for k in (self.k_hold, self.k_one):
            k.max_dynamic_shared_size_bytes = self.smem_optin
        self.k_read = mod.get_function("read_stride")
        self.k_co = {n: mod.get_function(n) for n in ("co_sleep", "co_stream", "co_alu")}
        self.smids = cp.full(64 * self.sms, -1, dtype=cp.int32)
        n = 1 << 20  # 4 MiB of uint32: a random cycle through the table, in L2
        perm = np.random.default_rng(7).permutation(n).astype(np.uint32)
        nxt = np.empty(n, dtype=np.uint32)
        nxt[perm] = np.roll(perm, -1)
        self.next = cp.asarray(nxt)
        self.mask = np.uint32(n - 1)
        self.out = cp.zeros(4, dtype=cp.uint32)
        self.sink = cp.zeros(1024, dtype=cp.int32)
        self.victim_stream = torch.cuda.Stream()
        self.corunner_stream = torch.cuda.Stream()

    @contextlib.contextmanager
    def profiled(self):
        """The measured part: between cudaProfilerStart and Stop with ``--profile-range``; the GPU's work done at its
        end."""
        torch = self.torch
        if self.args.profile_range:
            torch.cuda.cudart().cudaProfilerStart()
        yield
        torch.cuda.synchronize()
        if self.args.profile_range:
            torch.cuda.cudart().cudaProfilerStop()

    def gemm(self):
        """A cuBLAS bf16 GEMM 8192^3 on seeded operands: a function that launches it on the current stream."""
        torch = self.torch
        gen = torch.Generator(device="cuda").manual_seed(5)
        g = 8192
        ga, gb = (torch.randn(g, g, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
        gc = torch.empty(g, g, device="cuda", dtype=torch.bfloat16)
        return lambda: torch.matmul(ga, gb, out=gc)

    def launch_holder(self, kernel, ctas: int, threads: int, smem: int, total_ms: float) -> None:
        """A sleeping holder (``hold_half``, ``hold_one``) of ``ctas`` CTAs for ``total_ms``, its placement record
        cleared first, on the current stream."""
        with self._cp_stream():  # ordered with the launch below, on the same stream
            self.smids.fill(-1)
        kernel((ctas,), (threads,), (self.np.uint64(int(total_ms * 1e6)), self.smids), shared_mem=smem,
               stream=self._cp_stream())

    def chase(self, ctas: int):
        np = self.np
        self.k_chase((ctas,), (512,), (self.next, self.mask, np.int32(self.args.steps), self.out),
                     stream=self._cp_stream())

    def fill(self, threads: int, total_ms: float):
        per_sm = 2048 // threads
        cta_ns = self.args.cta_us * 1e3
        waves = max(4, int(total_ms * 1e6 / cta_ns) + 1)
        self.k_fill[threads]((waves * per_sm * self.sms,), (threads,), (self.np.uint64(int(cta_ns)), self.sink),
                             stream=self._cp_stream())

    def gemms(self) -> None:
        """The victim (torch.add, non-blocking stream) alone, then beside back-to-back cuBLAS GEMMs."""
        torch, args = self.torch, self.args
        gen = torch.Generator(device="cuda").manual_seed(5)
        a, b = (torch.rand(1 << 26, device="cuda", generator=gen) for _ in range(2))
        out = torch.empty_like(a)
        g = 8192
        ga, gb = (torch.randn(g, g, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
        gc = torch.empty(g, g, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            torch.add(a, b, out=out)
            torch.matmul(ga, gb, out=gc)
        torch.cuda.synchronize()
        s, e = self.timed(lambda: torch.matmul(ga, gb, out=gc), 5, self.corunner_stream)
        torch.cuda.synchronize()
        gemm_ms = s.elapsed_time(e) / 5

        def co(total_ms: float) -> None:
            for _ in range(max(2, int(total_ms / gemm_ms) + 1)):
                torch.matmul(ga, gb, out=gc)

        labels = dict(n=1 << 26, dtype="fp32", gemm=g, gemm_dtype="bf16", reps=args.reps)
        with self.profiled():
            got = self.alone_then_beside(
                lambda: torch.add(a, b, out=out), co, 4.0, args.reps, ("add_alone", dict(corunner="none", **labels)),
                ("add_gemms", dict(corunner="gemm", **labels)))
            print(f"add beside GEMMs ({gemm_ms:.3f} ms each): {outcome(*got)}", flush=True)

    def ones(self) -> dict[str, tuple[int, int]]:
        """The holders of ``--case pairs66``: name -> (threads, dynamic shared memory bytes)."""
        sm, res = self.smem_sm, self.smem_reserved
        return {"s60": (128, int(0.6 * sm) - res), "s40": (128, int(0.4 * sm) - res), "t1024": (1024, 0)}

    def hold_ones(self, name: str, total_ms: float) -> None:
        threads, smem = self.ones()[name]
        self.launch_holder(self.k_one, self.sms // 2, threads, smem, total_ms)

    def pairs66(self) -> None:
        """The GEMM alone, then beside each one-CTA-per-SM holder on S/2 SMs (tests/data/calibration/pairs)."""
        torch, args, S = self.torch, self.args, self.sms
        gemm = self.gemm()
        for _ in range(3):
            gemm()
        for name in self.ones():
            self.hold_ones(name, 0.5)
        torch.cuda.synchronize()
        print(f"gpu {self.gpu_name}: {S} SMs, smem/SM {self.smem_sm // 1024} KiB; holders of {S // 2} CTAs "
              f"(threads, smem): {self.ones()}; reps {args.reps}", flush=True)
        with self.profiled():
            for name, (threads, smem) in self.ones().items():
                labels = dict(victim="gemm", holder=name, holder_ctas=S // 2, holder_threads=threads, holder_smem=smem,
                              reps=args.reps)
                got = self.alone_then_beside(
                    gemm, lambda t, n=name: self.hold_ones(n, t), 4.0, args.reps,
                    ("one_alone", dict(corunner="none", **labels)), ("one_beside", dict(corunner=name, **labels)))
                print(f"gemm beside {name}: {outcome(*got)}; {self.placement(name)}", flush=True)

    def holders(self) -> dict[str, tuple[int, int, int]]:
        """The co-runners of ``--case pairs``: name -> (CTAs per held SM, threads, dynamic shared memory bytes)."""
        kib, sm, res = 1024, self.smem_sm, self.smem_reserved
        return {"h1s": (1, 128, min(self.smem_optin, sm - 32 * kib)),
                "h2s": (2, 128, sm // 2 - res - 2 * kib),
                "h4s": (4, 128, sm // 4 - res - 2 * kib),
                "h2t": (2, 1024, 0),
                "h4t": (4, 384, sm // 4 - res - 2 * kib)}

    def hold(self, name: str, total_ms: float) -> None:
        k, threads, smem = self.holders()[name]
        self.launch_holder(self.k_hold, k * self.sms, threads, smem, total_ms)

    def placement(self, name: str) -> str:
        """Where the last ``hold`` of ``name`` stayed: SMs held and CTAs per SM (its CTAs on odd SMs returned)."""
        np = self.np
        ids = self.smids.get()
        ids = ids[ids >= 0]
        per = np.bincount(ids) if len(ids) else np.zeros(1, dtype=np.int64)
        held = per[per > 0]
        return (f"{name}: {len(ids)} CTAs stayed on {len(held)} SMs, {held.min() if len(held) else 0}-"
                f"{held.max() if len(held) else 0} per SM")

    def pairs(self) -> None:
        """Each victim alone, then beside each co-runner (tests/data/calibration/pairs/README.md)."""
        torch, args, S = self.torch, self.args, self.sms
        victims = {"gemm": self.gemm(), "chase4": lambda: self.chase(4 * S)}
        for fn in victims.values():  # warm up and compile
            for _ in range(3):
                fn()
        for name in self.holders():
            self.hold(name, 0.5)
        torch.cuda.synchronize()
        print(f"gpu {self.gpu_name}: {S} SMs, smem/SM {self.smem_sm // 1024} KiB (reserved {self.smem_reserved} B "
              f"per CTA); holders (CTAs/SM, threads, smem): {self.holders()}; reps {args.reps}", flush=True)
        with self.profiled():
            for victim, fn in victims.items():
                for name, (k, threads, smem) in self.holders().items():
                    labels = dict(victim=victim, holder=name, holder_ctas_per_sm=k, holder_threads=threads,
                                  holder_smem=smem, reps=args.reps)
                    got = self.alone_then_beside(
                        fn, lambda t, n=name: self.hold(n, t), 4.0, args.reps,
                        ("pair_alone", dict(corunner="none", **labels)), ("pair_beside", dict(corunner=name, **labels)))
                    print(f"{victim} beside {name}: {outcome(*got)}; {self.placement(name)}", flush=True)

    def coresident(self) -> None:
        """The victim launched first, then a one-wave co-runner in the threads it leaves, for each k and co-runner
        (tests/data/calibration/coresident/README.md)."""
        from labels import case_range  # type: ignore[import-not-found]

        cp, np, torch, args, S = self.cp, self.np, self.torch, self.args, self.sms
        n4 = (2 << 30) // 16
        vbuf = cp.ones(n4 * 4, dtype=cp.float32)
        cbuf = cp.ones(n4 * 4, dtype=cp.float32)
        out = cp.zeros(4, dtype=cp.float32)

        def victim(k: int):
            self.k_read((k * S,), (512,), (vbuf, np.int64(n4), out), stream=self._cp_stream())

        def corunner(name: str, k: int, total_ms: float):
            per_sm = (64 - 16 * k) // 4  # 128-thread CTAs in the warps the victim leaves
            self.k_co[name]((per_sm * S,), (128,), (np.uint64(int(total_ms * 1e6)), cbuf, np.int64(n4), out),
                            stream=self._cp_stream())

        for k in (1, 2, 3):  # warm up
            victim(k)
            for name in self.k_co:
                corunner(name, k, 0.2)
        torch.cuda.synchronize()
        print(f"gpu {self.gpu_name}: {S} SMs; read_stride over 2 GiB, 512 threads, k CTAs per SM; co-runners of "
              f"128 threads in the warps left; reps {args.reps}", flush=True)
        with self.profiled():
            for k in (1, 2, 3):
                labels = dict(victim="read_stride", victim_ctas_per_sm=k, victim_warps_per_sm=16 * k,
                              corunner_warps_per_sm=64 - 16 * k, reps=args.reps)
                torch.cuda.synchronize()
                with case_range("cores_alone", corunner="none", **labels):
                    s, e = self.timed(lambda k=k: victim(k), args.reps, self.victim_stream)
                    torch.cuda.synchronize()
                alone = s.elapsed_time(e) / args.reps
                for name in self.k_co:
                    with case_range("cores_beside", corunner=name, **labels):
                        s, e = self._event(), self._event()
                        with torch.cuda.stream(self.victim_stream):
                            s.record()
                            victim(k)  # placed first: the co-runner gets the threads it leaves
                        with torch.cuda.stream(self.corunner_stream):
                            torch.cuda._sleep(50_000)  # about 25-50 us: the victim's CTAs are placed
                            corunner(name, k, alone * (args.reps + 2) * 3)
                        with torch.cuda.stream(self.victim_stream):
                            for _ in range(args.reps - 1):
                                victim(k)
                            e.record()
                        torch.cuda.synchronize()
                    beside = s.elapsed_time(e) / args.reps
                    print(f"read_stride k={k} ({16 * k} warps/SM) beside {name} ({64 - 16 * k} warps/SM): alone "
                          f"{alone:.3f} ms, beside {beside:.3f} ms ({beside / alone - 1:+.1%})", flush=True)

    def main(self) -> None:
        {"fill": self.fills, "gemms": self.gemms, "pairs": self.pairs, "pairs66": self.pairs66,
         "coresident": self.coresident}[self.args.case]()

    def fills(self) -> None:
        """The chase victim alone, then beside many-wave fill_sleep co-runners (the residency README)."""
        torch, args, S = self.torch, self.args, self.sms
        for c in (1, 2, 4, 16):  # warm up and compile
            self.chase(c * S)
        self.fill(128, 1.0)
        self.fill(512, 1.0)
        torch.cuda.synchronize()
        print(f"gpu {self.gpu_name}: {S} SMs; chase 512 threads x {args.steps} dependent loads (4 MiB table); "
              f"fill CTAs sleep {args.cta_us:g} us; reps {args.reps}", flush=True)
        with self.profiled():
            for fill_threads in (128, 512):
                for per_sm in (1, 2, 4, 16):
                    labels = dict(ctas=per_sm * S, ctas_per_sm=min(per_sm, 4), waves=max(1, per_sm // 4),
                                  fill_threads=fill_threads, reps=args.reps)
                    got = self.alone_then_beside(
                        lambda p=per_sm: self.chase(p * S), lambda t, f=fill_threads: self.fill(f, t), 4.0, args.reps,
                        ("chase_alone", dict(corunner="none", **labels)),
                        ("chase_fill", dict(corunner=f"fill_sleep{fill_threads}", **labels)))
                    print(f"chase {per_sm * S:>5} CTAs ({labels['ctas_per_sm']}/SM alone) beside fill_sleep "
                          f"{fill_threads} threads: {outcome(*got)}", flush=True)


def main(argv=None) -> None:
    run(Residency, parse_args(argv), least_reps=20)


if __name__ == "__main__":
    main()
