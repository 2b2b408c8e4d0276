"""Known-cause contention collector whose kernels carry plain, user-like names.

Like ``contention.py``, every victim runs alone and then beside a co-runner whose effect is known by
construction, but no kernel here matches one of traceql's special name patterns (the old
``spin_hold_sms`` / ``half_sm_stream`` do): the cause must be found from the trace, not the name.

Kernels (one CuPy RawModule, all sizes derived from the device's properties):

* ``busy_wait``: holds N SMs: one 1024-thread CTA per SM (forced by a dynamic shared-memory request
  of ~70 % of the SM's shared memory, so neither a second copy nor a cuBLAS GEMM CTA fits beside it),
  spins on ``%globaltimer`` and touches no memory;
* ``stream_triad``: ``a[i] = b[i] + s * c[i]`` over float4, grid-stride over a full grid of many
  waves, >= 1 GiB per array. Its CTAs (1024 threads) ask for enough dynamic shared memory that two
  fit on an idle SM but none beside ``busy_wait``: held SMs are really lost to it;
* ``sweep_update`` (DRAM variant, buffer >= 2 GiB >> L2) and ``sweep_relax`` (L2-resident variant,
  buffer = 0.6 x L2: one fits, two don't, many passes): the same in-place grid-stride update
  ``x = 0.999 x + 1`` pinned to half the SMs (grid = S/2, one CTA per SM forced by shared memory).

Victims: a bf16 GEMM through ``torch.matmul`` (cuBLAS, 8192^3 by default), ``stream_triad``,
copy-engine copies (``dst.copy_(src, non_blocking=True)``, 2 GiB, same device) and the sweeps.

Cases (each victim alone first in ``case:<victim>_alone;corunner=none;...``, then beside its
co-runner in ``case:<victim>_<corunner>;corunner=<corunner>;...``; the co-runner is launched first,
on a stream of its own, and is sized to cover every victim launch; ``cause=`` names the known cause):

1. ``gemm`` beside ``busy_wait`` holding S/8, S/4 and S/2 SMs (``cause=sms``);
2. ``stream_triad`` beside ``busy_wait`` holding S/4 SMs (``cause=sms``, bandwidth-bound victim);
3. ``copy_alone`` (the copies' own duration), then ``gemm`` beside copies (``cause=copy_engine``);
4. ``copy_alone`` again, then ``stream_triad`` beside copies (``cause=copy_engine``);
5. ``sweep_update`` beside its twin on the other half of the SMs (``cause=dram``);
6. ``sweep_relax`` beside its twin (``cause=l2``);
7. ``gemm_mixed_k``: cuBLAS GEMMs M=N=8192 with two K (``--mixed-k``, 4096 and 8192 by default)
   alternating inside NVTX ``step`` ranges, alone and beside ``busy_wait`` holding S/4 SMs (one kernel
   signature, two durations: a conflation trap for per-signature baselines). K=1024 is not used:
   cuBLAS picked another kernel for it on H100, so it would not share the signature.

Timings printed are CUDA-event means per launch; ``covered=yes`` says the co-runner outlasted the
victim's last launch.

Seen on H100 and H200 (tests/data/known_cause.md): the same-device D2D copies of cases 3 and 4 do not
run concurrently with the victim kernels. Copy and kernel alternate, and each memcpy's recorded end
stretches to the kernel's end, so the event-timed "beside" figure there is mostly queueing, not slower
kernels.
"""

from __future__ import annotations

import argparse
import math

from cuda_bench import BUSY_WAIT_SRC, CudaBench, run

SRC = BUSY_WAIT_SRC + r"""
extern "C" __global__ void __launch_bounds__(1024, 2)
stream_triad(float4 *__restrict__ a, const float4 *__restrict__ b, const float4 *__restrict__ c,
             float s, long long n4) {
    extern __shared__ int smem[];
    long long stride = (long long)gridDim.x * blockDim.x;
    #pragma unroll 4
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 x = b[i], y = c[i];
        a[i] = make_float4(x.x + s * y.x, x.y + s * y.y, x.z + s * y.z, x.w + s * y.w);
    }
    if (n4 < 0) a[0].x = (float)smem[threadIdx.x];
}

__device__ __forceinline__ float4 relax(float4 v) {
    return make_float4(v.x * 0.999f + 1.0f, v.y * 0.999f + 1.0f, v.z * 0.999f + 1.0f, v.w * 0.999f + 1.0f);
}

__device__ __forceinline__ void sweep(float4 *buf, long long n4, int passes) {
    long long stride = (long long)gridDim.x * blockDim.x;
    long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (int p = 0; p < passes; ++p) {
        long long i = tid;
        for (; i + 3 * stride < n4; i += 4 * stride) {  // four loads in flight per thread
            float4 v0 = buf[i], v1 = buf[i + stride], v2 = buf[i + 2 * stride], v3 = buf[i + 3 * stride];
            buf[i] = relax(v0); buf[i + stride] = relax(v1);
            buf[i + 2 * stride] = relax(v2); buf[i + 3 * stride] = relax(v3);
        }
        for (; i < n4; i += stride) buf[i] = relax(buf[i]);
    }
}

extern "C" __global__ void __launch_bounds__(1024, 1)
sweep_update(float4 *buf, long long n4, int passes) {
    extern __shared__ int smem[];
    sweep(buf, n4, passes);
    if (n4 < 0) buf[0].x = (float)smem[threadIdx.x];
}

extern "C" __global__ void __launch_bounds__(1024, 1)
sweep_relax(float4 *buf, long long n4, int passes) {
    extern __shared__ int smem[];
    sweep(buf, n4, passes);
    if (n4 < 0) buf[0].x = (float)smem[threadIdx.x];
}
"""

GiB = 2**30


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gemm", type=int, default=8192, help="M=N=K of the victim GEMM (M=N of the mixed-K one)")
    p.add_argument("--reps", type=int, default=20, help="victim launches per case (>= 10)")
    p.add_argument("--mixed-k", default="4096,8192",
                   help="the two K of the mixed-K GEMMs (M=N=--gemm); cuBLAS must pick one kernel for both: on H100 "
                        "K=1024 got another kernel (256x128 tiles) than K=4096 and 8192 (320x128)")
    p.add_argument("--profile-range", action="store_true", help="cudaProfilerStart/Stop around the measured part")
    return p.parse_args(argv)


class Bench(CudaBench):
    def __init__(self, args: argparse.Namespace):
        super().__init__()
        torch, cp, self.args = self.torch, self.cp, args
        S, smem_sm, optin, reserved = self.sms, self.smem_sm, self.smem_optin, self.smem_reserved
        kib = 1024
        # busy_wait / sweeps: > half the SM's shared memory, so one CTA per SM, and little left beside it.
        self.hold_smem = min(optin, int(smem_sm * 0.7) // kib * kib)
        # stream_triad: two CTAs fit on an idle SM, none beside a busy_wait CTA.
        lo = smem_sm - self.hold_smem - 2 * reserved  # must ask for more than this
        hi = smem_sm // 2 - reserved  # and at most this
        assert lo < hi, (smem_sm, self.hold_smem, reserved)
        self.triad_smem = (lo + hi) // 2 // kib * kib
        self.held = {"S/8": S // 8, "S/4": S // 4, "S/2": S // 2}

        mod = cp.RawModule(code=SRC, options=("-std=c++17",))
        self.k_busy = mod.get_function("busy_wait")
        self.k_triad = mod.get_function("stream_triad")
        self.k_sweep = {"dram": mod.get_function("sweep_update"), "l2": mod.get_function("sweep_relax")}
        for k in (self.k_busy, *self.k_sweep.values()):
            k.max_dynamic_shared_size_bytes = self.hold_smem
        self.k_triad.max_dynamic_shared_size_bytes = self.triad_smem
        self.sink = cp.zeros(1024, dtype=cp.int32)

        self.victim_stream = torch.cuda.Stream()
        self.corunner_stream = torch.cuda.Stream()
        gen = torch.Generator(device="cuda").manual_seed(7)
        n = args.gemm
        bf = torch.bfloat16
        self.a = torch.randn(n, n, device="cuda", dtype=bf, generator=gen)
        self.b = torch.randn(n, n, device="cuda", dtype=bf, generator=gen)
        self.c = torch.empty(n, n, device="cuda", dtype=bf)
        self.ks = tuple(int(k) for k in args.mixed_k.split(","))
        self.ak = {k: torch.randn(n, k, device="cuda", dtype=bf, generator=gen) for k in self.ks}
        self.bk = {k: torch.randn(k, n, device="cuda", dtype=bf, generator=gen) for k in self.ks}
        self.ck = torch.empty(n, n, device="cuda", dtype=bf)

        # stream_triad: >= 1 GiB per array and >> L2
        self.triad_bytes = max(GiB, 16 * self.l2_bytes) // 16 * 16
        elems = self.triad_bytes // 4
        self.tb = torch.rand(elems, device="cuda", generator=gen)
        self.tc = torch.rand(elems, device="cuda", generator=gen)
        self.ta = torch.empty_like(self.tb)
        self.triad_n4 = elems // 4
        self.triad_block = 1024
        self.triad_grid = max(2 * S, math.ceil(self.triad_n4 / (self.triad_block * 4)))  # ~4 float4 a thread

        self.copy_bytes = 2 * GiB
        self.copy_src = torch.rand(self.copy_bytes // 4, device="cuda", generator=gen)
        self.copy_dst = torch.empty_like(self.copy_src)

        # sweeps: DRAM variant >> L2; L2 variant 0.6 x L2 (fits alone, not beside its twin)
        self.sweep_bytes = {"dram": max(2 * GiB, 32 * self.l2_bytes) // 16 * 16,
                            "l2": int(self.l2_bytes * 0.6) // 16 * 16}
        self.sweep_bufs = {ws: [torch.rand(b // 4, device="cuda", generator=gen) for _ in range(2)]
                           for ws, b in self.sweep_bytes.items()}
        # DRAM: one pass; L2: about 4 GiB of L2 traffic (read + write) per launch
        self.sweep_passes = {"dram": 1, "l2": max(8, round(4 * GiB / (2 * self.sweep_bytes["l2"])))}
        torch.cuda.synchronize()

    # kernels ---------------------------------------------------------------
    def gemm(self):
        self.torch.matmul(self.a, self.b, out=self.c)

    def gemm_k(self, k: int):
        self.torch.matmul(self.ak[k], self.bk[k], out=self.ck)

    def triad(self):
        np = self.np
        self.k_triad((self.triad_grid,), (self.triad_block,),
                     (self.ta.data_ptr(), self.tb.data_ptr(), self.tc.data_ptr(), np.float32(0.5),
                      np.int64(self.triad_n4)),
                     shared_mem=self.triad_smem, stream=self._cp_stream())

    def sweep(self, ws: str, which: int):
        np = self.np
        buf = self.sweep_bufs[ws][which]
        self.k_sweep[ws]((self.sms // 2,), (1024,),
                         (buf.data_ptr(), np.int64(buf.numel() // 4), np.int32(self.sweep_passes[ws])),
                         shared_mem=self.hold_smem, stream=self._cp_stream())

    def busy(self, ctas: int, duration_ns: float):
        self.k_busy((ctas,), (1024,), (self.np.uint64(int(duration_ns)), self.sink),
                    shared_mem=self.hold_smem, stream=self._cp_stream())

    def copy(self):
        self.copy_dst.copy_(self.copy_src, non_blocking=True)

    def case(self, victim: str, corunner: str, fn, co, cover: float, reps: int, **labels) -> tuple[float, float]:
        """Victim alone, then beside the co-runner, each in a labelled NVTX range.

        ``co(total_ms)`` launches the co-runner (current stream: the co-runner's), asked to last at
        least ``total_ms``: the victim's alone time for all launches times ``cover``.
        """
        labels["reps"] = reps
        alone, beside, co_ms, covered = self.alone_then_beside(
            fn, co, cover, reps, (f"{victim}_alone", dict(corunner="none", **labels)),
            (f"{victim}_{corunner}", dict(corunner=corunner, **labels)))
        shown = {k: v for k, v in labels.items() if k != "reps"}
        print(f"{victim:>12} beside {corunner:<12} {shown}: alone {alone:.3f} ms, beside {beside:.3f} ms "
              f"({beside / alone - 1:+.1%}), co-runner {co_ms:.1f} ms, "
              f"covered={'yes' if covered else 'NO'}", flush=True)
        return alone, beside

    def copy_alone(self, reps: int, **labels) -> float:
        from labels import case_range  # type: ignore[import-not-found]

        torch = self.torch
        torch.cuda.synchronize()
        with case_range("copy_alone", corunner="none", bytes=self.copy_bytes, cause="copy_engine", reps=reps,
                        **labels):
            s, e = self.timed(self.copy, reps, self.corunner_stream)
            torch.cuda.synchronize()
        ms = s.elapsed_time(e) / reps
        print(f"{'copy':>12} alone {'':<18} {labels}: {ms:.3f} ms per {self.copy_bytes / GiB:g} GiB copy "
              f"({2 * self.copy_bytes / ms / 1e9:.2f} TB/s read+write)", flush=True)
        return ms

    def mixed_k(self, held: int, reps: int) -> None:
        """GEMMs of M=N=gemm, K in self.ks alternating inside NVTX ``step`` ranges, alone then beside busy_wait."""
        from labels import case_range, nvtx_range  # type: ignore[import-not-found]

        torch, n = self.torch, self.args.gemm
        labels = dict(cause="sms", held_sms=held, m=n, n=n, k="/".join(map(str, self.ks)), dtype="bf16", steps=reps)

        def steps() -> list[list[object]]:
            evs = []
            with torch.cuda.stream(self.victim_stream):
                for _ in range(reps):
                    with nvtx_range("step"):
                        row = [self._event()]
                        row[0].record()
                        for k in self.ks:
                            self.gemm_k(k)
                            ev = self._event()
                            ev.record()
                            row.append(ev)
                        evs.append(row)
            return evs

        def per_k(evs) -> dict[int, float]:
            return {k: sum(r[i].elapsed_time(r[i + 1]) for r in evs) / len(evs) for i, k in enumerate(self.ks)}

        torch.cuda.synchronize()
        with case_range("gemm_mixed_k_alone", corunner="none", **labels):
            evs = steps()
            torch.cuda.synchronize()
        alone = per_k(evs)
        total = sum(alone.values()) * reps
        with case_range("gemm_mixed_k_busy_wait", corunner="busy_wait", **labels):
            co_end = self._event()
            with torch.cuda.stream(self.corunner_stream):
                self.busy(held, total * self.sm_cover(held) * 1e6)
                co_end.record()
            evs = steps()
            torch.cuda.synchronize()
        beside = per_k(evs)
        covered = evs[-1][-1].elapsed_time(co_end) > 0
        for k in self.ks:
            print(f"{'gemm_mixed_k':>12} beside {'busy_wait':<12} {{'held_sms': {held}, 'k': {k}}}: "
                  f"alone {alone[k]:.3f} ms, beside {beside[k]:.3f} ms ({beside[k] / alone[k] - 1:+.1%}), "
                  f"covered={'yes' if covered else 'NO'}", flush=True)

    def sm_cover(self, held: int) -> float:
        """How much longer than the victim's alone time a busy_wait holding ``held`` SMs must last.

        S/(S-held) is the work-conserving bound of the victim's slowdown; wave quantization can add some.
        """
        return 1.5 * self.sms / (self.sms - held) + 0.25

    # main --------------------------------------------------------------------
    def warm_up(self) -> None:
        torch = self.torch
        for _ in range(3):
            with torch.cuda.stream(self.victim_stream):
                self.gemm()
                for k in self.ks:
                    self.gemm_k(k)
                self.triad()
                for ws in ("dram", "l2"):
                    self.sweep(ws, 0)
                    self.sweep(ws, 1)
            with torch.cuda.stream(self.corunner_stream):
                for n in self.held.values():
                    self.busy(n, 20_000)
                self.copy()
            torch.cuda.synchronize()

    def main(self) -> None:
        torch, args = self.torch, self.args
        reps = args.reps
        S, mib = self.sms, 2**20
        print(f"gpu {self.gpu_name}: {S} SMs, L2 {self.l2_bytes / mib:g} MiB, hold smem {self.hold_smem // 1024} KiB, "
              f"triad smem {self.triad_smem // 1024} KiB, triad {self.triad_bytes / GiB:g} GiB/array "
              f"grid {self.triad_grid}, sweep dram {self.sweep_bytes['dram'] / GiB:g} GiB x "
              f"{self.sweep_passes['dram']} pass, sweep l2 {self.sweep_bytes['l2'] / mib:.1f} MiB x "
              f"{self.sweep_passes['l2']} passes, copy {self.copy_bytes / GiB:g} GiB, reps {reps}; "
              f"torch {torch.__version__}, cupy {self.cp.__version__}", flush=True)
        self.warm_up()
        if args.profile_range:
            torch.cuda.cudart().cudaProfilerStart()
        n = args.gemm
        gemm_labels = dict(m=n, n=n, k=n, dtype="bf16")

        # 1. gemm beside busy_wait holding S/8, S/4, S/2 SMs
        for held in self.held.values():
            self.case("gemm", "busy_wait", self.gemm, lambda t, h=held: self.busy(h, t * 1e6),
                      self.sm_cover(held), reps, cause="sms", held_sms=held, **gemm_labels)
        # 2. stream_triad beside busy_wait holding S/4 SMs
        h4 = self.held["S/4"]
        self.case("stream_triad", "busy_wait", self.triad, lambda t: self.busy(h4, t * 1e6), self.sm_cover(h4), reps,
                  cause="sms", held_sms=h4, bytes=3 * self.triad_bytes)

        # 3./4. copy-engine copies: their own duration alone first, then beside gemm / stream_triad
        def copies(t: float, copy_ms: float) -> None:
            for _ in range(math.ceil(t / copy_ms) + 1):
                self.copy()

        copy_ms = self.copy_alone(reps, victim="gemm")
        self.case("gemm", "copy", self.gemm, lambda t: copies(t, copy_ms), 2.0, reps,
                  cause="copy_engine", bytes=self.copy_bytes, **gemm_labels)
        copy_ms = self.copy_alone(reps, victim="stream_triad")
        self.case("stream_triad", "copy", self.triad, lambda t: copies(t, copy_ms), 2.0, reps,
                  cause="copy_engine", bytes=self.copy_bytes, triad_bytes=3 * self.triad_bytes)

        # 5./6. two half-SM sweeps side by side: DRAM-streaming, then L2-resident
        for ws, name, cause in (("dram", "sweep_update", "dram"), ("l2", "sweep_relax", "l2")):
            self.case(name, name, lambda w=ws: self.sweep(w, 0),
                      lambda t, w=ws: [self.sweep(w, 1) for _ in range(reps + 3)], 1.0, reps,
                      cause=cause, ctas=S // 2, ws=ws, bytes=self.sweep_bytes[ws], passes=self.sweep_passes[ws])

        # 7. one signature, two durations: mixed-K GEMMs alone and beside busy_wait(S/4)
        self.mixed_k(h4, reps)
        torch.cuda.synchronize()
        if args.profile_range:
            torch.cuda.cudart().cudaProfilerStop()


def main(argv=None) -> None:
    run(Bench, parse_args(argv), least_reps=10, why=" (confidence intervals need them)")


if __name__ == "__main__":
    main()
