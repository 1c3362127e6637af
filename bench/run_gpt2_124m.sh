#!/usr/bin/env bash
# run_gpt2_124m.sh — one device call for GPT-2 124M with its real vocabulary: build the CUDA
# library (`gantry build`, cuDNN attention, NCCL), run bench/gpt2_124m_compare.py (gantry vs
# transformers' GPT2LMHeadModel from the same HF-format weights and GPT-2-token shards, 50
# steps, then gantry's exported weights back in transformers), then every GPU test.
#   bench/run_gpt2_124m.sh VOCAB_DIR [STEP...]   steps: build compare tests (default: all)
# VOCAB_DIR holds GPT-2's vocab.json + merges.txt (carried; nothing is downloaded). Python
# wheels the machine lacks (python-hostlist) are installed from .whl/ when it is there.
# Results go to $OUT: gpt2-124m.json (the comparison's JSON line), tests-gpu.log, build.log.
set -uo pipefail
vocab_dir="${1:?usage: bench/run_gpt2_124m.sh VOCAB_DIR [build compare tests]}"; shift
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
source bench/gpu_bench_common.sh
gpu_bench_dirs "$PWD/gpt2-124m-out" /tmp/gantry-gpt2-124m
steps="${*:-build compare tests}"
if has build; then
  GPU_BENCH_WORK="$work" bash bench/run_gpu_bench.sh build 2>&1 | tail -4
  cp "$out/build.log" "$logs/build.log" 2>/dev/null
fi
lib=$(cat "$work/lib.path" 2>/dev/null || echo native/build-cuda/libgantry_native.so)
export GANTRY_CUDA_LIB="$lib"
if has compare; then
  stamp "gpt2_124m_compare.py (lib $lib)"
  rm -rf "$work/compare"
  timeout "${COMPARE_TIMEOUT:-300}" python3 bench/gpt2_124m_compare.py --lib "$lib" \
    --vocab-dir "$vocab_dir" --work "$work/compare" 2> "$logs/compare.err" \
    | tee "$out/gpt2-124m.json" | cut -c1-3000
  stamp "compare rc=${PIPESTATUS[0]}"; grep -v "it/s]" "$logs/compare.err" | tail -5
  nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv,noheader
fi
if has tests; then
  stamp "tests/gpu"
  timeout "${TESTS_TIMEOUT:-300}" python3 -m pytest -q -p no:cacheprovider tests/gpu 2>&1 \
    | tee "$out/tests-gpu.log" | tail -25
fi
