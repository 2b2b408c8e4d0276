"""Overlap microbenchmark: the four modes of the research, one process per GPU.

Modes (Lee et al., ISPASS 2025): ``compute`` (GEMMs only), ``comm`` (collectives only),
``overlapped`` (GEMMs on one stream, collectives on another, issued together) and
``sequential`` (GEMM then collective on one stream). Every mode runs inside an NVTX range
``case:overlap;mode=...;op=...;dtype=...;bytes=...;gemm=...;max_ctas=...`` and every
iteration inside a nested ``iter`` range, so traceql can group kernels by mode and project
them onto steps.

Run with one process per GPU, e.g. ``torchrun --nproc-per-node 2 -m traceql.collectors.overlap``
(or ``python collectors/overlap.py`` which spawns one process per local GPU itself).
"""

from __future__ import annotations

import argparse
import os

DTYPES = ("bf16", "fp16", "tf32", "fp32")
OPS = ("all_reduce", "all_gather", "reduce_scatter")


def _torch_dtype(name: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}[name]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtypes", default="bf16,fp32", help=f"comma list of {DTYPES}")
    p.add_argument("--ops", default="all_reduce,all_gather,reduce_scatter", help=f"comma list of {OPS}")
    p.add_argument("--bytes", default="134217728", help="comma list of message sizes in bytes")
    p.add_argument("--gemm", type=int, default=8192, help="GEMM size M=N=K")
    p.add_argument("--iters", type=int, default=6, help="iterations per mode")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--modes", default="compute,comm,overlapped,sequential")
    p.add_argument("--profile-range", action="store_true",
                   help="call cudaProfilerStart/Stop around the measured part (for --capture-range=cudaProfilerApi)")
    return p.parse_args(argv)


def run(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from labels import case_range, nvtx_range  # type: ignore[import-not-found]

    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    world = dist.get_world_size()
    max_ctas = os.environ.get("NCCL_MAX_CTAS", "default")
    compute_stream = torch.cuda.Stream()
    comm_stream = torch.cuda.Stream()
    gen = torch.Generator(device="cuda").manual_seed(1234 + rank)

    def one_config(dtype_name: str, op: str, nbytes: int, measured: bool) -> None:
        dtype = _torch_dtype(dtype_name)
        torch.backends.cuda.matmul.allow_tf32 = dtype_name == "tf32"
        n = args.gemm
        a = torch.randn(n, n, device="cuda", dtype=dtype, generator=gen)
        b = torch.randn(n, n, device="cuda", dtype=dtype, generator=gen)
        c = torch.empty(n, n, device="cuda", dtype=dtype)
        elem = torch.finfo(dtype).bits // 8
        count = max(world, nbytes // elem // world * world)
        buf = torch.randn(count, device="cuda", dtype=dtype, generator=gen)
        shard = torch.empty(count // world, device="cuda", dtype=dtype)
        full = torch.empty(count * world, device="cuda", dtype=dtype)

        def gemm():
            torch.matmul(a, b, out=c)

        def comm():
            if op == "all_reduce":
                dist.all_reduce(buf)
            elif op == "all_gather":
                dist.all_gather_into_tensor(full, buf)
            else:
                dist.reduce_scatter_tensor(shard, buf)

        iters = args.iters if measured else args.warmup
        for mode in args.modes.split(","):
            labels = dict(mode=mode, op=op, dtype=dtype_name, bytes=count * elem, gemm=n, max_ctas=max_ctas,
                          world=world)
            torch.cuda.synchronize()
            dist.barrier()
            ctx = case_range("overlap", **labels) if measured else nvtx_range("warmup")
            with ctx:
                for i in range(iters):
                    with nvtx_range(f"iter:{i}"):
                        if mode == "compute":
                            with torch.cuda.stream(compute_stream):
                                gemm()
                        elif mode == "comm":
                            with torch.cuda.stream(comm_stream):
                                comm()
                        elif mode == "overlapped":
                            with torch.cuda.stream(compute_stream):
                                gemm()
                            with torch.cuda.stream(comm_stream):
                                comm()
                        else:
                            with torch.cuda.stream(compute_stream):
                                gemm()
                                comm()
                torch.cuda.synchronize()

    configs = [(d, o, int(s)) for d in args.dtypes.split(",") for o in args.ops.split(",")
               for s in args.bytes.split(",")]
    for d, o, s in configs[:1]:
        one_config(d, o, s, measured=False)
    if args.profile_range:
        torch.cuda.cudart().cudaProfilerStart()
    for d, o, s in configs:
        one_config(d, o, s, measured=True)
    torch.cuda.synchronize()
    if args.profile_range:
        torch.cuda.cudart().cudaProfilerStop()
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(f"overlap: {len(configs)} configurations x {args.modes} on {world} GPUs done")


def main(argv=None) -> None:
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    args = parse_args(argv)
    if "RANK" in os.environ:
        run(args)
        return
    # Not under torchrun: start one process per local GPU ourselves.
    import torch
    import torch.multiprocessing as mp

    world = torch.cuda.device_count()
    mp.spawn(_spawned, args=(world, args), nprocs=world, join=True)


def _spawned(rank: int, world: int, args: argparse.Namespace) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29533"))
    run(args)


if __name__ == "__main__":
    main()
