#!/bin/bash
# The benchmark suite through `traceql collect`/`traceql bench` on a GPU machine (2 x H200 here).
# Run from the repository root after `source .device-carry/device-setup.sh`; results under $OUT.
set -uo pipefail
W=/tmp/traceql-suite; rm -rf "$W"; mkdir -p "$W"
python3 -m pip install -q --no-deps --no-build-isolation --no-compile --target /tmp/tq . 2>&1 | tail -3
python3 -c "import sys; sys.path.insert(0, '/tmp/tq'); import traceql.collectors.overlap" || { echo "install failed"; exit 1; }
export PYTHONPATH="/tmp/tq${PYTHONPATH:+:$PYTHONPATH}"
cd /tmp  # run the installed traceql, not the source tree (where traceql.collectors does not exist)
TQ=(python3 -m traceql.cli)
S="$W/store"
step() { echo "### $*"; }
{
  step contention; timeout 240 "${TQ[@]}" bench contention -o "$S" --power --name contention 2>&1 | grep -v '^\[1/1\]'
  echo "rc=$?"
  step overlap; timeout 200 "${TQ[@]}" bench overlap -o "$S" --power --name overlap --dtypes bf16,fp16,tf32 \
      --ops all_reduce,all_gather,reduce_scatter --bytes 67108864,268435456 --iters 4 2>&1 | grep -v '^\[1/1\]'
  step overlap max_ctas=4; NCCL_MAX_CTAS=4 timeout 150 "${TQ[@]}" bench overlap -o "$S" --name overlap_ctas4 \
      --dtypes bf16 --ops all_reduce --iters 4 2>&1 | grep -v '^\[1/1\]'
  step baseline; timeout 150 "${TQ[@]}" bench overlap -o "$S" --name overlap_baseline --modes compute \
      --dtypes bf16 --ops all_reduce --iters 8 2>&1 | grep -v '^\[1/1\]'
  step torchrun ddp; timeout 200 "${TQ[@]}" collect -o "$S" --gpu-metrics --name train_ddp_torchrun \
      --nsys-args "--capture-range=cudaProfilerApi --capture-range-end=stop" -- \
      torchrun --nproc-per-node 2 -m traceql.collectors.train --mode ddp --profile-range 2>&1 | grep -v '^\[1/1\]'
  step ncu; timeout 200 "${TQ[@]}" collect --ncu -o "$S" --name kernels --nvtx-include "profile/" -- \
      python3 -m traceql.collectors.contention --ncu 2>&1 | grep -v '^\[1/1\]'
  step timeout; timeout 120 "${TQ[@]}" collect -o "$S" --name interrupted --timeout 25 -- \
      python3 -m traceql.collectors.overlap --iters 100000 --dtypes bf16 --ops all_reduce 2>&1 | tail -5
  echo "collect exit code: ${PIPESTATUS[0]}"
  step summary
  "${TQ[@]}" sql "$S" "SELECT r.run_id, json_extract_string(r.labels_json, '$.name') AS name, (SELECT count(*) FROM kernels k WHERE k.run_id = r.run_id) AS kernels, (SELECT count(*) FROM power p WHERE p.run_id = r.run_id) AS power FROM runs r"
  ls -la "$S/reports"
} 2>&1 | tee "$W/log.txt"
cd "$W"
tar -cJf "$OUT/store.tar.xz" --exclude='*.nsys-rep' --exclude='*.traceql' --exclude='*.qdstrm' store
tar -cf "$OUT/reports.tar" store/reports/*.nsys-rep store/reports/*.ncu-rep 2>/dev/null
cp log.txt "$OUT/"
ls -la "$OUT"
