"""Evaluation cases with collectives as victims (two GPUs; tests/data/eval/EXPECTED.md, "Collectives as victims").

Run under ``torchrun --nproc-per-node 2`` (``collectors/eval_cases.sh``, step ``comm``), NCCL with its default CTA
count. Each rank, after a warm-up:

1. ``case:allreduce_alone``: 20 all-reduces of 256 MiB bf16, one after the other;
2. ``case:gemm_alone``: 20 cuBLAS bf16 GEMMs 8192^3;
3. ``case:allreduce_then_gemm;corunner=gemm;victim=comm;expect=clock|none;expect_other=sm``: the all-reduces
   launched first from their own stream (as many as cover the GEMMs twice, the same count on both ranks), then the
   20 GEMMs on another stream (``expect`` is the collectives', ``expect_other`` the GEMMs');
4. ``case:allreduce_resident_spin;corunner=resident_spin;victim=comm;expect=sm``: ``resident_spin`` (eval_cases.py:
   2 CTAs of 128 threads on every SM, spinning on %globaltimer) launched first for long enough, then 20 all-reduces.

Prints CUDA-event timings per rank (alone vs beside).
"""

from __future__ import annotations

import argparse
import math
import os
import sys


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gemm", type=int, default=8192, help="M=N=K of the GEMM")
    p.add_argument("--mib", type=int, default=256, help="all-reduce size in MiB (bf16)")
    p.add_argument("--reps", type=int, default=20, help="victim launches per case (>= 20)")
    p.add_argument("--profile-range", action="store_true", help="cudaProfilerStart/Stop around the measured part")
    return p.parse_args(argv)


def main(argv=None) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import cupy as cp
    import numpy as np
    import torch
    import torch.distributed as dist
    from eval_cases import SRC  # type: ignore[import-not-found]
    from labels import case_range  # type: ignore[import-not-found]

    args = parse_args(argv)
    if args.reps < 20:
        raise SystemExit("--reps must be >= 20")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    S = torch.cuda.get_device_properties(local).multi_processor_count
    gen = torch.Generator(device="cuda").manual_seed(rank + 5)
    n = args.gemm
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=gen)
    c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    x = torch.randn(args.mib * 2**20 // 2, device=dev, dtype=torch.bfloat16, generator=gen)
    victim, comm, spin = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
    with cp.cuda.Device(local):
        k_resident = cp.RawModule(code=SRC, options=("-std=c++17",)).get_function("resident_spin")
        k_resident.preferred_shared_memory_carveout = 100  # max shared: the NCCL CTAs must fit beside it
        sink = cp.zeros(1024, dtype=cp.int32)
    reps = args.reps

    def gemm():
        torch.matmul(a, b, out=c)

    def allreduce():
        dist.all_reduce(x)  # sums grow 2x a call: ~100 calls stay far under bf16's range; values don't matter

    def resident(duration_ns: float):
        with cp.cuda.Device(local), cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            k_resident((2 * S,), (128,), (np.uint64(int(duration_ns)), sink))

    def ev():
        return torch.cuda.Event(enable_timing=True)

    def timed(fn, count, stream):
        s, e = ev(), ev()
        with torch.cuda.stream(stream):
            s.record()
            for _ in range(count):
                fn()
            e.record()
        return s, e

    for _ in range(3):  # warm-up: cuBLAS handle and kernel choice, NCCL communicator and channels, the spin kernel
        with torch.cuda.stream(victim):
            gemm()
        with torch.cuda.stream(comm):
            allreduce()
        with torch.cuda.stream(spin):
            resident(10_000)
        torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    if args.profile_range:
        torch.cuda.cudart().cudaProfilerStart()
    gl = dict(m=n, n=n, k=n, dtype="bf16")
    al = dict(bytes=args.mib * 2**20, world=world)

    def sync():
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()

    sync()
    with case_range("allreduce_alone", corunner="none", reps=reps, dtype="bf16", **al):
        s, e = timed(allreduce, reps, comm)
        torch.cuda.synchronize()
    ar_alone = s.elapsed_time(e) / reps
    sync()
    with case_range("gemm_alone", corunner="none", reps=reps, **gl):
        s, e = timed(gemm, reps, victim)
        torch.cuda.synchronize()
    gemm_alone = s.elapsed_time(e) / reps

    # as many all-reduces as cover the GEMMs twice over, the same on all ranks
    count = torch.tensor([math.ceil(2 * gemm_alone * reps / ar_alone) + 1], device=dev)
    dist.all_reduce(count, op=dist.ReduceOp.MAX)
    count = int(count.item())
    sync()
    # the expectation is the collectives' (victim=comm); the GEMMs' is expect_other
    with case_range("allreduce_then_gemm", corunner="gemm", victim="comm", expect="clock|none", expect_other="sm",
                    allreduces=count, reps=reps, **gl, **al):
        co_s, co_e = timed(allreduce, count, comm)
        s, e = timed(gemm, reps, victim)
        torch.cuda.synchronize()
    gemm_beside = s.elapsed_time(e) / reps
    ar_beside = co_s.elapsed_time(co_e) / count
    covered = e.elapsed_time(co_e) > 0
    sync()
    with case_range("allreduce_resident_spin", corunner="resident_spin", victim="comm", expect="sm", reps=reps,
                    dtype="bf16", **al):
        with torch.cuda.stream(spin):
            resident(4 * ar_alone * reps * 1e6)  # 4x the all-reduces alone: they stay beside it when slowed
        s, e = timed(allreduce, reps, comm)
        torch.cuda.synchronize()
    ar_spin = s.elapsed_time(e) / reps
    sync()
    if args.profile_range:
        torch.cuda.cudart().cudaProfilerStop()
    print(f"rank {rank}/{world} ({torch.cuda.get_device_name(local)}, {S} SMs, nccl {torch.cuda.nccl.version()}): "
          f"allreduce {args.mib} MiB alone {ar_alone:.3f} ms; allreduce_then_gemm: {count} all-reduces "
          f"{ar_beside:.3f} ms each ({ar_beside / ar_alone - 1:+.1%}), gemm alone {gemm_alone:.3f} ms, beside "
          f"{gemm_beside:.3f} ms ({gemm_beside / gemm_alone - 1:+.1%}), covered={'yes' if covered else 'NO'}; "
          f"allreduce_resident_spin: {ar_spin:.3f} ms ({ar_spin / ar_alone - 1:+.1%})", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
