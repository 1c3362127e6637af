#!/usr/bin/env bash
# run_gpu_bench.sh — one device call: build the CUDA library (cuDNN flash attention, NCCL), check
# it, then run gantry's trainer (`gantry train`, no torch in its processes) and the PyTorch anchor
# (bench/anchors/torch_pp_baseline.py, separate processes) on the same configs, single GPU and
# PP=2 on two GPUs. Logs and JSON lines go to $OUT (or ./gpu-bench-out); the last thing printed
# is the markdown table (bench/gpu_bench_table.py). Both trainers' JSON lines carry the GPUs' SM
# clocks and power while busy (bench/gpu_clocks.py): the H200s run power-capped.
#   bench/run_gpu_bench.sh STEP...    steps: build smoke nccltest parity
#                                     single350 pp350 single15 pp15 table  (default: all)
#                                     tests (every GPU test, $OUT/tests-gpu.log)
#                                     switches (a bad GANTRY_ATTENTION / GANTRY_GEMM_CANDIDATES
#                                     stops `gantry train` with one error line naming it, exit 2;
#                                     a good run's start event lists every switch at its default)
#                                     profile (per-op GPU times, GANTRY_PROFILE_OPS=1)
#                                     ctas (PP=2 1f1b with NCCL's own p2p CTA count vs gantry's cap)
#                                     graphs (single350 and pp350 zb-h1 with CUDA graphs off)
#                                     prefill (per-op times with the host's launch gaps removed)
#                                     gemm (1.5B single with the tuner's log, 8 and 32 cuBLASLt
#                                     candidates; PyTorch's matmul on the same shapes)
#                                     chunks (1.5B PP=2 zb-interleaved with 3 and 4 model chunks
#                                     per rank instead of 2: a shorter fill, more transfers)
#                                     optoverlap (1.5B PP=2 zb-interleaved, 2 and 4 chunks per
#                                     rank, with GANTRY_OPT_OVERLAP=3: the other ranks' updates
#                                     mostly from the hook instead of the next step's fill)
#                                     residln (1.5B / 350M single with the residual adds in
#                                     the LayerNorms after them vs in the products' epilogues,
#                                     GANTRY_RESID_LN 1 / 0 alternating)
#                                     mbsize (1.5B single, 32,768 tokens a step as 16 x 2,
#                                     8 x 4 and 4 x 8 sequences, alternating twice)
#                                     cudnnlib (1.5B single with the torch wheel's cuDNN; with the
#                                     heuristic's attention plan instead of the tuned one)
#                                     kernels (gantry-kernel-bench: LayerNorm, column sums,
#                                     GELU backward, AdamW, a D2D copy and the LayerNorm backward
#                                     variants of native/dev/cuda at the 1.5B and 350M shapes;
#                                     $OUT/kernels.jsonl; fails if the variants disagree)
# PP_SCHEDULES / ANCHOR_SCHEDULES narrow the schedules of pp350 / pp15 (default: all).
# Every run has a hard time limit, so one hang cannot eat the call. Per-run logs go to
# $GPU_BENCH_WORK/logs (the device tool brings back only a few files: tar them).
set -uo pipefail
source bench/gpu_bench_common.sh
gpu_bench_dirs "$PWD/gpu-bench-out" /tmp/gantry-gpu-bench
steps="${*:-build smoke nccltest single350 pp350 single15 pp15 table parity}"
build="$PWD/native/build-cuda"
lib="$build/libgantry_native.so"
smoke_tool="$build/gantry-cuda-smoke"
pp_schedules="${PP_SCHEDULES:-1f1b gpipe interleaved zb-h1 zb-h2 zb-interleaved}"
anchor_schedules="${ANCHOR_SCHEDULES:-f1b gpipe interleaved}"
bench_steps="${GPU_BENCH_STEPS:-10}"
bench_warmup="${GPU_BENCH_WARMUP:-3}"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
two_gpus() { # label: true on a machine with two GPUs, else says what it skips
  [ "$ngpu" -ge 2 ] && return 0
  stamp "skip $1: needs 2 GPUs, this machine has $ngpu"; return 1
}

if has build; then
  # the user's path first: `gantry build` for a cuda site (sm_90a, cuDNN attention from .deps);
  # the direct CMake build only if that fails (its error is kept in build.log)
  t0=$(date +%s)
  site="${GPU_BENCH_SITE:-site_configs/example-large.yaml}"
  built=$(GANTRY_BUILD_CACHE="$work/build-cache" python3 -m launcher build --site "$site" --json \
          2> "$out/build.log")
  rc=$?
  if [ $rc -eq 0 ]; then
    lib=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["library"])' <<< "$built")
    smoke_tool="$(dirname "$lib")/gantry-cuda-smoke"
    stamp "gantry build --site $site: rc=0 in $(( $(date +%s) - t0 )) s: $lib"
  else
    stamp "gantry build failed (rc=$rc): $(tail -1 "$out/build.log"); building with CMake"
    configure=(cmake -S native -B "$build" -DCMAKE_BUILD_TYPE=Release -DGANTRY_BACKEND=cuda
               -DGANTRY_CUDA_ARCHS=90a -DGANTRY_CUDNN_FRONTEND_DIR="$PWD/.deps/cudnn_frontend/include")
    "${configure[@]}" >> "$out/build.log" 2>&1 && cmake --build "$build" -j "$(nproc)" >> "$out/build.log" 2>&1
    rc=$?
    stamp "cmake build rc=$rc in $(( $(date +%s) - t0 )) s"; tail -3 "$out/build.log"
    [ $rc -eq 0 ] || exit $rc
  fi
  echo "$lib" > "$work/lib.path"
fi
[ -f "$work/lib.path" ] && lib=$(cat "$work/lib.path") && smoke_tool="$(dirname "$lib")/gantry-cuda-smoke"
export GANTRY_CUDA_LIB="$lib" GANTRY_NATIVE_LIB="$lib"
if has smoke; then
  timeout 60 "$smoke_tool" 50304 1024 16 2 1024 8 2>&1
fi
if has kernels; then
  # next to the library (the CMake build) or in `gantry build`'s cmake-build/ beside it
  kbench="$(dirname "$lib")/gantry-kernel-bench"
  [ -x "$kbench" ] || kbench="$(dirname "$lib")/cmake-build/gantry-kernel-bench"
  : > "$out/kernels.jsonl"
  for shape in "4096 1600" "8192 1024"; do  # N C: 1.5B (mbs 4 x T 1024), 350M (mbs 8 x T 1024)
    read -r kn kc <<< "$shape"
    stamp "gantry-kernel-bench --N $kn --C $kc"
    timeout 120 "$kbench" --N "$kn" --C "$kc" --iters "${KBENCH_ITERS:-50}" \
      --warmup "${KBENCH_WARMUP:-5}" | tee -a "$out/kernels.jsonl"
    stamp "gantry-kernel-bench --N $kn --C $kc: rc=${PIPESTATUS[0]}"
  done
fi
if has tests; then
  stamp "tests/gpu"
  timeout "${TESTS_TIMEOUT:-300}" python3 -m pytest -q -p no:cacheprovider tests/gpu 2>&1 \
    | tee "$out/tests-gpu.log" | tail -25
fi
if has switches; then
  sw="$work/switches"; mkdir -p "$sw"
  cat > "$sw/job.yaml" <<'YAML'
name: switches
model: {n_layer: 2, n_head: 4, n_embd: 256, vocab_size: 512, seq_len: 256}
parallelism: {pp: 1, dp: 1, schedule: 1f1b, micro_batches: 2, micro_batch_size: 2}
train: {steps: 2, lr: 1.0e-4, seed: 0}
YAML
  for bad in GANTRY_ATTENTION=flash GANTRY_GEMM_CANDIDATES=64; do
    name="${bad%%=*}"
    env "$bad" timeout 120 python3 -m launcher train "$sw/job.yaml" --lib "$lib" \
      --run-dir "$sw/run-$name" > "$sw/$name.log" 2>&1
    rc=$?
    errors=$(grep -c '^error: ' "$sw/$name.log"); naming=$(grep -c "^error: .*$name" "$sw/$name.log")
    tracebacks=$(grep -c 'Traceback' "$sw/$name.log")
    verdict=FAILED
    [ "$rc" -eq 2 ] && [ "$errors" -eq 1 ] && [ "$naming" -eq 1 ] && [ "$tracebacks" -eq 0 ] && verdict=ok
    stamp "bad switch $bad: exit $rc, $errors error line(s), $naming naming $name, $tracebacks tracebacks: $verdict"
    grep '^error: ' "$sw/$name.log"
  done
  timeout 180 python3 -m launcher train "$sw/job.yaml" --lib "$lib" --run-dir "$sw/run-ok" \
    > "$sw/ok.log" 2>&1
  stamp "good run: exit $?"
  python3 - "$sw/run-ok" <<'PY'
import json, pathlib, sys
from launcher.native.runtime_config import SWITCHES
from launcher.job_dir import EVENTS_FILE
path = pathlib.Path(sys.argv[1]) / EVENTS_FILE
start = next(e for e in map(json.loads, path.read_text().splitlines()) if e["event"] == "start")
got = start.get("native_switches")
want = {s.name: s.default for s in SWITCHES}
print(f"start event native_switches: {len(got or {})} switches, "
      f"{'ok' if got == want else 'FAILED'}: {json.dumps(got)}")
PY
fi
if has nccltest; then
  stamp "tests/gpu: pipeline layouts, dp overlap, copy-engine edges"
  timeout "${NCCLTEST_TIMEOUT:-150}" python3 -m pytest -x -q -p no:cacheprovider tests/gpu/test_nccl_pipeline.py \
    tests/gpu/test_nccl_dp_overlap.py tests/gpu/test_p2p_copy_engine.py ${NCCLTEST_ARGS:-} 2>&1 \
    | tee "$out/nccltest.log" | tail -15
fi
gantry() { # label, time limit (s), bench_gantry_gpu.py args...
  local label="$1" limit="$2"; shift 2
  stamp "gantry $label"
  local line
  line=$(timeout $((limit + 30)) python3 bench/bench_gantry_gpu.py --lib "$lib" \
    --work "$work/$label" --steps "$bench_steps" --warmup "$bench_warmup" --timeout "$limit" \
    "$@" 2>>"$logs/bench.err")
  echo "$line" >> "$results"; echo "$line" | cut -c1-600
  cp "$work/$label/train.log" "$logs/$label.log" 2>/dev/null
  grep -h "^gantry-op-profile" "$work/$label/train.log" 2>/dev/null | cut -c1-2000
  if [[ "$line" == *'"error"'* && "${GANTRY_ATTENTION:-cudnn}" == cudnn ]]; then
    stamp "gantry $label again with the reference attention"
    line=$(GANTRY_ATTENTION=reference timeout $((limit + 30)) python3 bench/bench_gantry_gpu.py \
      --lib "$lib" --work "$work/$label-ref" --steps "$bench_steps" --warmup "$bench_warmup" \
      --timeout "$limit" "$@" 2>>"$logs/bench.err")
    echo "$line" >> "$results"; echo "$line" | cut -c1-600
  fi
}
anchor() { # label, anchor args...
  local label="$1"; shift
  stamp "torch $label"
  # bench/gpu_clocks.py adds the GPUs' SM clocks / power while busy to the anchor's JSON line
  if [[ " $* " == *" pp "* ]]; then
    timeout 200 python3 bench/gpu_clocks.py -- torchrun --standalone --nproc_per_node 2 \
      bench/anchors/torch_pp_baseline.py --steps "$bench_steps" --warmup "$bench_warmup" "$@" \
      2>>"$logs/bench.err" | tee -a "$results"
  else
    timeout 200 python3 bench/gpu_clocks.py -- python3 bench/anchors/torch_pp_baseline.py \
      --steps "$bench_steps" --warmup "$bench_warmup" "$@" 2>>"$logs/bench.err" | tee -a "$results"
  fi
}
m350=(--layers 24 --dmodel 1024 --heads 16 --mbs 8 --nmb 8)
m15=(--layers 48 --dmodel 1600 --heads 25 --mbs 4 --nmb 8)
if has single350; then
  gantry single350 90 --layout single "${m350[@]}"
  anchor single350 --mode single "${m350[@]}"
fi
if has profile; then  # per-op device times (a few steps; the event marks cost host time)
  GANTRY_PROFILE_OPS=1 bench_steps=3 bench_warmup=1 \
    gantry profile-single350 90 --layout single --variant profiled "${m350[@]}"
  two_gpus profile-pp350 && GANTRY_PROFILE_OPS=1 bench_steps=3 bench_warmup=1 \
    gantry profile-pp350 90 --layout pp2 --schedule 1f1b --variant profiled "${m350[@]}"
  GANTRY_PROFILE_OPS=1 bench_steps=3 bench_warmup=1 \
    gantry profile-single15 150 --layout single --variant profiled "${m15[@]}"
fi
if has residln; then  # alternating, so a drift of the clocks falls on both alike
  for i in 1 2; do
    GANTRY_RESID_LN=1 gantry "residln1-single15-$i" 150 --layout single --variant "resid_ln 1" "${m15[@]}"
    GANTRY_RESID_LN=0 gantry "residln0-single15-$i" 150 --layout single --variant "resid_ln 0" "${m15[@]}"
    GANTRY_RESID_LN=1 gantry "residln1-single350-$i" 90 --layout single --variant "resid_ln 1" "${m350[@]}"
    GANTRY_RESID_LN=0 gantry "residln0-single350-$i" 90 --layout single --variant "resid_ln 0" "${m350[@]}"
  done
fi
if has mbsize; then  # the same 32,768 tokens a step in 16 / 8 / 4 micro-batches, alternating:
  # what a step pays per micro-batch (the weight gradients' fp32 accumulation, launches, fills)
  for i in 1 2; do
    for shape in "2 16" "4 8" "8 4"; do
      read -r mbs nmb <<< "$shape"
      gantry "mbs$mbs-single15-$i" 150 --layout single --variant "mbs $mbs x $nmb" "${m15[@]}" \
        --mbs "$mbs" --nmb "$nmb"
    done
  done
fi
if has prefill; then  # kernels' own times: the host queues each action before the GPU starts it
  GANTRY_PROFILE_OPS=prefill bench_steps=3 bench_warmup=1 \
    gantry prefill-single350 90 --layout single --variant "profiled, prefill" "${m350[@]}"
  GANTRY_PROFILE_OPS=prefill bench_steps=3 bench_warmup=1 \
    gantry prefill-single15 150 --layout single --variant "profiled, prefill" "${m15[@]}"
fi
if has gemm; then  # every tuned shape's candidates, and torch.matmul on the same shapes
  GANTRY_GEMM_TUNE_LOG=1 gantry gemm-single15 150 --layout single --variant "gemm tune log" \
    "${m15[@]}"
  GANTRY_GEMM_TUNE_LOG=1 GANTRY_GEMM_CANDIDATES=32 gantry gemm32-single15 150 --layout single \
    --variant "32 gemm candidates" "${m15[@]}"
  stamp "torch.matmul on the tuned shapes"
  timeout 120 python3 bench/gemm_shapes_torch.py "$logs/gemm32-single15.log" \
    2>>"$logs/bench.err" | tee "$out/gemm_shapes.jsonl" | cut -c1-400
fi
if has graphs; then  # the host's launch cost on the GPU's critical path
  GANTRY_CUDA_GRAPHS=0 gantry single350-nographs 90 --layout single --variant "no cuda graphs" \
    "${m350[@]}"
  two_gpus pp350-zb-h1-nographs && GANTRY_CUDA_GRAPHS=0 gantry pp350-zb-h1-nographs 90 --layout pp2 --schedule zb-h1 \
    --variant "no cuda graphs" "${m350[@]}"
fi
if has cudnnlib; then  # the same library against the newer cuDNN of the torch wheel (soname 9)
  wheel_cudnn=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
  if [ -n "$wheel_cudnn" ] && [ -d "$wheel_cudnn" ]; then
    LD_LIBRARY_PATH="$wheel_cudnn${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      gantry single15-wheel-cudnn 150 --layout single --variant "torch wheel's cuDNN" "${m15[@]}"
  else
    stamp "no nvidia.cudnn wheel found"
  fi
  GANTRY_ATTN_AUTOTUNE=0 gantry single15-attn-heuristic 150 --layout single \
    --variant "cuDNN heuristic's attention plan" "${m15[@]}"
fi
if has chunks && two_gpus chunks; then  # the simulator: 1.5B fill shorter with more chunks
  for v in 3 4; do
    gantry "pp15-zb-interleaved-v$v" 150 --layout pp2 --schedule zb-interleaved \
      --virtual-stages "$v" --variant "$v chunks per rank" "${m15[@]}"
  done
fi
if has optoverlap && two_gpus optoverlap; then  # rank 1's update mostly from the hook, not the fill
  for v in 2 4; do
    GANTRY_OPT_OVERLAP=3 gantry "pp15-zb-interleaved-v$v-opt3" 150 --layout pp2 \
      --schedule zb-interleaved --virtual-stages "$v" \
      --variant "$v chunks per rank, GANTRY_OPT_OVERLAP=3" "${m15[@]}"
  done
fi
if has ctas && two_gpus ctas; then  # SMs held by NCCL's p2p kernels: NCCL's own CTA count vs the cap
  GANTRY_P2P_MAX_CTAS=0 gantry pp350-1f1b-nccl-ctas 90 --layout pp2 --schedule 1f1b \
    --variant "nccl default ctas" "${m350[@]}"
  GANTRY_P2P_MAX_CTAS=1 gantry pp350-1f1b-1cta 90 --layout pp2 --schedule 1f1b \
    --variant "1 cta" "${m350[@]}"
fi
if has pp350 && two_gpus pp350; then
  for s in $pp_schedules; do gantry "pp350-$s" 90 --layout pp2 --schedule "$s" "${m350[@]}"; done
  for s in $anchor_schedules; do anchor "pp350-$s" --mode pp --schedule "$s" "${m350[@]}"; done
fi
if has single15; then
  gantry single15 150 --layout single "${m15[@]}"
  anchor single15 --mode single "${m15[@]}"
fi
if has pp15 && two_gpus pp15; then
  for s in $pp_schedules; do gantry "pp15-$s" 150 --layout pp2 --schedule "$s" "${m15[@]}"; done
  for s in $anchor_schedules; do anchor "pp15-$s" --mode pp --schedule "$s" "${m15[@]}"; done
fi
if has table; then
  tail -5 "$logs/bench.err" 2>/dev/null
  python3 bench/gpu_bench_table.py "$results" | tee "$out/table.md"
fi
if has parity; then
  stamp "tests/gpu/test_cuda_parity.py"
  timeout "${PARITY_TIMEOUT:-240}" python3 -m pytest -q -p no:cacheprovider tests/gpu/test_cuda_parity.py \
    ${GPU_TEST_ARGS:-} 2>&1 | tee "$out/parity.log" | tail -15
fi
