"""Overlap microbenchmark: the four modes of the research, one process per GPU.

Modes (Lee et al., ISPASS 2025): ``compute`` (GEMMs only), ``comm`` (collectives only),
``overlapped`` (GEMMs on one stream, collectives on another, issued together) and
``sequential`` (GEMM then collective on one stream). Every mode runs inside an NVTX range
``case:overlap;mode=...;op=...;dtype=...;bytes=...;gemm=...;max_ctas=...`` and every
iteration inside a nested ``iter`` range, so traceql can group kernels by mode and project
them onto steps. Every configuration (data type, collective, message size, CTA limit) is warmed
up right before it is measured, each of its modes for ``--warmup`` iterations inside a ``warmup;...``
range, so that no case absorbs cuBLAS or NCCL first use. The modes then run in the order A B C D D C B A, each
range with half of the mode's iterations (``--order abba``), so that a clock that drifts during a configuration (a GPU
warming up, a power limit reached) weighs on every mode alike; the two ranges of a mode carry the same labels, and
traceql pools their iterations. In ``overlapped`` each iteration is one GEMM
beside one collective: the two streams join at the end of every iteration.

Data types: bf16, fp16, tf32, fp32 and fp8 (``torch._scaled_mm`` on e4m3 operands, where the GPU
and torch have it; its gathers move fp8, its reductions bf16: the ``comm_dtype`` label). CTA limits
(``--max-ctas default,2,8``) are communicators of their own with NCCL's ``maxCTAs`` set, so one
process measures them all; ``max_ctas`` labels each case.

Run with one process per GPU, e.g. ``torchrun --nproc-per-node 2 -m traceql.collectors.overlap``
(or ``python collectors/overlap.py`` which spawns one process per local GPU itself).
"""

from __future__ import annotations

import argparse
import os
import time

DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp8")
OPS = ("all_reduce", "all_gather", "reduce_scatter")
MODES = ("compute", "comm", "overlapped", "sequential")


def _torch_dtype(name: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32,
            "fp8": torch.float8_e4m3fn}[name]


def _comm_dtype(name: str, op: str) -> str:
    """The collective's data type: the GEMM's, except fp8, whose gathers move fp8 and whose reductions move bf16
    (as FP8 training does: NCCL reductions in fp8 lose too much)."""
    if name == "fp8":
        return "fp8" if op == "all_gather" else "bf16"
    return "fp32" if name == "tf32" else name


def fp8_supported() -> str | None:
    """None when this GPU and torch can run an fp8 GEMM (torch._scaled_mm, compute capability 8.9+), else why not."""
    import torch

    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return f"torch {torch.__version__} has no torch._scaled_mm"
    if torch.cuda.get_device_capability() < (8, 9):
        return f"{torch.cuda.get_device_name()} has no fp8 tensor cores (compute capability < 8.9)"
    return None


def passes(modes: list[str], iters: list[int], order: str) -> list[tuple[str, int, int]]:
    """The mode ranges of one configuration, in the order they run: (mode, its first iteration's number,
    iterations). ``abba``: every mode with the first half of its iterations (rounded up), in order, then every mode
    with the rest, in reverse order (a mode of one iteration runs once). ``fixed``: every mode once, in order."""
    if order == "fixed":
        return [(m, 0, n) for m, n in zip(modes, iters, strict=True)]
    first = [(m, 0, (n + 1) // 2) for m, n in zip(modes, iters, strict=True)]
    second = [(m, (n + 1) // 2, n // 2) for m, n in zip(modes, iters, strict=True) if n // 2]
    return first + second[::-1]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtypes", default="bf16,fp32", help=f"comma list of {DTYPES} (fp8 where the GPU has it)")
    p.add_argument("--ops", default="all_reduce,all_gather,reduce_scatter", help=f"comma list of {OPS}")
    p.add_argument("--bytes", default="134217728", help="comma list of message sizes in bytes")
    p.add_argument("--gemm", type=int, default=8192, help="GEMM size M=N=K")
    p.add_argument("--iters", type=int, default=6, help="iterations per mode (at least)")
    p.add_argument("--min-case-ms", type=float, default=0.0,
                   help="run each mode at least this long (more iterations, from the warm-up's timing): the NVML "
                        "energy counter steps about every 100 ms, so per-mode energy needs cases of a few steps")
    p.add_argument("--max-iters", type=int, default=2000, help="iterations per mode at most")
    p.add_argument("--warmup", type=int, default=2, help="warm-up iterations of every mode before each configuration")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--max-ctas", default="env",
                   help="comma list of NCCL CTA limits, each a communicator of its own (NCCL's maxCTAs, what "
                        "NCCL_MAX_CTAS sets), e.g. default,2,8; 'env' (the default): one communicator, as the "
                        "environment sets it")
    p.add_argument("--order", choices=("abba", "fixed"), default="abba",
                   help="abba (the default): each configuration's modes in order with half of their iterations, "
                        "then in reverse order with the rest, so that a clock or temperature that drifts during the "
                        "configuration weighs on every mode alike; fixed: each mode once, in order")
    p.add_argument("--profile-range", action="store_true",
                   help="call cudaProfilerStart/Stop around the measured part (for --capture-range=cudaProfilerApi)")
    return p.parse_args(argv)


def _groups(settings: str, world: int):
    """(label, process group) per CTA setting; None is the default group."""
    import torch.distributed as dist

    env = os.environ.get("NCCL_MAX_CTAS", "default")
    if settings == "env":
        return [(env, None)]
    groups = []
    for s in settings.split(","):
        if s == "default":
            groups.append((env, None))
            continue
        if "NCCL_MAX_CTAS" in os.environ:
            raise SystemExit(f"--max-ctas {settings}: NCCL_MAX_CTAS={env} is set and would override the limits; "
                             "unset it or use --max-ctas env")
        opts = dist.ProcessGroupNCCL.Options()
        try:
            opts.config.max_ctas = int(s)
        except AttributeError as exc:
            raise SystemExit("--max-ctas: this torch's NCCL options have no max_ctas; run once per setting with "
                             "NCCL_MAX_CTAS=N and --max-ctas env") from exc
        groups.append((s, dist.new_group(list(range(world)), pg_options=opts)))
    return groups


def run(args: argparse.Namespace) -> None:
    import math

    import torch
    import torch.distributed as dist
    from labels import case_range, nvtx_range  # type: ignore[import-not-found]

    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    world = dist.get_world_size()
    modes = args.modes.split(",")
    dtypes = args.dtypes.split(",")
    if "fp8" in dtypes and (why := fp8_supported()) is not None:
        dtypes.remove("fp8")
        if rank == 0:
            print(f"overlap: fp8 left out: {why}")
    groups = _groups(args.max_ctas, world)
    for _, g in groups:  # create every communicator before the measured part
        dist.all_reduce(torch.ones(1, device="cuda"), group=g)
    compute_stream = torch.cuda.Stream()
    comm_stream = torch.cuda.Stream()
    gen = torch.Generator(device="cuda").manual_seed(1234 + rank)
    n = args.gemm

    def operands(dtype_name: str):
        if dtype_name != "fp8":
            dtype = _torch_dtype(dtype_name)
            a, b = (torch.randn(n, n, device="cuda", dtype=dtype, generator=gen) for _ in range(2))
            c = torch.empty(n, n, device="cuda", dtype=dtype)
            return lambda: torch.matmul(a, b, out=c)
        # fp8 e4m3 operands scaled into range, bf16 output; _scaled_mm wants the second operand column-major
        a, bt = ((torch.randn(n, n, device="cuda", generator=gen) / 4).to(torch.float8_e4m3fn) for _ in range(2))
        one = torch.ones((), device="cuda")
        return lambda: torch._scaled_mm(a, bt.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    def one_config(ctas: str, group, dtype_name: str, op: str, nbytes: int) -> None:
        torch.backends.cuda.matmul.allow_tf32 = dtype_name == "tf32"
        gemm = operands(dtype_name)
        comm_dtype_name = _comm_dtype(dtype_name, op)
        cdt = _torch_dtype(comm_dtype_name)
        elem = torch.finfo(cdt).bits // 8
        count = max(world, nbytes // elem // world * world)
        buf = torch.randn(count, device="cuda", generator=gen).to(cdt)
        shard = torch.empty(count // world, device="cuda", dtype=cdt)
        full = torch.empty(count * world, device="cuda", dtype=cdt)

        def comm():
            if op == "all_reduce":
                dist.all_reduce(buf, group=group)
            elif op == "all_gather":
                dist.all_gather_into_tensor(full, buf, group=group)
            else:
                dist.reduce_scatter_tensor(shard, buf, group=group)

        def iteration(mode: str) -> None:
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
                # one GEMM beside one collective per iteration: the next starts when both are done
                compute_stream.wait_stream(comm_stream)
                comm_stream.wait_stream(compute_stream)
            else:
                with torch.cuda.stream(compute_stream):
                    gemm()
                    comm()

        labels = dict(op=op, dtype=dtype_name, comm_dtype=comm_dtype_name, bytes=count * elem, gemm=n,
                      max_ctas=ctas, world=world)
        # Warm-up of this configuration (cuBLAS and NCCL first use, clocks), timing each mode's last iteration.
        per_iter_ms = []
        with nvtx_range("warmup;" + ";".join(f"{k}={v}" for k, v in labels.items())):
            for mode in modes:
                for _ in range(max(args.warmup, 1)):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    iteration(mode)
                    torch.cuda.synchronize()
                per_iter_ms.append((time.perf_counter() - t0) * 1e3)
            # every rank must run the same iterations: take the slowest rank's timing
            timing = torch.tensor(per_iter_ms, device="cuda")
            dist.all_reduce(timing, op=dist.ReduceOp.MAX)
        iters = [max(args.iters, min(args.max_iters, math.ceil(args.min_case_ms / max(ms, 1e-3))))
                 for ms in timing.tolist()]
        for mode, first, count_iters in passes(modes, iters, args.order):
            torch.cuda.synchronize()
            dist.barrier()
            with case_range("overlap", mode=mode, **labels):
                for i in range(first, first + count_iters):
                    with nvtx_range(f"iter:{i}"):
                        iteration(mode)
                torch.cuda.synchronize()

    configs = [(c, g, d, o, int(s)) for c, g in groups for d in dtypes for o in args.ops.split(",")
               for s in args.bytes.split(",")]
    torch.cuda.synchronize()
    dist.barrier()
    if args.profile_range:
        torch.cuda.cudart().cudaProfilerStart()
    for config in configs:
        one_config(*config)
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
