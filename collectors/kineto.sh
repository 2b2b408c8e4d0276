#!/bin/bash
# Collect the torch.profiler (Kineto) test traces and, in a separate run of the same program, an Nsight Systems
# capture of it: the small GPT model of collectors/train.py with DDP on 1 and on 2 GPUs, the measured steps only.
# Run from the repository root on a GPU machine, after `source .device-carry/device-setup.sh`.
#
#   bash collectors/kineto.sh
#
# Writes to $OUT (default ./out): kineto_<gpu>x<N>.tar (rank<R>.json.gz, Kineto's Chrome-trace JSON, one per rank),
# nsys_<gpu>x<N>.sqlite.xz (nsys export of the same program, NCCL payloads included) and kineto.log.
set -uo pipefail
OUT="${OUT:-$(pwd)/out}"; mkdir -p "$OUT"
W=/tmp/kineto-work; rm -rf "$W"; mkdir -p "$W"
gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z' 'a-z' | sed -E 's/[^a-z0-9]+/_/g; s/^_+|_+$//g')"
ngpu="$(nvidia-smi -L | grep -c '^GPU')"
TRAIN=(collectors/train.py --parallel ddp --modes overlapped --layers 4 --dim 1024 --seq 512 --batch 8 --steps 3
       --warmup 2)
NSYS=(-t cuda,nvtx,osrt -s none --cpuctxsw=none --cuda-graph-trace=node --force-overwrite=true
      --capture-range=cudaProfilerApi --capture-range-end=stop --gpu-metrics-devices=all)
{
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
  echo "nsys: $(nsys --version 2>&1 | tail -1)"; date -u
  for n in 1 2; do
    [ "$n" -le "$ngpu" ] || { echo "x$n: needs $n GPUs, found $ngpu: skipped"; continue; }
    echo "### torch.profiler x$n"
    time timeout 150 torchrun --nproc-per-node "$n" --master-port $((29600 + n)) "${TRAIN[@]}" \
      --torch-profiler "$W/kineto_x$n"
    ls -la "$W/kineto_x$n"
    tar -C "$W/kineto_x$n" -cf "$OUT/kineto_${gpu}x$n.tar" .
    echo "### nsys x$n"
    time timeout 200 nsys profile "${NSYS[@]}" -o "$W/nsys_x$n" torchrun --nproc-per-node "$n" \
      --master-port $((29700 + n)) "${TRAIN[@]}" --profile-range
    timeout 150 nsys export -t sqlite --include-json=true --force-overwrite=true -o "$W/nsys_x$n.sqlite" \
      "$W/nsys_x$n.nsys-rep"
    xz -T16 -6 -c "$W/nsys_x$n.sqlite" > "$OUT/nsys_${gpu}x$n.sqlite.xz"
    ls -la "$OUT"
  done
} 2>&1 | tee "$OUT/kineto.log"
