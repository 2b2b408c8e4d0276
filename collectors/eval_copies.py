"""Evaluation cases for the attribution, third set: copy engines beside kernels, and kernel families no earlier set has.

``tests/data/eval/EXPECTED.md`` ("Copy engines beside kernels") lists the cases and their expected classes, fixed
before any was collected. Every case is a pair: side A and side B each run alone first (``case:<side>_alone``), then
together on two streams (``case:<casename>``), launches interleaved, each side's launch count chosen from their alone
times so that both streams stay busy for about the same time. Both sides are judged: the beside-range carries
``expect_kernel=<class>`` for its kernels and ``expect_copy=<class>`` for its copies (or ``expect=<class>`` for
both sides' kernels). The measured part is bracketed by cudaProfilerStart/Stop (``--profile-range``).

Sides:

* ``triton_add``: a Triton elementwise add (``@triton.jit``, 4096 elements per program, 8 warps) of two fp32 tensors
  of 1 GiB into a third: a full-grid, DRAM-bound kernel;
* ``softmax``: ``torch.softmax`` over a (16384, 16384) fp16 tensor along its rows (PyTorch's softmax kernel);
* ``sdpa``: ``scaled_dot_product_attention`` bf16 (B 4, H 16, L 4096, D 128, causal): flash/cuDNN attention,
  compute-bound;
* ``conv``: ``conv2d`` bf16, NCHW (64, 256, 56, 56), 256 filters of 3x3, padding 1 (cuDNN): compute-bound;
* ``d2d``: a same-device copy of 1 GiB (``dst.copy_(src, non_blocking=True)``: a copy engine);
* ``h2d``: a copy of 256 MiB from pinned host memory (a copy engine, over PCIe);
* ``hold_spin``: ``eval_cases``' kernel holding S/2 SMs (no memory traffic), launched first and sized to outlast the
  victim (the one co-runner that is not a pair: it is not judged, it never runs alone).

Cases: ``triton_add_d2d``, ``softmax_d2d``, ``sdpa_d2d``, ``triton_add_h2d`` (a kernel beside copies),
``triton_add_softmax`` (two DRAM-bound kernels), ``conv_hold_half`` (cuDNN convolution beside hold_spin on S/2 SMs):
the default set. A fourth set (``--cases`` ``CASES_4``), for the rule as revised after the third: ``cumsum_d2d``,
``sort_d2d``, ``mm_fp32_d2d``, ``cumsum_d2h`` and ``d2d_twin``, with these sides:

* ``cumsum``: ``torch.cumsum`` over 256 M fp32 (PyTorch's scan);
* ``sort``: ``torch.sort`` of 64 M fp32 (CUB's radix sort: several DRAM-bound passes);
* ``mm_fp32``: ``torch.mm`` fp32 4096^3 with TF32 off (SIMT single-precision GEMM);
* ``d2h``: a copy of 256 MiB to pinned host memory;
* ``d2d2``: a second same-device copy of 1 GiB, other buffers (the twin of ``d2d``).

A fifth set (``--cases`` ``CASES_5``), for the rule as revised after the fourth: ``dgemm_d2d``, ``bmm_d2d``,
``topk_d2d`` and ``spin_d2d``, with these sides:

* ``dgemm``: ``torch.mm`` fp64 2048^3 (double-precision GEMM: little DRAM traffic, much L2 traffic);
* ``bmm``: ``torch.bmm`` bf16, 64 batches of 1024x1024x1024 (cuBLAS batched GEMM);
* ``topk``: ``torch.topk`` of the 1024 largest of 64 M fp32 (radix selection);
* ``spin``: ``eval_cases``' ``resident_spin`` (2 CTAs of 128 threads on every SM, no memory traffic), for as long
  as one ``d2d`` copy, launched like any other side (so it runs alone too, and its DRAM rate alone is measured).
"""

from __future__ import annotations

import argparse

from cuda_bench import CudaBench, run
from eval_cases import SRC, hold_smem

try:  # the Triton side; absent on CPU-only machines, where this file is only compiled
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover
    triton = None

if triton is not None:
    @triton.jit
    def triton_add(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(c_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)

GiB = 2**30
MiB = 2**20

# per case: its two sides, and the expected classes (tests/data/eval/EXPECTED.md): labels of the beside-range
PAIRS = {
    "triton_add_d2d": ("triton_add", "d2d", dict(expect_kernel="none", expect_copy="dram_bw", cause="copy_engine")),
    "softmax_d2d": ("softmax", "d2d", dict(expect_kernel="none", expect_copy="dram_bw", cause="copy_engine")),
    "sdpa_d2d": ("sdpa", "d2d", dict(expect_kernel="none", expect_copy="dram_bw|none", cause="copy_engine")),
    "triton_add_h2d": ("triton_add", "h2d", dict(expect_kernel="none", expect_copy="dram_bw|none",
                                                 cause="copy_engine")),
    "triton_add_softmax": ("triton_add", "softmax", dict(expect="dram_bw", cause="dram")),
}
HELD = {"conv_hold_half": ("conv", dict(expect="sm", cause="sms"))}
CASES = (*PAIRS, *HELD)
# the fourth set (tests/data/eval/EXPECTED.md, "Copy engines, the rule revised")
PAIRS_4 = {
    "cumsum_d2d": ("cumsum", "d2d", dict(expect_kernel="none", expect_copy="dram_bw", cause="copy_engine")),
    "sort_d2d": ("sort", "d2d", dict(expect_kernel="none", expect_copy="dram_bw", cause="copy_engine")),
    "mm_fp32_d2d": ("mm_fp32", "d2d", dict(expect_kernel="none", expect_copy="dram_bw", cause="copy_engine")),
    "cumsum_d2h": ("cumsum", "d2h", dict(expect_kernel="none", expect_copy="none", cause="copy_engine")),
    "d2d_twin": ("d2d", "d2d2", dict(expect_copy="dram_bw", cause="dram")),
}
PAIRS.update(PAIRS_4)
CASES_4 = tuple(PAIRS_4)
# the fifth set (tests/data/eval/EXPECTED.md, "Copy engines, the gate revised")
PAIRS_5 = {
    "dgemm_d2d": ("dgemm", "d2d", dict(expect_kernel="none", expect_copy="dram_bw", cause="copy_engine")),
    "bmm_d2d": ("bmm", "d2d", dict(expect_kernel="none", expect_copy="dram_bw", cause="copy_engine")),
    "topk_d2d": ("topk", "d2d", dict(expect_kernel="none", expect_copy="dram_bw", cause="copy_engine")),
    "spin_d2d": ("spin", "d2d", dict(expect_kernel="none", expect_copy="none", cause="copy_engine")),
}
PAIRS.update(PAIRS_5)
CASES_5 = tuple(PAIRS_5)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=20, help="launches of the longer side per case (>= 20)")
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of the cases, in this order")
    p.add_argument("--profile-range", action="store_true", help="cudaProfilerStart/Stop around the measured part")
    return p.parse_args(argv)


class EvalCopies(CudaBench):
    def __init__(self, args: argparse.Namespace):
        super().__init__()
        torch, cp, self.args = self.torch, self.cp, args
        S = self.sms
        self.hold_smem = hold_smem(self.smem_sm, self.smem_optin)  # one CTA per SM, as eval_cases
        mod = cp.RawModule(code=SRC, options=("-std=c++17",))
        self.k_hold = mod.get_function("hold_spin")
        self.k_hold.max_dynamic_shared_size_bytes = self.hold_smem
        self.k_resident = mod.get_function("resident_spin")
        self.k_resident.preferred_shared_memory_carveout = 100
        self.sink = cp.zeros(1024, dtype=cp.int32)
        self.held = round(S / 2)

        self.victim_stream = torch.cuda.Stream()
        self.corunner_stream = torch.cuda.Stream()
        gen = torch.Generator(device="cuda").manual_seed(13)
        n = self.add_n = GiB // 4
        self.xa, self.xb = (torch.rand(n, device="cuda", generator=gen) for _ in range(2))
        self.xc = torch.empty_like(self.xa)
        self.sm_in = torch.randn(16384, 16384, device="cuda", dtype=torch.float16, generator=gen)
        self.sdpa_shape = (4, 16, 4096, 128)
        self.q, self.k, self.v = (torch.randn(*self.sdpa_shape, device="cuda", dtype=torch.bfloat16, generator=gen)
                                  for _ in range(3))
        self.conv_x = torch.randn(64, 256, 56, 56, device="cuda", dtype=torch.bfloat16, generator=gen)
        self.conv_w = torch.randn(256, 256, 3, 3, device="cuda", dtype=torch.bfloat16, generator=gen)
        self.d2d_src = torch.rand(GiB // 4, device="cuda", generator=gen)
        self.d2d_dst = torch.empty_like(self.d2d_src)
        self.h2d_src = torch.rand(256 * MiB // 4).pin_memory()
        self.h2d_dst = torch.empty(256 * MiB // 4, device="cuda")
        self.d2h_src = torch.rand(256 * MiB // 4, device="cuda", generator=gen)
        self.d2h_dst = torch.empty(256 * MiB // 4).pin_memory()
        self.d2d2_src, self.d2d2_dst = torch.rand(GiB // 4, device="cuda", generator=gen), torch.empty(GiB // 4,
                                                                                                       device="cuda")
        self.cs_in = torch.rand(256 * MiB, device="cuda", generator=gen)
        self.sort_in = torch.rand(64 * MiB, device="cuda", generator=gen)
        self.mm_a, self.mm_b = (torch.randn(4096, 4096, device="cuda", generator=gen) for _ in range(2))
        torch.backends.cuda.matmul.allow_tf32 = False
        self.dg_a, self.dg_b = (torch.randn(2048, 2048, device="cuda", dtype=torch.float64, generator=gen)
                                for _ in range(2))
        self.bmm_a, self.bmm_b = (torch.randn(64, 1024, 1024, device="cuda", dtype=torch.bfloat16, generator=gen)
                                  for _ in range(2))
        self.topk_in = torch.rand(64 * MiB, device="cuda", generator=gen)
        self.spin_ns = 500_000  # about one d2d copy (set in main from its measured time)
        self.sides = {"triton_add": self.add, "softmax": self.softmax, "sdpa": self.sdpa, "conv": self.conv,
                      "d2d": self.d2d, "h2d": self.h2d, "cumsum": self.cumsum, "sort": self.sort,
                      "mm_fp32": self.mm_fp32, "d2h": self.d2h, "d2d2": self.d2d2, "dgemm": self.dgemm,
                      "bmm": self.bmm, "topk": self.topk, "spin": self.spin}
        torch.cuda.synchronize()

    # sides -----------------------------------------------------------------
    def add(self):
        n, block = self.add_n, 4096
        triton_add[(triton.cdiv(n, block),)](self.xa, self.xb, self.xc, n, BLOCK=block, num_warps=8)

    def softmax(self):
        self.torch.softmax(self.sm_in, dim=-1)

    def sdpa(self):
        self.torch.nn.functional.scaled_dot_product_attention(self.q, self.k, self.v, is_causal=True)

    def conv(self):
        self.torch.nn.functional.conv2d(self.conv_x, self.conv_w, padding=1)

    def d2d(self):
        self.d2d_dst.copy_(self.d2d_src, non_blocking=True)

    def h2d(self):
        self.h2d_dst.copy_(self.h2d_src, non_blocking=True)

    def d2h(self):
        self.d2h_dst.copy_(self.d2h_src, non_blocking=True)

    def d2d2(self):
        self.d2d2_dst.copy_(self.d2d2_src, non_blocking=True)

    def cumsum(self):
        self.torch.cumsum(self.cs_in, dim=0)

    def sort(self):
        self.torch.sort(self.sort_in)

    def mm_fp32(self):
        self.torch.mm(self.mm_a, self.mm_b)

    def dgemm(self):
        self.torch.mm(self.dg_a, self.dg_b)

    def bmm(self):
        self.torch.bmm(self.bmm_a, self.bmm_b)

    def topk(self):
        self.torch.topk(self.topk_in, 1024)

    def spin(self):
        self.k_resident((2 * self.sms,), (128,), (self.np.uint64(self.spin_ns), self.sink), stream=self._cp_stream())

    def hold(self, ctas: int, duration_ns: float):
        self.k_hold((ctas,), (512,), (self.np.uint64(int(duration_ns)), self.sink),
                    shared_mem=self.hold_smem, stream=self._cp_stream())

    def once_ms(self, fn, stream) -> float:
        torch = self.torch
        s, e = self.timed(fn, 3, stream)
        torch.cuda.synchronize()
        return s.elapsed_time(e) / 3

    # cases -----------------------------------------------------------------
    def pair(self, casename: str, a: str, b: str, labels: dict) -> None:
        """Sides ``a`` and ``b`` alone (each on its own stream, in its own range), then together: ``a`` on the
        victim stream and ``b`` on the co-runner stream, launches interleaved, b first in every round; the side with
        the shorter launches gets proportionally more of them (the longer gets ``--reps``)."""
        from labels import case_range  # type: ignore[import-not-found]

        torch, reps = self.torch, self.args.reps
        fa, fb = self.sides[a], self.sides[b]
        streams = {a: self.victim_stream, b: self.corunner_stream}
        ta, tb = (self.once_ms(self.sides[s], streams[s]) for s in (a, b))
        n = {a: max(reps, round(reps * tb / ta)) if ta < tb else reps,
             b: max(reps, round(reps * ta / tb)) if tb < ta else reps}
        alone = {}
        for side in (a, b):
            torch.cuda.synchronize()
            with case_range(f"{side}_alone", corunner="none", reps=n[side]):
                s, e = self.timed(self.sides[side], n[side], streams[side])
                torch.cuda.synchronize()
            alone[side] = s.elapsed_time(e) / n[side]
        torch.cuda.synchronize()
        with case_range(casename, corunner=f"{a}+{b}", side_a=a, side_b=b, reps_a=n[a], reps_b=n[b], **labels):
            starts = {s: self._event() for s in (a, b)}
            ends = {s: self._event() for s in (a, b)}
            for side in (b, a):
                with torch.cuda.stream(streams[side]):
                    starts[side].record()
            for i in range(max(n.values())):
                for side, fn in ((b, fb), (a, fa)):
                    if i < n[side]:
                        with torch.cuda.stream(streams[side]):
                            fn()
            for side in (b, a):
                with torch.cuda.stream(streams[side]):
                    ends[side].record()
            torch.cuda.synchronize()
        for side in (a, b):
            beside = starts[side].elapsed_time(ends[side]) / n[side]
            print(f"{casename:>20} side {side:<11} x{n[side]:<4} {labels}: alone {alone[side]:.3f} ms, "
                  f"together {beside:.3f} ms ({beside / alone[side] - 1:+.1%})", flush=True)

    def beside_hold(self, casename: str, victim: str, labels: dict) -> None:
        """``victim`` alone, then beside hold_spin on S/2 SMs (launched first, sized to outlast it)."""
        reps, S = self.args.reps, self.sms
        cover = 1.5 * S / (S - self.held) + 0.25
        alone, beside, co_ms, covered = self.alone_then_beside(
            self.sides[victim], lambda t: self.hold(self.held, t * 1e6), cover, reps,
            (f"{victim}_alone", dict(corunner="none", reps=reps)),
            (casename, dict(corunner="hold_spin", held_sms=self.held, reps=reps, **labels)))
        print(f"{casename:>20} victim {victim:<11} beside hold_spin on {self.held} SMs {labels}: alone {alone:.3f} ms, "
              f"beside {beside:.3f} ms ({beside / alone - 1:+.1%}), co-runner {co_ms:.1f} ms, "
              f"covered={'yes' if covered else 'NO'}", flush=True)

    def main(self) -> None:
        torch, args = self.torch, self.args
        cases = [c.strip() for c in args.cases.split(",") if c.strip()]
        unknown = set(cases) - {*PAIRS, *HELD}
        if unknown:
            raise SystemExit(f"unknown cases {sorted(unknown)}; known: {[*PAIRS, *HELD]}")
        for _ in range(3):  # warm-up: every side once on each stream, and the spin kernel
            for stream in (self.victim_stream, self.corunner_stream):
                with torch.cuda.stream(stream):
                    for fn in self.sides.values():
                        fn()
            with torch.cuda.stream(self.corunner_stream):
                self.hold(self.held, 20_000)
            torch.cuda.synchronize()
        assert torch.allclose(self.xc, self.xa + self.xb)
        self.spin_ns = int(self.once_ms(self.d2d, self.victim_stream) * 1e6)
        print(f"gpu {self.gpu_name}: {self.sms} SMs, L2 {self.l2_bytes / MiB:g} MiB, hold_spin on {self.held} SMs, "
              f"reps {args.reps}; alone ms: "
              + ", ".join(f"{k} {self.once_ms(fn, self.victim_stream):.3f}" for k, fn in self.sides.items())
              + f"; torch {torch.__version__}, triton {triton.__version__}", flush=True)
        if args.profile_range:
            torch.cuda.cudart().cudaProfilerStart()
        for c in cases:
            if c in PAIRS:
                a, b, labels = PAIRS[c]
                self.pair(c, a, b, labels)
            else:
                victim, labels = HELD[c]
                self.beside_hold(c, victim, labels)
        torch.cuda.synchronize()
        if args.profile_range:
            torch.cuda.cudart().cudaProfilerStop()


def main(argv=None) -> None:
    run(EvalCopies, parse_args(argv), least_reps=20)


if __name__ == "__main__":
    main()
