#!/bin/bash
# Collect the evaluation traces (tests/data/eval/EXPECTED.md) under Nsight Systems, with GPU metrics sampling.
# Run from the repository root on a GPU machine, after `source .device-carry/device-setup.sh`.
#
#   bash collectors/eval_cases.sh [ARGS for eval_cases.py]
#
# EVAL_STEPS (default "cases") picks the steps, in this order:
#   cases      collectors/eval_cases.py on GPU 0 -> $OUT/eval_cases_<gpu>.sqlite.xz and $OUT/eval_cases_<gpu>.log
#   allreduce  collectors/eval_allreduce.py under torchrun --nproc-per-node 2 (needs 2 GPUs), NCCL_MAX_CTAS=16,
#              one nsys around torchrun -> $OUT/eval_allreduce_<gpu>x2.sqlite.xz and .log
#   comm       collectors/eval_comm.py under torchrun --nproc-per-node 2 (needs 2 GPUs), NCCL's default CTAs,
#              one nsys around torchrun -> $OUT/eval_comm_<gpu>x2.sqlite.xz and .log
#   copies     collectors/eval_copies.py on GPU 0 (copy engines beside kernels; COPIES_ARGS: its arguments)
#              -> $OUT/eval_copies_<gpu>.sqlite.xz, .log
#   residency  collectors/residency.py on GPU 0 (calibration data for the SM model) -> $OUT/residency_<gpu>.sqlite.xz
#   residency_gemms  collectors/residency.py --case gemms (a check of the delays rule) -> residency_gemms_<gpu>...
#   residency_pairs  collectors/residency.py --case pairs (which co-runners take SMs from which victims)
#              -> residency_pairs_<gpu>.sqlite.xz and .log
#   residency_pairs66  collectors/residency.py --case pairs66 (the GEMM beside one-CTA-per-SM holders on S/2 SMs)
#              -> residency_pairs66_<gpu>.sqlite.xz and .log
#   residency_coresident  collectors/residency.py --case coresident (a bandwidth-bound kernel beside co-resident CTAs)
#              -> residency_coresident_<gpu>.sqlite.xz and .log
#   held       collectors/eval_held.py the same way, nsys also tracing CUDA events (--cuda-event-trace=true, where
#              this nsys has it) -> $OUT/eval_held_<gpu>x2.sqlite.xz and .log
# OUT defaults to ./out. Extra arguments go to eval_cases.py. Each step has its own time limits; each step's log is
# written to $OUT as it goes (tee), so a step cut short still leaves its log.
set -uo pipefail
OUT="${OUT:-$(pwd)/out}"; mkdir -p "$OUT"
W=/tmp/eval-work; mkdir -p "$W"
C="$(pwd)/collectors"
gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z' 'a-z' | sed -E 's/[^a-z0-9]+/_/g; s/^_+|_+$//g')"
gpu="${gpu:-gpu}"
ngpu="$(nvidia-smi -L | grep -c '^GPU')"
NSYS=(-t cuda,nvtx,osrt -s none --cpuctxsw=none --cuda-graph-trace=node --force-overwrite=true
      --capture-range=cudaProfilerApi --capture-range-end=stop)

versions() {
  nvidia-smi --query-gpu=index,name,memory.total,driver_version,power.limit,clocks.max.sm,clocks.max.mem --format=csv
  echo "nsys: $(nsys --version 2>&1 | tail -1)"
  python3 -c 'import torch, cupy, triton; p = torch.cuda.get_device_properties(0); print("torch", torch.__version__, "cuda", torch.version.cuda, "cupy", cupy.__version__, "triton", triton.__version__, "nccl", torch.cuda.nccl.version(), "cudnn", torch.backends.cudnn.version(), "| gpus", torch.cuda.device_count(), "sms", p.multi_processor_count, "L2", p.L2_cache_size)'
  date -u +"date: %Y-%m-%d %H:%M:%S UTC"
}


# profile NAME TARGET METRIC_DEVICES TIMEOUT CMD...: nsys profile, export, summary, compress to $OUT/TARGET.sqlite.xz
profile() {
  local name="$1" target="$2" mdev="$3" limit="$4"; shift 4
  echo "### profile $name"
  time timeout "$limit" nsys profile "${NSYS[@]}" ${NSYS_EXTRA:-} --gpu-metrics-devices="$mdev" -o "$W/$name" "$@"
  echo "### export $name"
  timeout 150 nsys export -t sqlite --force-overwrite=true -o "$W/$name.sqlite" "$W/$name.nsys-rep"
  ls -la "$W"
  echo "### summary $name"
  python3 "$C/case_summary.py" "$W/$name.sqlite"
  echo "### compress $name"
  xz -T16 -6 -c "$W/$name.sqlite" > "$OUT/$target.sqlite.xz"
  ls -la "$OUT"
}

# torchrun_step STEP [NCCL_VAR=VALUE ...]: collectors/eval_STEP.py on GPUs 0 and 1 under torchrun, one nsys around
# it, with NVLS off and the NCCL variables given (set for this step alone) -> $OUT/eval_STEP_<gpu>x2.sqlite.xz and .log
torchrun_step() {
  local step="$1"; shift
  rm -f "$W/eval_$step"*
  {
    echo "### gpu ${gpu}x2 ($ngpu GPUs)"; versions
    if [ "$ngpu" -lt 2 ]; then
      echo "$step: needs 2 GPUs, found $ngpu: skipped"
    else
      # the group runs in a subshell (it is piped to tee): the exports end with the step
      export NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0,1 "$@"
      echo "NCCL_NVLS_ENABLE=0 ${*:-(NCCL_MAX_CTAS unset)}"
      nvidia-smi topo -m 2>&1 | head -4
      profile "eval_$step" "eval_${step}_${gpu}x2" all 240 \
          torchrun --nproc-per-node 2 "$C/eval_$step.py" --profile-range
    fi
  } 2>&1 | tee "$OUT/eval_${step}_${gpu}x2.log"
}

# residency_step NAME [ARGS for residency.py]: collectors/residency.py on GPU 0 under nsys
#   -> $OUT/NAME_<gpu>.sqlite.xz and $OUT/NAME_<gpu>.log
residency_step() {
  local name="$1"; shift
  rm -f "$W/$name"*
  {
    echo "### gpu $gpu"; versions
    profile "$name" "${name}_$gpu" 0 200 python3 "$C/residency.py" "$@" --profile-range
  } 2>&1 | tee "$OUT/${name}_$gpu.log"
}

for step in ${EVAL_STEPS:-cases}; do
  case "$step" in
    cases)
      rm -f "$W"/eval_cases*
      {
        echo "### gpu $gpu"; versions
        profile eval_cases "eval_cases_$gpu" 0 300 python3 "$C/eval_cases.py" --profile-range "$@"
      } 2>&1 | tee "$OUT/eval_cases_$gpu.log" ;;
    copies)
      rm -f "$W"/eval_copies*
      {
        echo "### gpu $gpu"; versions
        profile eval_copies "eval_copies_$gpu" 0 300 python3 "$C/eval_copies.py" --profile-range ${COPIES_ARGS:-}
      } 2>&1 | tee "$OUT/eval_copies_$gpu.log" ;;
    # calibration data, not evaluation (tests/data/calibration/*/README.md)
    residency) residency_step residency ;;  # beside a many-wave co-runner that fills the SMs
    residency_gemms) residency_step residency_gemms --case gemms ;;  # a check of the delays rule
    residency_pairs) residency_step residency_pairs --case pairs ;;  # which co-runners take SMs from which victims
    residency_pairs66) residency_step residency_pairs66 --case pairs66 ;;  # one-CTA-per-SM holders on S/2 SMs
    residency_coresident) residency_step residency_coresident --case coresident ;;  # beside co-resident CTAs
    allreduce) torchrun_step allreduce NCCL_MAX_CTAS=16 NCCL_MIN_CTAS=16 ;;
    comm) torchrun_step comm ;;
    held)
      # the help read whole first: grep -q would close the pipe early, and under pipefail nsys's SIGPIPE fails the test
      help="$(nsys profile --help 2>&1)"
      if grep -q -- '--cuda-event-trace' <<<"$help"; then NSYS_EXTRA=--cuda-event-trace=true; fi
      echo "held: NSYS_EXTRA=${NSYS_EXTRA:-(none: this nsys has no --cuda-event-trace)}"
      torchrun_step held
      NSYS_EXTRA= ;;
    *) echo "unknown step $step (cases, copies, residency, residency_gemms, residency_pairs, residency_pairs66, residency_coresident, allreduce, comm, held)" ;;
  esac
done
