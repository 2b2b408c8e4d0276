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

summary() {  # summary SQLITE: table counts, kernels, activity per case range
  python3 - "$1" <<'EOF'
import sqlite3, sys
con = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
q = lambda sql: con.execute(sql).fetchall()
tables = {r[0] for r in q("SELECT name FROM sqlite_master WHERE type='table'")}
for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "NVTX_EVENTS",
          "GPU_METRICS", "CUPTI_ACTIVITY_KIND_RUNTIME", "TARGET_INFO_GPU_METRICS"):
    print(f"{t}: {q(f'SELECT count(*) FROM {t}')[0][0] if t in tables else 'MISSING'}")
if "GPU_METRICS" in tables:
    for dev, n, t0, t1, m in q("""SELECT typeId, count(DISTINCT timestamp), min(timestamp), max(timestamp),
                                  count(DISTINCT metricId) FROM GPU_METRICS GROUP BY 1"""):
        print(f"metric samples (typeId {dev}): {n} over {(t1 - t0) / 1e9:.3f} s; metrics: {m}")
t0, t1 = q("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
print(f"kernels span {(t1 - t0) / 1e9:.3f} s")
try:
    print(f"graph-node kernels: {q('SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId > 0')[0][0]}")
except sqlite3.Error as exc:
    print("graph-node kernels: ?", exc)
print("distinct kernels (device, name, grid, block, dyn smem, count, mean us):")
for r in q("""SELECT k.deviceId, s.value, k.gridX, k.gridY, k.gridZ, k.blockX, k.dynamicSharedMemory, count(*),
                     avg(k.end - k.start) / 1e3
              FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
              GROUP BY 1, 2, 3, 4, 5, 6, 7 ORDER BY 1, 8 DESC"""):
    print(f"    dev{r[0]} {r[1][:90]} grid=({r[2]},{r[3]},{r[4]}) block={r[5]} smem={r[6]} n={r[7]} mean={r[8]:.1f}us")
print("per case range (activity launched inside it: name, count, mean us):")
memcpy = ("UNION ALL SELECT correlationId, globalPid, 'memcpy(' || bytes || ' B)', end - start "
          "FROM CUPTI_ACTIVITY_KIND_MEMCPY") if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables else ""
rows = q(f"""
WITH r AS (SELECT n.rowid AS rid, n.start, n.end, n.globalTid, coalesce(n.text, s.value) AS text
           FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId WHERE coalesce(n.text, s.value) LIKE 'case:%'),
a AS (SELECT k.correlationId, k.globalPid, s.value AS name, k.end - k.start AS dur
      FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName {memcpy})
SELECT r.rid, r.text, a.name, count(*), avg(a.dur) / 1e3
FROM r JOIN CUPTI_ACTIVITY_KIND_RUNTIME rt ON rt.globalTid = r.globalTid AND rt.start BETWEEN r.start AND r.end
JOIN a ON a.correlationId = rt.correlationId AND a.globalPid = (rt.globalTid >> 24) << 24
GROUP BY 1, 2, 3 ORDER BY 1, 4 DESC""")
last = None
for rid, text, name, n, mean in rows:
    if rid != last:
        print("  ", text)
        last = rid
    print(f"       {name[:70]:<70} n={n:<4} mean={mean:.1f}us")
EOF
}

# profile NAME TARGET METRIC_DEVICES TIMEOUT CMD...: nsys profile, export, summary, compress to $OUT/TARGET.sqlite.xz
profile() {
  local name="$1" target="$2" mdev="$3" limit="$4"; shift 4
  echo "### profile $name"
  time timeout "$limit" nsys profile "${NSYS[@]}" --gpu-metrics-devices="$mdev" -o "$W/$name" "$@"
  echo "### export $name"
  timeout 150 nsys export -t sqlite --force-overwrite=true -o "$W/$name.sqlite" "$W/$name.nsys-rep"
  ls -la "$W"
  echo "### summary $name"
  summary "$W/$name.sqlite"
  echo "### compress $name"
  xz -T16 -6 -c "$W/$name.sqlite" > "$OUT/$target.sqlite.xz"
  ls -la "$OUT"
}

for step in ${EVAL_STEPS:-cases}; do
  case "$step" in
    cases)
      rm -f "$W"/eval_cases*
      {
        echo "### gpu $gpu"; versions
        profile eval_cases "eval_cases_$gpu" 0 300 python3 "$C/eval_cases.py" --profile-range "$@"
      } 2>&1 | tee "$OUT/eval_cases_$gpu.log" ;;
    allreduce)
      rm -f "$W"/eval_allreduce*
      {
        echo "### gpu ${gpu}x2 ($ngpu GPUs)"; versions
        if [ "$ngpu" -lt 2 ]; then
          echo "allreduce: needs 2 GPUs, found $ngpu: skipped"
        else
          export NCCL_MAX_CTAS=16 NCCL_MIN_CTAS=16 NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0,1
          echo "NCCL_MAX_CTAS=$NCCL_MAX_CTAS NCCL_MIN_CTAS=$NCCL_MIN_CTAS NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
          nvidia-smi topo -m 2>&1 | head -4
          profile eval_allreduce "eval_allreduce_${gpu}x2" all 240 \
              torchrun --nproc-per-node 2 "$C/eval_allreduce.py" --profile-range
        fi
      } 2>&1 | tee "$OUT/eval_allreduce_${gpu}x2.log" ;;
    *) echo "unknown step $step (cases, allreduce)" ;;
  esac
done
