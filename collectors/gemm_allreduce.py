"""What the two-GPU evaluation collectors (``eval_allreduce.py``, ``eval_comm.py``) share: their command line, and one
rank's cuBLAS bf16 GEMM and NCCL all-reduce of bf16, each launched on a stream of its own, timed with CUDA events.
Run under ``torchrun``; torch is imported when a :class:`Rank` is made."""

from __future__ import annotations

import argparse
import os


def parse_args(doc: str, argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gemm", type=int, default=8192, help="M=N=K of the GEMM")
    p.add_argument("--mib", type=int, default=256, help="all-reduce size in MiB (bf16)")
    p.add_argument("--reps", type=int, default=20, help="victim launches per case (>= 20)")
    p.add_argument("--profile-range", action="store_true", help="cudaProfilerStart/Stop around the measured part")
    args = p.parse_args(argv)
    if args.reps < 20:
        raise SystemExit("--reps must be >= 20")
    return args


class Rank:
    """This process's GPU (``LOCAL_RANK``) in an NCCL process group: an n x n x n GEMM and an all-reduce of ``mib``
    MiB, inputs drawn with the generator seeded ``rank + seed``; ``victim`` and ``comm`` are their streams."""

    def __init__(self, args: argparse.Namespace, seed: int):
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(self.local)
        self.dev = torch.device("cuda", self.local)
        dist.init_process_group("nccl", device_id=self.dev)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.sms = torch.cuda.get_device_properties(self.local).multi_processor_count
        gen = torch.Generator(device="cuda").manual_seed(self.rank + seed)
        n = args.gemm
        self.a = torch.randn(n, n, device=self.dev, dtype=torch.bfloat16, generator=gen)
        self.b = torch.randn(n, n, device=self.dev, dtype=torch.bfloat16, generator=gen)
        self.c = torch.empty(n, n, device=self.dev, dtype=torch.bfloat16)
        self.x = torch.randn(args.mib * 2**20 // 2, device=self.dev, dtype=torch.bfloat16, generator=gen)
        self.victim, self.comm = torch.cuda.Stream(), torch.cuda.Stream()

    def gemm(self):
        self.torch.matmul(self.a, self.b, out=self.c)

    def allreduce(self):
        self.dist.all_reduce(self.x)  # sums grow 2x a call: ~100 calls stay far under bf16's range

    def timed(self, fn, count: int, stream):
        """CUDA events around ``count`` calls of ``fn`` on ``stream`` (the one-GPU collectors' timing)."""
        from cuda_bench import timed  # type: ignore[import-not-found]

        return timed(self.torch, fn, count, stream)

    def sync(self):
        """Every rank's GPU idle, and the ranks in step."""
        self.torch.cuda.synchronize()
        self.dist.barrier()
        self.torch.cuda.synchronize()
