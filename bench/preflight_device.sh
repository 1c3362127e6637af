#!/usr/bin/env bash
# Runs gantry preflight on the GPU machine (the `device` tool) at every level, with both GPU
# sources (NVML and nvidia-smi), plus the quick-level benchmark; writes JSON to $OUT.
# Usage (repo root on the device): bash bench/preflight_device.sh [dir with missing pure-Python
# modules, e.g. hostlist.py, put on PYTHONPATH when the device lacks them]
set -uo pipefail
out=${OUT:-/tmp/preflight-out}
mkdir -p "$out"
if [ -n "${1:-}" ]; then
    export PYTHONPATH="$(cd "$1" && pwd)"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
gpus=$(nvidia-smi -L | wc -l)
model=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
cat > "$out/h200.yaml" <<SITE
name: device-h200
nodes: {names: gpu1, cpus: $(nproc), real_memory_mb: 1000, gpus_per_node: $gpus, gpu_model: "$model"}
preflight: {state_dir: /tmp/gantry-preflight-state}
SITE
nvidia-smi -q -x > "$out/nvidia-smi-q.xml"
nvidia-smi nvlink -s > "$out/nvlink-s.txt" 2>&1
run() {  # name, then gantry preflight args
    local name=$1; shift
    local t0=$(date +%s%N)
    python3 -m launcher preflight --site "$out/h200.yaml" --json "$@" > "$out/$name.json" 2> "$out/$name.err"
    local rc=$?
    echo "$name rc=$rc wall=$(( ($(date +%s%N) - t0) / 1000000 )) ms"
}
run quick-nvml --level quick
GANTRY_GPU_SOURCE=nvidia-smi run quick-smi --level quick
run standard --level standard
run deep --level deep
python3 bench/bench_preflight.py quick --site "$out/h200.yaml" --runs 5 > "$out/bench-quick.json"
GANTRY_GPU_SOURCE=nvidia-smi python3 bench/bench_preflight.py quick --site "$out/h200.yaml" \
    --runs 5 > "$out/bench-quick-smi.json"
cat "$out/bench-quick.json" "$out/bench-quick-smi.json"
for f in quick-nvml quick-smi standard deep; do
    python3 - "$out/$f.json" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
print(sys.argv[1].split("/")[-1], v["status"], v["gpu_source"], v["duration_s"], "s")
for c in v["checks"]:
    if c["status"] != "SKIP":
        print(f"  {c['status']:4} {c['id']:<18} {c['observed'][:110]}")
PY
done
