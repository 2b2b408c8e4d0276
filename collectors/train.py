"""A GPT-style model trained with DDP, FSDP2 or a two-stage pipeline, in the research's three modes.

Modes (the same names as the overlap microbenchmark's): ``overlapped`` (communication as the framework
schedules it, beside compute), ``sequential`` (the same collectives, each ordered on the GPU after the
compute issued before it and before the compute issued after it: no overlap, no host synchronization)
and ``compute`` (the same compute, the collectives skipped). How each is made:

- ``ddp``: one comm hook; overlapped all-reduces each bucket asynchronously (as DDP's own hook does),
  sequential's all-reduce blocks the compute stream, compute returns the bucket unreduced.
- ``fsdp2``: ``fully_shard`` per block and on the model; sequential joins every all-gather and
  reduce-scatter to the compute stream before and after it; compute does not issue them (the
  unsharded parameters then hold whatever the memory held).
- ``pp``: GPipe over 2 stages; overlapped sends activations and gradients while the next microbatch
  computes (receives posted up front), sequential finishes each send and receive before the next
  compute, compute uses fixed tensors in place of the received ones.

NVTX: each mode's measured steps lie inside one range ``mode:NAME`` (closed after a device
synchronize, so all its GPU work falls inside it in time), each step inside
``case:train;parallel=P;mode=NAME;step=N;layers=L;dim=D`` with nested ``forward``, ``backward``
and ``optimizer`` ranges (``pp``: ``forward``, ``backward`` per step), and the first step after a
mode switch inside ``warmup;parallel=P;mode=NAME``. Backward kernels are launched by autograd's own
thread: group them by time (the ``mode:`` range), not by the launching thread.

A known straggler: ``--slow-rank R --slow-steps 1,3`` makes rank R slow in those measured steps of every mode
(their case ranges carry ``slow=1`` on every rank; the others ``slow=0``): at the step's start it launches, on a
stream of its own, a spin kernel holding ``--slow-sm-share`` of the SMs (one 1024-thread CTA per SM) for
``--slow-ms``, so its compute runs on the other SMs and it arrives late at the step's collectives; the step then
waits for the spin kernel to end, so the next step starts clean.

Run: ``python collectors/train.py --parallel ddp`` (spawns one process per GPU) or under torchrun.
"""

from __future__ import annotations

import argparse
import os
import sys

PARALLEL = ("ddp", "fsdp2", "pp")
MODES = ("overlapped", "sequential", "compute")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parallel", choices=PARALLEL, default="ddp")
    p.add_argument("--mode", dest="parallel", choices=PARALLEL, help=argparse.SUPPRESS)  # its former name
    p.add_argument("--modes", default=",".join(MODES), help=f"comma list of {MODES}")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
    p.add_argument("--microbatches", type=int, default=4, help="pp: microbatches per step")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--steps", type=int, default=6, help="measured steps per mode")
    p.add_argument("--warmup", type=int, default=2, help="steps before the measured part (and one per mode switch)")
    p.add_argument("--profile-range", action="store_true")
    p.add_argument("--torch-profiler", metavar="DIR", default=None,
                   help="record the measured steps with torch.profiler (CPU and CUDA activities, shapes) and write "
                        "DIR/rank<R>.json.gz, Kineto's Chrome-trace JSON; NVTX ranges are also torch.profiler ranges")
    p.add_argument("--slow-rank", type=int, default=-1, help="a rank made slow in --slow-steps (-1: none)")
    p.add_argument("--slow-steps", default="", help="comma list of measured step numbers in which it is slow")
    p.add_argument("--slow-sm-share", type=float, default=0.5, help="share of the SMs its co-runner holds")
    p.add_argument("--slow-ms", type=float, default=100.0, help="how long its co-runner holds them (ms)")
    args = p.parse_args(argv)
    bad = set(args.modes.split(",")) - set(MODES)
    if bad:
        p.error(f"--modes: unknown {sorted(bad)}; choose from {MODES}")
    return args


def build_blocks(args, torch, count: int):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(args.dim), nn.LayerNorm(args.dim)
            self.qkv, self.proj = nn.Linear(args.dim, 3 * args.dim), nn.Linear(args.dim, args.dim)
            self.fc1, self.fc2 = nn.Linear(args.dim, 4 * args.dim), nn.Linear(4 * args.dim, args.dim)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = (z.view(b, t, args.heads, c // args.heads).transpose(1, 2)
                       for z in self.qkv(self.ln1(x)).split(c, dim=2))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
            x = x + self.proj(y)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    return nn.ModuleList(Block() for _ in range(count))


def build_model(args, torch, part: str = "all"):
    """The GPT, or one pipeline stage of it: ``first`` (embeddings and the first half of the blocks) or ``last``."""
    nn = torch.nn
    half = args.layers // 2
    count = {"all": args.layers, "first": half, "last": args.layers - half}[part]

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            if part in ("all", "first"):
                self.emb, self.pos = nn.Embedding(args.vocab, args.dim), nn.Embedding(args.seq, args.dim)
            self.blocks = build_blocks(args, torch, count)
            if part in ("all", "last"):
                self.ln_f, self.head = nn.LayerNorm(args.dim), nn.Linear(args.dim, args.vocab, bias=False)

        def forward(self, x):
            if part in ("all", "first"):
                x = self.emb(x) + self.pos(torch.arange(x.shape[1], device=x.device))
            for b in self.blocks:
                x = b(x)
            return self.head(self.ln_f(x)) if part in ("all", "last") else x

    return GPT()


class _Mode:
    name = "overlapped"


def _ddp_hook(world: int):
    """One DDP comm hook for the three modes, switched through ``_Mode.name``."""
    import torch
    import torch.distributed as dist

    def hook(state, bucket):
        buf = bucket.buffer().div_(world)
        if _Mode.name == "overlapped":
            return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])
        if _Mode.name == "sequential":
            dist.all_reduce(buf)  # blocking: the compute stream waits for it
        done = torch.futures.Future()
        done.set_result(buf)
        return done

    return hook


class _NoWork:
    def wait(self, *_, **__):
        return True

    def is_completed(self):
        return True


def _patch_collectives() -> None:
    """Route torch.distributed's collectives (FSDP2 issues them through these) through the mode: as they are,
    ordered on the GPU between the compute before and after them, or not issued."""
    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    def wrap(fn):
        def collective(*args, **kwargs):
            if _Mode.name == "overlapped":
                return fn(*args, **kwargs)
            if _Mode.name == "compute":
                return _NoWork()  # whether the caller waits on it or not
            main, cur = torch.cuda.default_stream(), torch.cuda.current_stream()
            cur.wait_stream(main)
            work = fn(*args, **kwargs)
            if work is not None:
                work.wait()  # the current stream waits for the collective
            main.wait_stream(cur)
            return work

        return collective

    for name in ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce", "all_gather", "reduce_scatter"):
        original = getattr(c10d, name)
        setattr(dist, name, wrap(original))
        setattr(c10d, name, getattr(dist, name))


def run(args) -> None:
    import torch
    import torch.distributed as dist
    from labels import case_range, nvtx_range  # type: ignore[import-not-found]

    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    world = dist.get_world_size()
    if args.parallel == "pp" and world != 2:
        raise SystemExit(f"--parallel pp runs two stages on two GPUs; this job has {world}")
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = build_model(args, torch, {0: "first", 1: "last"}[rank] if args.parallel == "pp" else "all")
    torch.set_default_dtype(torch.float32)
    params = sum(p.numel() for p in model.parameters())  # of this stage, for pp
    if args.parallel == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
        model.register_comm_hook(None, _ddp_hook(world))
    elif args.parallel == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        _patch_collectives()
        for b in model.blocks:
            fully_shard(b)
        fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(rank)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq + 1), device="cuda", generator=gen)
    step = _pp_step(args, torch, model, opt, tokens, rank, nvtx_range) if args.parallel == "pp" else \
        _data_parallel_step(torch, model, opt, tokens, nvtx_range)
    with nvtx_range(f"warmup;parallel={args.parallel}"):
        for _ in range(args.warmup):
            step()
    torch.cuda.synchronize()
    if args.profile_range:
        torch.cuda.cudart().cudaProfilerStart()
    profiler = _torch_profiler(torch, args.torch_profiler)
    labels = dict(layers=args.layers, dim=args.dim)
    slow_steps = {int(s) for s in args.slow_steps.split(",") if s.strip()}
    straggle = _straggler(torch, args) if rank == args.slow_rank and slow_steps else None
    if args.slow_rank >= 0:
        labels["slow_rank"] = args.slow_rank
    for mode in args.modes.split(","):
        _Mode.name = mode
        dist.barrier()
        torch.cuda.synchronize()
        with nvtx_range(f"warmup;parallel={args.parallel};mode={mode}"):
            step()
            torch.cuda.synchronize()
        with nvtx_range(f"mode:{mode}"):
            for s in range(args.steps):
                slow = {"slow": int(s in slow_steps)} if args.slow_rank >= 0 else {}
                with case_range("train", parallel=args.parallel, mode=mode, step=s, **labels, **slow):
                    if straggle is not None and s in slow_steps:
                        with nvtx_range("co-runner"):
                            held = straggle()
                    loss = step()
                    if straggle is not None and s in slow_steps:
                        held.synchronize()
                if s in slow_steps:
                    # the co-runner ends with its step: every rank waits for its GPU and for the others before the
                    # next step. Else the slow rank, whose host waited for the co-runner while the others' hosts ran
                    # ahead, starts the next step late too
                    torch.cuda.synchronize()
                    dist.barrier()
            torch.cuda.synchronize()
    if args.profile_range:
        torch.cuda.cudart().cudaProfilerStop()
    if profiler is not None:
        _write_torch_profile(profiler, args.torch_profiler, rank)
    if rank == world - 1:
        print(f"train {args.parallel}: {params / 1e9:.2f} B parameters, loss {float(loss):.3f}, "
              f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB peak on GPU {local}, modes {args.modes}")
    dist.barrier()
    dist.destroy_process_group()


def _torch_profiler(torch, where: str | None):
    """A started torch.profiler over CPU and CUDA activities (None without --torch-profiler); the NVTX ranges
    become its user annotations too."""
    if where is None:
        return None
    import labels

    labels.RECORD_FUNCTION = True
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    profiler = torch.profiler.profile(activities=acts, record_shapes=True)
    profiler.start()
    return profiler


def _write_torch_profile(profiler, where: str, rank: int) -> None:
    import gzip
    import shutil

    profiler.stop()
    os.makedirs(where, exist_ok=True)
    raw = os.path.join(where, f"rank{rank}.json")
    profiler.export_chrome_trace(raw)
    with open(raw, "rb") as src, gzip.open(raw + ".gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(raw)


def _straggler(torch, args):
    """A function that launches the straggler's co-runner on its own stream and returns that stream: cuda_bench's
    busy_wait kernel, one 1024-thread CTA per SM (more than half an SM's shared memory each) on ``--slow-sm-share``
    of the SMs."""
    import cupy as cp
    from cuda_bench import BUSY_WAIT_SRC  # type: ignore[import-not-found]

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    rt = cp.cuda.runtime.getDeviceProperties(torch.cuda.current_device())
    smem = min(int(rt["sharedMemPerBlockOptin"]), int(rt["sharedMemPerMultiprocessor"] * 0.7) // 1024 * 1024)
    kernel = cp.RawModule(code=BUSY_WAIT_SRC).get_function("busy_wait")
    kernel.max_dynamic_shared_size_bytes = smem
    ctas = max(1, round(props.multi_processor_count * args.slow_sm_share))
    sink = cp.zeros(1024, dtype=cp.int32)
    stream = torch.cuda.Stream()
    side = cp.cuda.ExternalStream(stream.cuda_stream)

    def launch():
        kernel((ctas,), (1024,), (cp.uint64(int(args.slow_ms * 1e6)), sink), shared_mem=smem, stream=side)
        return stream

    return launch


def _data_parallel_step(torch, model, opt, tokens, nvtx_range):
    def step():
        with nvtx_range("forward"):
            logits = model(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
        with nvtx_range("backward"):
            loss.backward()
        with nvtx_range("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def _pp_step(args, torch, stage, opt, tokens, rank, nvtx_range):
    """GPipe over two stages: every microbatch forward, then every microbatch backward, then the optimizer."""
    import torch.distributed as dist

    mbs = tokens.chunk(args.microbatches)
    shape = (mbs[0].shape[0], args.seq, args.dim)
    peer = 1 - rank
    # the compute mode's stand-ins for what would have been received
    fixed = torch.randn(shape, device="cuda", dtype=torch.bfloat16)

    def send(t):
        if _Mode.name == "compute":
            return None
        work = dist.isend(t, peer)
        if _Mode.name == "sequential":
            work.wait()
        return work

    def receive_all(count):
        """Receive buffers, posted up front (overlapped) or one at a time just before use (sequential)."""
        if _Mode.name == "compute":
            return [(fixed, None)] * count
        if _Mode.name == "overlapped":
            bufs = [torch.empty(shape, device="cuda", dtype=torch.bfloat16) for _ in range(count)]
            return [(b, dist.irecv(b, peer)) for b in bufs]
        return None

    def received(pending, i):
        if pending is not None:
            buf, work = pending[i]
        else:
            buf = torch.empty(shape, device="cuda", dtype=torch.bfloat16)
            work = dist.irecv(buf, peer)
        if work is not None:
            work.wait()
        return buf

    def step():
        sends, loss = [], None
        with nvtx_range("forward"):
            if rank == 0:
                outs = []
                for mb in mbs:
                    outs.append(stage(mb[:, :-1]))
                    sends.append(send(outs[-1].detach()))
            else:
                pending = receive_all(len(mbs))
                inputs, losses = [], []
                for i, mb in enumerate(mbs):
                    h = received(pending, i).detach().requires_grad_()
                    logits = stage(h)
                    losses.append(torch.nn.functional.cross_entropy(logits.float().flatten(0, 1),
                                                                    mb[:, 1:].flatten()))
                    inputs.append(h)
        with nvtx_range("backward"):
            if rank == 0:
                pending = receive_all(len(mbs))
                for i, out in enumerate(outs):
                    out.backward(received(pending, i))
            else:
                for h, mb_loss in zip(inputs, losses, strict=True):
                    mb_loss.backward()
                    sends.append(send(h.grad))
                loss = sum(x.detach() for x in losses) / len(losses)
        for work in sends:
            if work is not None:
                work.wait()
        with nvtx_range("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        return loss if loss is not None else torch.zeros((), device="cuda")

    return step


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
