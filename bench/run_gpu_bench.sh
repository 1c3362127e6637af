#!/usr/bin/env bash
# run_gpu_bench.sh — one device call: build the CUDA library, run the GPU parity tests, then
# gantry's trainer and the PyTorch anchor (bench/anchors/torch_pp_baseline.py) on the same
# configs. Logs and JSON lines go to $OUT (or ./gpu-bench-out).
#   bench/run_gpu_bench.sh [build] [test] [single] [pp]     (default: all)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
out="${OUT:-$PWD/gpu-bench-out}"
mkdir -p "$out"
steps="${*:-build test single pp}"
build="$PWD/native/build-cuda"
lib="$build/libgantry_native.so"
results="$out/results.jsonl"
has() { [[ " $steps " == *" $1 "* ]]; }

if has build; then
  t0=$(date +%s)
  cmake -S native -B "$build" -DCMAKE_BUILD_TYPE=Release -DGANTRY_BACKEND=cuda \
    -DGANTRY_CUDA_ARCHS=90a -DGANTRY_CUDNN_FRONTEND_DIR="$PWD/.deps/cudnn_frontend/include" \
    > "$out/build.log" 2>&1 && cmake --build "$build" -j "$(nproc)" >> "$out/build.log" 2>&1
  rc=$?
  echo "build rc=$rc in $(( $(date +%s) - t0 )) s"; tail -5 "$out/build.log"
  [ $rc -eq 0 ] || exit $rc
fi
export GANTRY_CUDA_LIB="$lib" GANTRY_NATIVE_LIB="$lib"
if has test; then
  python3 -m pytest -q -p no:cacheprovider tests/gpu ${GPU_TEST_ARGS:-} 2>&1 | tee "$out/tests.log" | tail -15
fi
run() { # label, command...
  local label="$1"; shift
  echo "== $label"
  "$@" 2>>"$out/bench.err" | tee -a "$results" | tail -1
}
m350=(--layers 24 --dmodel 1024 --heads 16 --mbs 8 --nmb 8)
m15=(--layers 48 --dmodel 1600 --heads 25 --mbs 4 --nmb 8)
if has single; then
  run "gantry 350M 1 GPU" python3 bench/bench_gpu.py --mode single "${m350[@]}"
  run "torch 350M 1 GPU" python3 bench/anchors/torch_pp_baseline.py --mode single "${m350[@]}"
  run "gantry 1.5B 1 GPU" python3 bench/bench_gpu.py --mode single "${m15[@]}"
  run "torch 1.5B 1 GPU" python3 bench/anchors/torch_pp_baseline.py --mode single "${m15[@]}"
fi
tail -3 "$out/bench.err" 2>/dev/null
