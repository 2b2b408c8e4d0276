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

import math
import os
import sys


def parse_args(argv=None):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gemm_allreduce import parse_args as parse  # type: ignore[import-not-found]

    return parse(__doc__, argv)


def main(argv=None) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import cupy as cp
    import numpy as np
    import torch
    import torch.distributed as dist
    from eval_cases import SRC  # type: ignore[import-not-found]
    from gemm_allreduce import Rank  # type: ignore[import-not-found]
    from labels import case_range  # type: ignore[import-not-found]

    args = parse_args(argv)
    r = Rank(args, seed=5)
    rank, world, S, local = r.rank, r.world, r.sms, r.local
    n, reps = args.gemm, args.reps
    victim, comm, gemm, allreduce, timed, sync = r.victim, r.comm, r.gemm, r.allreduce, r.timed, r.sync
    spin = torch.cuda.Stream()
    with cp.cuda.Device(local):
        k_resident = cp.RawModule(code=SRC, options=("-std=c++17",)).get_function("resident_spin")
        k_resident.preferred_shared_memory_carveout = 100  # max shared: the NCCL CTAs must fit beside it
        sink = cp.zeros(1024, dtype=cp.int32)

    def resident(duration_ns: float):
        with cp.cuda.Device(local), cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            k_resident((2 * S,), (128,), (np.uint64(int(duration_ns)), sink))

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
    count = torch.tensor([math.ceil(2 * gemm_alone * reps / ar_alone) + 1], device=r.dev)
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
