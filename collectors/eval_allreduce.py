"""Evaluation case ``gemm_allreduce_ctas16`` (two GPUs; tests/data/eval/EXPECTED.md): GEMM beside NCCL all-reduce.

Run under ``torchrun --nproc-per-node 2`` with ``NCCL_MAX_CTAS=16`` set by whoever launches it
(``collectors/eval_cases.sh`` does). Each rank, after a warm-up:

1. ``case:gemm_alone;corunner=none;...``: 20 cuBLAS bf16 GEMMs 8192^3 on the victim stream;
2. ``case:allreduce_alone;corunner=none;...``: 20 all-reduces of 256 MiB bf16, one after the other;
3. ``case:gemm_allreduce_ctas16;corunner=allreduce;expect=sm;cause=sms;...``: the all-reduces, launched first from
   their own stream (ProcessGroupNCCL runs them on its NCCL stream, which waits on that one), as many back to back
   as cover the 20 GEMMs (the same count on both ranks), then the 20 GEMMs on the victim stream.

Prints CUDA-event timings per rank (alone vs beside) like ``known_cause.py``.
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
    import torch
    import torch.distributed as dist
    from gemm_allreduce import Rank  # type: ignore[import-not-found]
    from labels import case_range  # type: ignore[import-not-found]

    args = parse_args(argv)
    r = Rank(args, seed=3)
    dev, rank, world, S, local = r.dev, r.rank, r.world, r.sms, r.local
    max_ctas = os.environ.get("NCCL_MAX_CTAS", "default")
    n, reps = args.gemm, args.reps
    victim, comm, gemm, allreduce, timed = r.victim, r.comm, r.gemm, r.allreduce, r.timed

    for _ in range(3):  # warm-up: cuBLAS handle and kernel choice, NCCL communicator and channels
        with torch.cuda.stream(victim):
            gemm()
        with torch.cuda.stream(comm):
            allreduce()
        torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    if args.profile_range:
        torch.cuda.cudart().cudaProfilerStart()
    gl = dict(m=n, n=n, k=n, dtype="bf16", reps=reps)
    al = dict(bytes=args.mib * 2**20, dtype="bf16", nccl_max_ctas=max_ctas, world=world)

    dist.barrier()
    torch.cuda.synchronize()
    with case_range("gemm_alone", corunner="none", cause="sms", **gl):
        s, e = timed(gemm, reps, victim)
        torch.cuda.synchronize()
    gemm_alone = s.elapsed_time(e) / reps

    dist.barrier()
    torch.cuda.synchronize()
    with case_range("allreduce_alone", corunner="none", reps=reps, **al):
        s, e = timed(allreduce, reps, comm)
        torch.cuda.synchronize()
    ar_alone = s.elapsed_time(e) / reps

    # as many all-reduces as cover the GEMMs slowed by 16 SMs lost (known_cause's sm_cover), the same on all ranks
    held = int(max_ctas) if max_ctas.isdigit() else 16
    cover = 1.5 * S / (S - held) + 0.25
    count = torch.tensor([math.ceil(gemm_alone * reps * cover / ar_alone) + 1], device=dev)
    dist.all_reduce(count, op=dist.ReduceOp.MAX)
    count = int(count.item())
    dist.barrier()
    torch.cuda.synchronize()
    with case_range("gemm_allreduce_ctas16", corunner="allreduce", expect="sm", cause="sms", held_sms=held,
                    allreduces=count, **gl, **{k: v for k, v in al.items() if k != "dtype"}):
        co_s, co_e = timed(allreduce, count, comm)
        s, e = timed(gemm, reps, victim)
        torch.cuda.synchronize()
    beside = s.elapsed_time(e) / reps
    covered = e.elapsed_time(co_e) > 0
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    if args.profile_range:
        torch.cuda.cudart().cudaProfilerStop()
    busbw = 2 * (world - 1) / world * args.mib * 2**20 / (ar_alone / 1e3) / 1e9
    print(f"rank {rank}/{world} ({torch.cuda.get_device_name(local)}, {S} SMs, NCCL_MAX_CTAS={max_ctas}, "
          f"NCCL_MIN_CTAS={os.environ.get('NCCL_MIN_CTAS', 'default')}, nccl {torch.cuda.nccl.version()}): "
          f"allreduce {args.mib} MiB alone {ar_alone:.3f} ms ({busbw:.0f} GB/s bus bw); "
          f"gemm_allreduce_ctas16 expect=sm: gemm alone {gemm_alone:.3f} ms, beside {beside:.3f} ms "
          f"({beside / gemm_alone - 1:+.1%}), {count} all-reduces {co_s.elapsed_time(co_e):.1f} ms, "
          f"covered={'yes' if covered else 'NO'}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
