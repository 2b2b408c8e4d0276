#!/bin/bash
# Collect traceql's real test data on a GPU machine (2 x H200): run from the repository root
# after `source .device-carry/device-setup.sh`. Writes compressed results under $OUT.
set -uo pipefail
W=/tmp/traceql-work; rm -rf "$W"; mkdir -p "$W"
C="$(pwd)/collectors"
NSYS_COMMON=(-t cuda,nvtx,osrt --cuda-graph-trace=node -s none --cpuctxsw=none --force-overwrite=true)
CAP=(--capture-range=cudaProfilerApi --capture-range-end=stop)
log() { echo "### $*"; }
{
  nvidia-smi --query-gpu=name,uuid,pci.bus_id,power.limit,clocks.max.sm --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
  log overlap
  timeout 240 nsys profile "${NSYS_COMMON[@]}" "${CAP[@]}" --gpu-metrics-devices=all -o "$W/overlap" \
      python3 "$C/overlap.py" --profile-range ${OVERLAP_ARGS:-}
  log contention
  timeout 180 nsys profile "${NSYS_COMMON[@]}" "${CAP[@]}" --gpu-metrics-devices=0 -o "$W/contention" \
      python3 "$C/contention.py" --profile-range
  log train ddp
  timeout 150 nsys profile "${NSYS_COMMON[@]}" "${CAP[@]}" -o "$W/train_ddp" python3 "$C/train.py" --mode ddp --profile-range
  log train fsdp2
  timeout 150 nsys profile "${NSYS_COMMON[@]}" "${CAP[@]}" -o "$W/train_fsdp2" python3 "$C/train.py" --mode fsdp2 --profile-range
  log ncu
  timeout 200 ncu --clock-control none --nvtx --nvtx-include "profile/" \
      --section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
      --section ComputeWorkloadAnalysis \
      --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__throughput.avg.pct_of_peak_sustained_elapsed \
      -f -o "$W/kernels" python3 "$C/contention.py" --ncu
  log export
  for r in "$W"/*.nsys-rep; do
    nsys export -t sqlite --force-overwrite=true -o "${r%.nsys-rep}.sqlite" "$r"
  done
  nsys export -t parquetdir --force-overwrite=true -o "$W/contention_pq" "$W/contention.nsys-rep"
  ls -la "$W" "$W"/contention_pq
  python3 "$C/summarize_sqlite.py" "$W"/*.sqlite
} 2>&1 | tee "$W/log.txt"
cd "$W"
for f in *.sqlite; do xz -T16 -6 -c "$f" > "$OUT/$f.xz"; done
tar -cJf "$OUT/reps_and_pq.tar.xz" *.nsys-rep contention_pq kernels.ncu-rep 2>/dev/null
cp log.txt "$OUT/"
ls -la "$OUT"
