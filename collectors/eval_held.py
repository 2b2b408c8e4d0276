"""A collective held back from starting (two GPUs; issue "Real training runs": launch delays).

Run under ``torchrun --nproc-per-node 2`` (``collectors/eval_cases.sh``, step ``held``), nsys with CUDA event
tracing, NCCL with its default CTA count. Each rank, after a warm-up:

1. ``case:allreduce_alone``: 20 all-reduces of 256 MiB bf16, one after the other;
2. ``case:allreduce_held_back;corunner=hold_spin;held_rank=0``, ``reps`` rounds: on rank 0, ``hold_spin``
   (eval_cases.py: one 512-thread CTA on each of the S SMs, with all but 32 KiB of an SM's shared memory, spinning on
   %globaltimer for ``hold_ms``) on a stream of its own, then at once one all-reduce. An NCCL CTA (about 100 KiB of
   shared memory) cannot be placed beside a ``hold_spin`` CTA, so rank 0's all-reduce kernel starts only when the
   spin ends, although nothing it depends on is pending (its stream and the stream it waits on are idle): held back
   by ``hold_ms``. Rank 1 launches its all-reduce at the same time; it starts at once and waits inside the kernel for
   rank 0 to arrive (a wait for another rank, not a delay).

Prints CUDA-event timings per rank.
"""

from __future__ import annotations

import os
import sys


def parse_args(argv=None):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gemm_allreduce import parse_args as parse  # type: ignore[import-not-found]

    return parse(__doc__, argv)


HOLD_MS = 20.0
KiB = 1024


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
    r = Rank(args, seed=7)
    rank, world, S, local = r.rank, r.world, r.sms, r.local
    reps = args.reps
    comm, allreduce, timed, sync = r.comm, r.allreduce, r.timed, r.sync
    props = torch.cuda.get_device_properties(local)
    smem_sm = props.shared_memory_per_multiprocessor
    hold_smem = min(props.shared_memory_per_block_optin, (smem_sm - 32 * KiB) // KiB * KiB)
    spin = torch.cuda.Stream()
    with cp.cuda.Device(local):
        k_hold = cp.RawModule(code=SRC, options=("-std=c++17",)).get_function("hold_spin")
        k_hold.max_dynamic_shared_size_bytes = hold_smem
        sink = cp.zeros(1024, dtype=cp.int32)

    def hold(duration_ns: float):
        with cp.cuda.Device(local), cp.cuda.ExternalStream(spin.cuda_stream):
            k_hold((S,), (512,), (np.uint64(int(duration_ns)), sink), shared_mem=hold_smem)

    for _ in range(3):  # warm-up: the NCCL communicator and channels, the spin kernel
        with torch.cuda.stream(comm):
            allreduce()
        hold(10_000)
        torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    if args.profile_range:
        torch.cuda.cudart().cudaProfilerStart()
    al = dict(bytes=args.mib * 2**20, world=world, dtype="bf16")

    sync()
    with case_range("allreduce_alone", corunner="none", reps=reps, **al):
        s, e = timed(allreduce, reps, comm)
        torch.cuda.synchronize()
    ar_alone = s.elapsed_time(e) / reps
    rounds = []
    for i in range(reps):
        sync()
        dist.barrier()
        with case_range("allreduce_held_back", corunner="hold_spin", held_rank=0, hold_ms=HOLD_MS, round=i, **al):
            if rank == 0:
                hold(HOLD_MS * 1e6)
            s, e = timed(allreduce, 1, comm)
            torch.cuda.synchronize()
        rounds.append(s.elapsed_time(e))
    sync()
    if args.profile_range:
        torch.cuda.cudart().cudaProfilerStop()
    print(f"rank {rank}/{world} ({torch.cuda.get_device_name(local)}, {S} SMs, hold_smem {hold_smem // KiB} KiB, "
          f"nccl {torch.cuda.nccl.version()}): allreduce {args.mib} MiB alone {ar_alone:.3f} ms; held back "
          f"{HOLD_MS:.0f} ms on rank 0: all-reduce from launch to end {min(rounds):.3f}-{max(rounds):.3f} ms",
          flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
