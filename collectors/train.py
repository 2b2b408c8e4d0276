"""A small GPT-style model trained with DDP or FSDP2, one process per local GPU.

Each step runs inside ``case:train;mode=ddp|fsdp2;step=N`` with nested ``forward``,
``backward`` and ``optimizer`` ranges, so traceql can group kernels by phase and see the
gradient all-reduces (DDP) or all-gathers / reduce-scatters (FSDP2) that overlap backward.
Run: ``python collectors/train.py --mode ddp`` (spawns one process per GPU) or under torchrun.
"""

from __future__ import annotations

import argparse
import os
import sys


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mode", choices=("ddp", "fsdp2"), default="ddp")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--profile-range", action="store_true")
    return p.parse_args(argv)


def build_model(args, torch):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(args.dim)
            self.attn = nn.MultiheadAttention(args.dim, args.heads, batch_first=True)
            self.ln2 = nn.LayerNorm(args.dim)
            self.mlp = nn.Sequential(nn.Linear(args.dim, 4 * args.dim), nn.GELU(), nn.Linear(4 * args.dim, args.dim))

        def forward(self, x):
            h = self.ln1(x)
            x = x + self.attn(h, h, h, need_weights=False, is_causal=False)[0]
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(args.vocab, args.dim)
            self.blocks = nn.ModuleList(Block() for _ in range(args.layers))
            self.head = nn.Linear(args.dim, args.vocab, bias=False)

        def forward(self, idx):
            x = self.emb(idx)
            for b in self.blocks:
                x = b(x)
            return self.head(x)

    return GPT()


def run(args) -> None:
    import torch
    import torch.distributed as dist
    from labels import case_range, nvtx_range  # type: ignore[import-not-found]

    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    torch.manual_seed(0)
    model = build_model(args, torch).cuda().to(torch.bfloat16)
    if args.mode == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
    else:
        from torch.distributed.fsdp import fully_shard

        for b in model.blocks:
            fully_shard(b)
        fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(rank)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq + 1), device="cuda", generator=gen)
    for step in range(args.warmup + args.steps):
        if step == args.warmup and args.profile_range:
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStart()
        with case_range("train", mode=args.mode, step=step, layers=args.layers, dim=args.dim):
            with nvtx_range("forward"):
                logits = model(tokens[:, :-1])
                loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
            with nvtx_range("backward"):
                loss.backward()
            with nvtx_range("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    if args.profile_range:
        torch.cuda.cudart().cudaProfilerStop()
    if rank == 0:
        print(f"train {args.mode}: loss {loss.item():.3f} after {args.warmup + args.steps} steps")
    dist.destroy_process_group()


def _spawned(rank, world, args):
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29534"))
    run(args)


def main(argv=None) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    args = parse_args(argv)
    if "RANK" in os.environ:
        run(args)
        return
    import torch
    import torch.multiprocessing as mp

    mp.spawn(_spawned, args=(torch.cuda.device_count(), args), nprocs=torch.cuda.device_count(), join=True)


if __name__ == "__main__":
    main()
