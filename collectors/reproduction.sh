#!/bin/bash
# The overlap characterization of Lee et al. (ISPASS 2025) on one machine with 2 GPUs, in one command:
#   source .device-carry/device-setup.sh && collectors/reproduction.sh          (from the repository root)
# Every run goes through `traceql collect` (nsys with GPU metrics, NVML power every 15 ms) into one run store;
# docs/collect.md ("The reproduction experiment") lists the runs, their NVTX labels and what each is for.
#   overlap            the microbenchmark: compute | comm | overlapped | sequential x all_reduce, all_gather,
#                      reduce_scatter x bf16, fp16, tf32, fp32, fp8 x 2 message sizes x NCCL CTA limit default, 2, 8;
#                      every configuration warmed up, at least ITERS iterations and MIN_CASE_MS per mode
#                      (GPU metrics at 1 kHz for every run: the traces stay a few MB; METRICS_HZ changes it)
#   train_ddp, train_fsdp2, train_pp
#                      a GPT-style model, DDP / FSDP2 / two pipeline stages, each in overlapped, sequential and
#                      compute (no communication) modes
#   train_ddp_repeat   train_ddp's command again (run-to-run noise: the same program twice)
#   train_ddp_ctas2    train_ddp's command with NCCL_MAX_CTAS=2 (one setting changed)
#   train_ddp_straggler  train_ddp overlapped, 6 steps, rank GPUS-2 slowed in steps 1 and 3 by a co-runner holding
#                      60% of its SMs for 300 ms (a known slow rank; not in the default steps)
#   train_ddp_ctasN, train_fsdp2_ctasN (steps ddp_ctasN, fsdp2_ctasN)
#                      train_ddp's / train_fsdp2's command with NCCL_MAX_CTAS=N
#   overlap_gemmN      the microbenchmark with a GEMM of N (OVERLAP_ARGS: its other arguments, in place of overlap's)
# Usage: collectors/reproduction.sh [STEP...]   steps: overlap ddp fsdp2 pp pairs (= repeat ctas2) (default: all of them)
# MODEL_SHAPE: below. REPRO_SCALE=smoke runs every step small (a check of the scripts, about 2-3 minutes).
# Results under $OUT (default ./out): the run store without the reports and GPU metrics (store_*.tar.xz), each run's nsys
# SQLite export (xz) with its NVML samples and labels (exports_*.tar, at most 15 MiB each), and the log.
# Clocks, power limits and other GPU settings are left as they are.
set -uo pipefail
OUT="${OUT:-$(pwd)/out}"; mkdir -p "$OUT"
W=/tmp/traceql-repro; rm -rf "$W"; mkdir -p "$W/exports"
STEPS=("${@:-overlap ddp fsdp2 pairs pp}")
read -r -a STEPS <<<"${STEPS[*]}"
if [ "${REPRO_SCALE:-full}" = smoke ]; then
  OVERLAP=(--dtypes bf16,fp8,fp32 --ops all_reduce,all_gather,reduce_scatter --bytes 4194304,16777216
           --max-ctas default,2 --iters 4 --min-case-ms 10 --warmup 2)
  MODEL=(--layers 12 --dim 6144 --heads 48 --seq 1024 --batch 8 --steps 1 --warmup 1)
else
  OVERLAP=(--dtypes bf16,fp16,tf32,fp32,fp8 --ops all_reduce,all_gather,reduce_scatter --bytes 16777216,134217728
           --max-ctas default,2,8 --iters "${ITERS:-12}" --min-case-ms "${MIN_CASE_MS:-0}" --warmup 2)
  # 5.8 B parameters: DDP holds about 80 GB of an H200's 141 (parameters, gradients, buckets, AdamW, activations)
  MODEL=(--layers 12 --dim 6144 --heads 48 --seq 1024 --batch 8 --steps "${STEPS_PER_MODE:-3}" --warmup 2)
fi
if [ -n "${OVERLAP_ARGS:-}" ]; then read -r -a OVERLAP <<<"$OVERLAP_ARGS"; fi
# MODEL_SHAPE replaces the model's shape (e.g. "--layers 16 --dim 4096 --heads 32 --seq 2048 --batch 4"): the same
# programs with other kernels, for checks on traces unlike the committed ones
if [ -n "${MODEL_SHAPE:-}" ]; then
  read -r -a SHAPE <<<"$MODEL_SHAPE"
  MODEL=("${SHAPE[@]}" --steps "${STEPS_PER_MODE:-3}" --warmup 2)
fi
python3 -m pip install -q --no-deps --no-build-isolation --no-compile --target /tmp/tq . 2>&1 | tail -3
export PYTHONPATH="/tmp/tq${PYTHONPATH:+:$PYTHONPATH}"
cd /tmp  # the installed traceql (with traceql.collectors), not the source tree
S="$W/store"
CAPTURE="--capture-range=cudaProfilerApi --capture-range-end=stop"
HZ=${METRICS_HZ:-1000}
GPUS=${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}  # one process per local GPU (2, 4, 8...)

DEADLINE=${DEADLINE:-480}  # seconds: no run starts later, and none runs past it (the results are packed after)
# collect NAME LIMIT_S METRICS_HZ COMMAND...: one run into the store; its SQLite export is made in the background
collect() {
  local name=$1 limit=$2 hz=$3; shift 3
  local t0=$SECONDS left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 40 ]; then echo "### $name: skipped, ${left} s left before the deadline"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  # SIGINT, as Ctrl-C: traceql ends the program's process group and its NVML sampler and keeps the partial report
  timeout -s INT -k 60 "$limit" python3 -m traceql.cli collect -o "$S" --gpu-metrics --power --name "$name" \
    --label experiment=reproduction --nsys-args "$CAPTURE --gpu-metrics-frequency=$hz" -- "$@"
  echo "### $name: exit $? after $((SECONDS - t0)) s"
  ( rep="$S/reports/$name.nsys-rep"
    [ -f "$rep" ] || exit 0
    nsys export -t sqlite --force-overwrite=true --include-json=true -o "$W/exports/$name.sqlite" "$rep" >/dev/null 2>&1 \
      && xz -T4 -6 "$W/exports/$name.sqlite"
    cp "$S/reports/$name.power.parquet" "$W/exports/" 2>/dev/null ) &
}
TRAIN=(torchrun --nproc-per-node "$GPUS" -m traceql.collectors.train --profile-range "${MODEL[@]}")
run_step() {
  echo "### step $1 ($(date +%T))"
  case "$1" in
    overlap) collect overlap 240 "$HZ" torchrun --nproc-per-node "$GPUS" -m traceql.collectors.overlap --profile-range \
               "${OVERLAP[@]}" ;;
    ddp) collect train_ddp 120 "$HZ" "${TRAIN[@]}" --parallel ddp ;;
    fsdp2) collect train_fsdp2 120 "$HZ" "${TRAIN[@]}" --parallel fsdp2 ;;
    pp) collect train_pp 120 "$HZ" "${TRAIN[@]}" --parallel pp --microbatches 4 ;;
    pairs) run_step repeat; run_step ctas2 ;;
    repeat) collect train_ddp_repeat 120 "$HZ" "${TRAIN[@]}" --parallel ddp ;;
    ctas2) NCCL_MAX_CTAS=2 collect train_ddp_ctas2 120 "$HZ" "${TRAIN[@]}" --parallel ddp ;;
    ddp_ctas[0-9]*) NCCL_MAX_CTAS=${1#ddp_ctas} collect "train_$1" 120 "$HZ" "${TRAIN[@]}" --parallel ddp ;;
    fsdp2_ctas[0-9]*) NCCL_MAX_CTAS=${1#fsdp2_ctas} collect "train_$1" 120 "$HZ" "${TRAIN[@]}" --parallel fsdp2 ;;
    overlap_gemm[0-9]*) collect "$1" 240 "$HZ" torchrun --nproc-per-node "$GPUS" -m traceql.collectors.overlap \
                          --profile-range "${OVERLAP[@]}" --gemm "${1#overlap_gemm}" ;;
    straggler) collect train_ddp_straggler 150 "$HZ" "${TRAIN[@]}" --parallel ddp --modes overlapped --steps 6 \
                 --slow-rank $((GPUS - 2)) --slow-steps 1,3 --slow-sm-share 0.6 --slow-ms 300 ;;
    *) echo "unknown step $1"; return 2 ;;
  esac
}
{
  nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.max.sm,memory.total --format=csv
  nvidia-smi topo -m 2>/dev/null | head -4
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))'
  echo "nsys: $(nsys --version 2>&1 | tail -1); steps: ${STEPS[*]}; scale: ${REPRO_SCALE:-full}"
  for s in "${STEPS[@]}"; do run_step "$s"; done
  wait  # the background exports
  echo "### summary ($(date +%T))"
  python3 -m traceql.cli sql "$S" "SELECT labels_json->>'name' AS name, r.run_id,
      (SELECT count(*) FROM kernels k WHERE k.run_id = r.run_id) AS kernels,
      (SELECT count(*) FROM gpu_metrics g WHERE g.run_id = r.run_id) AS metric_samples,
      (SELECT count(*) FROM power p WHERE p.run_id = r.run_id) AS power_samples FROM runs r ORDER BY 1"
  echo "### NVML: sample period and energy counter steps per run and GPU"
  python3 -m traceql.cli sql "$S" "WITH s AS (SELECT run_id, device_id, ts_ns, energy_j,
        ts_ns - lag(ts_ns) OVER w AS gap, energy_j <> lag(energy_j) OVER w AS step
      FROM power WINDOW w AS (PARTITION BY run_id, device_id ORDER BY ts_ns))
    SELECT run_id, device_id, count(*) AS samples, median(gap) / 1e6 AS period_ms, quantile_cont(gap, 0.99) / 1e6
      AS p99_ms, (max(ts_ns) - min(ts_ns)) / nullif(count(*) FILTER (step), 0) / 1e6 AS ms_per_counter_step
    FROM s GROUP BY ALL ORDER BY 1, 2"
  echo "### training: each mode: GPU time with compute, communication, both; energy (GPU 0 and 1)"
  python3 -m traceql.cli sql "$S" "SELECT ru.labels_json->>'name' AS name, r.device_id, r.start_ns, r.text,
        round(r.dur_ns / 1e6, 1) AS ms,
        round(sum(least(s.end_ns, r.end_ns) - greatest(s.start_ns, r.start_ns)) FILTER (s.state = 'compute') / 1e6, 1)
          AS compute_alone_ms,
        round(sum(least(s.end_ns, r.end_ns) - greatest(s.start_ns, r.start_ns)) FILTER (s.state = 'comm') / 1e6, 1)
          AS comm_alone_ms,
        round(sum(least(s.end_ns, r.end_ns) - greatest(s.start_ns, r.start_ns)) FILTER (s.state = 'overlap') / 1e6, 1)
          AS overlap_ms,
        round(any_value(e.energy_j), 1) AS energy_j, round(any_value(e.energy_lo_j), 1) AS lo_j,
        round(any_value(e.energy_hi_j), 1) AS hi_j
      FROM nvtx_device_ranges r JOIN runs ru USING (run_id)
      LEFT JOIN timeline_segments s ON s.run_id = r.run_id AND s.device_id = r.device_id
        AND s.start_ns < r.end_ns AND s.end_ns > r.start_ns
      LEFT JOIN range_energy e ON e.run_id = r.run_id AND e.global_tid = r.global_tid AND e.start_ns = r.start_ns
      WHERE r.text LIKE 'mode:%' GROUP BY ALL ORDER BY 1, 2, r.start_ns"
  echo "### overlap microbenchmark: busy fraction and iterations per mode (lowest first), NCCL grids per CTA limit"
  python3 -m traceql.cli sql "$S" "SELECT mode, dtype, op, bytes, max_ctas, iters, round(wall_ns / 1e6, 1) AS ms,
      round(gpu_busy_fraction, 3) AS busy FROM microbench_modes ORDER BY gpu_busy_fraction LIMIT 12"
  python3 -m traceql.cli sql "$S" "SELECT mode, min(gpu_busy_fraction) AS min_busy, median(gpu_busy_fraction) AS
      median_busy, min(iters) AS min_iters, max(iters) AS max_iters, sum(wall_ns) / 1e9 AS seconds
      FROM microbench_modes GROUP BY 1"
  python3 -m traceql.cli sql "$S" "SELECT n.labels['max_ctas'] AS max_ctas, k.comm_op, min(k.grid_x) AS min_grid,
      max(k.grid_x) AS max_grid, count(*) AS kernels FROM kernels k JOIN runtime_api a USING (run_id, global_pid,
      correlation_id) JOIN nvtx n ON n.run_id = a.run_id AND n.global_tid = a.global_tid AND a.start_ns BETWEEN
      n.start_ns AND n.end_ns WHERE k.kind = 'comm' AND n.case_name = 'overlap' GROUP BY ALL ORDER BY 1, 2"
  ls -la "$W/exports"
} 2>&1 | tee "$W/log.txt" "$OUT/log_${REPRO_SCALE:-full}.txt"
cd "$W"
python3 -m traceql.cli sql "$S" "SELECT labels_json->>'name' AS name, run_id, labels_json AS labels FROM runs" \
  --format json -o exports/runs.json
# pack: the store without the reports and GPU metrics (the exports have them), then the exports in parts of at
# most 15 MiB each
tar -cJf "$OUT/store_${REPRO_SCALE:-full}.tar.xz" --exclude='reports' --exclude='gpu_metrics.parquet' store
python3 - "$OUT" "${REPRO_SCALE:-full}" <<'EOF'
import os, sys, tarfile
out, tag = sys.argv[1], sys.argv[2]
files = sorted((os.path.getsize(f"exports/{f}"), f) for f in os.listdir("exports"))
parts, limit = [], 15 * 2**20
for size, f in sorted(files, reverse=True):
    part = next((p for p in parts if p[0] + size <= limit), None)
    if part is None:
        part = [0, []]
        parts.append(part)
    part[0] += size
    part[1].append(f)
for i, (_, names) in enumerate(parts[:5]):
    with tarfile.open(f"{out}/exports_{tag}_{i}.tar", "w") as t:
        for f in names:
            t.add(f"exports/{f}", arcname=f)
    print(f"exports_{tag}_{i}.tar:", ", ".join(names))
EOF
ls -la "$OUT"
