#!/bin/bash
# The benchmark suite through `traceql collect`/`traceql bench` on a GPU machine (2 x H200 here).
# Run from the repository root after `source .device-carry/device-setup.sh`; results under $OUT.
# Usage: gpu_suite.sh [STEP...]   steps: contention overlap ctas ddp fsdp2 ncu interrupt (default: all)
# Each step has its own time limit; the run store (without the large .nsys-rep archives) is packed at the end
# whatever happened, so a step that fails or runs out of time loses only itself.
set -uo pipefail
STEPS=("${@:-contention overlap ctas ddp fsdp2 ncu interrupt}")
read -r -a STEPS <<<"${STEPS[*]}"
W=/tmp/traceql-suite; mkdir -p "$W"
python3 -m pip install -q --no-deps --no-build-isolation --no-compile --target /tmp/tq . 2>&1 | tail -3
export PYTHONPATH="/tmp/tq${PYTHONPATH:+:$PYTHONPATH}"
cd /tmp  # run the installed traceql, not the source tree (where traceql.collectors does not exist)
TQ=(python3 -m traceql.cli)
S="$W/store"
clean() { grep -v '^\[1/1\]'; }
run_step() {
  echo "### $1 ($(date +%T))"
  case "$1" in
    contention) timeout 150 "${TQ[@]}" bench contention -o "$S" --power --name contention --ctas 16,33,66 ;;
    overlap) timeout 170 "${TQ[@]}" bench overlap -o "$S" --power --name overlap \
        --dtypes bf16,fp16,tf32,fp32 --ops all_reduce,all_gather,reduce_scatter --bytes 134217728 --iters 4 ;;
    ctas) for c in 2 8; do
        NCCL_MAX_CTAS=$c NCCL_MIN_CTAS=$c timeout 80 "${TQ[@]}" bench overlap -o "$S" --power \
          --name "overlap_ctas$c" --dtypes bf16 --ops all_reduce --bytes 134217728 --iters 4
      done ;;
    ddp) timeout 150 "${TQ[@]}" collect -o "$S" --gpu-metrics --power --name train_ddp --label mode=ddp \
        --nsys-args "--capture-range=cudaProfilerApi --capture-range-end=stop" -- \
        torchrun --nproc-per-node 2 -m traceql.collectors.train --parallel ddp --profile-range --steps 4 ;;
    fsdp2) timeout 150 "${TQ[@]}" collect -o "$S" --gpu-metrics --power --name train_fsdp2 --label mode=fsdp2 \
        --nsys-args "--capture-range=cudaProfilerApi --capture-range-end=stop" -- \
        torchrun --nproc-per-node 2 -m traceql.collectors.train --parallel fsdp2 --profile-range --steps 4 ;;
    ncu) timeout 200 "${TQ[@]}" collect --ncu -o "$S" --name kernels --nvtx-include "profile/" -- \
        python3 -m traceql.collectors.contention --ncu ;;
    interrupt) timeout 90 "${TQ[@]}" collect -o "$S" --name interrupted --timeout 25 -- \
        python3 -m traceql.collectors.overlap --iters 100000 --dtypes bf16 --ops all_reduce ;;
    *) echo "unknown step $1"; return 2 ;;
  esac
}
{
  nvidia-smi --query-gpu=name,power.limit,clocks.sm,clocks.max.sm --format=csv
  for s in "${STEPS[@]}"; do
    run_step "$s" 2>&1 | clean
    echo "### $s exit code: ${PIPESTATUS[0]}"
  done
  echo "### summary"
  "${TQ[@]}" sql "$S" "SELECT r.run_id, json_extract_string(r.labels_json, '$.name') AS name, r.format,
      (SELECT count(*) FROM kernels k WHERE k.run_id = r.run_id) AS kernels,
      (SELECT count(*) FROM gpu_metrics g WHERE g.run_id = r.run_id) AS metric_samples,
      (SELECT count(*) FROM power p WHERE p.run_id = r.run_id) AS power FROM runs r"
  ls -la "$S" "$S/reports" 2>/dev/null
} 2>&1 | tee "$W/log.txt"
cd "$W"
tag="$(IFS=_; echo "${STEPS[*]}")"
tar -cJf "$OUT/store_${tag:0:60}.tar.xz" --exclude='*.nsys-rep' --exclude='*.traceql' --exclude='*.qdstrm' store
tar -cJf "$OUT/reports_${tag:0:60}.tar.xz" store/reports/*.nsys-rep store/reports/*.ncu-rep 2>/dev/null
cp log.txt "$OUT/log_${tag:0:60}.txt"
ls -la "$OUT"
