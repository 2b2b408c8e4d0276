#!/bin/bash
# Collect the known-cause contention trace (collectors/known_cause.py) on one GPU under Nsight Systems,
# with GPU metrics sampling. Run from the repository root on a GPU machine, after
# `source .device-carry/device-setup.sh`. Writes $OUT/known_cause_<gpu>.sqlite.xz and
# $OUT/known_cause_<gpu>.log (OUT defaults to ./out). Extra arguments go to known_cause.py.
set -uo pipefail
OUT="${OUT:-$(pwd)/out}"; mkdir -p "$OUT"
W=/tmp/known-cause-work; rm -rf "$W"; mkdir -p "$W"
C="$(pwd)/collectors"
gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z' 'a-z' | sed -E 's/[^a-z0-9]+/_/g; s/^_+|_+$//g')"
gpu="${gpu:-gpu}"
{
  echo "### gpu $gpu"
  nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit,clocks.max.sm,clocks.max.mem --format=csv
  echo "nsys: $(nsys --version 2>&1 | tail -1)"
  python3 -c 'import torch, cupy; p = torch.cuda.get_device_properties(0); print("torch", torch.__version__, "cuda", torch.version.cuda, "cupy", cupy.__version__, "| sms", p.multi_processor_count, "L2", p.L2_cache_size)'
  echo "### profile"
  time timeout 200 nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --force-overwrite=true \
      --capture-range=cudaProfilerApi --capture-range-end=stop --gpu-metrics-devices=0 \
      -o "$W/known_cause" python3 "$C/known_cause.py" --profile-range "$@"
  echo "### export"
  timeout 150 nsys export -t sqlite --force-overwrite=true -o "$W/known_cause.sqlite" "$W/known_cause.nsys-rep"
  ls -la "$W"
  echo "### summary"
  python3 "$C/case_summary.py" "$W/known_cause.sqlite"
  python3 - "$W/known_cause.sqlite" <<'EOF'
import sqlite3, sys
con = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
q = lambda sql: con.execute(sql).fetchall()
print("mixed-K signatures (name, grid, block) inside gemm_mixed_k ranges:")
for r in q("""
WITH r AS (SELECT n.start, n.end, n.globalTid FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
           WHERE coalesce(n.text, s.value) LIKE 'case:gemm_mixed_k%')
SELECT s.value, k.gridX, k.gridY, k.gridZ, k.blockX, count(*), min(k.end - k.start) / 1e3, max(k.end - k.start) / 1e3
FROM r JOIN CUPTI_ACTIVITY_KIND_RUNTIME rt ON rt.globalTid = r.globalTid AND rt.start BETWEEN r.start AND r.end
JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = rt.correlationId JOIN StringIds s ON s.id = k.shortName
GROUP BY 1, 2, 3, 4, 5"""):
    print("   ", r[0][:80], f"grid=({r[1]},{r[2]},{r[3]}) block={r[4]} n={r[5]} min={r[6]:.1f}us max={r[7]:.1f}us")
EOF
  echo "### compress"
  xz -T16 -6 -c "$W/known_cause.sqlite" > "$OUT/known_cause_$gpu.sqlite.xz"
  ls -la "$OUT"
} 2>&1 | tee "$W/log.txt"
cp "$W/log.txt" "$OUT/known_cause_$gpu.log"
