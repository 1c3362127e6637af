#!/usr/bin/env bash
# run_multi_gpu_bench.sh — issue 11 in one device call on a 4- or 8-GPU machine: the NCCL
# bandwidth of the machine (bench/anchors/nccl_anchor.py: all-reduce bus bandwidth and one-way
# p2p), then gantry's trainer (bench/bench_gantry_gpu.py) and PyTorch's pipelining extended with
# DDP (bench/anchors/torch_pp_baseline.py --mode pp --dp M) side by side on every layout the
# machine holds — 4 GPUs: pp4, pp2xdp2; 8 GPUs: those and pp8, pp4xdp2, pp2xdp4 — every
# schedule, for the 1.5B config and a ~7B one (32 layers, d 4096, 32 heads, seq 2048); then the
# table (bench/gpu_bench_table.py, `vs PyTorch` per layout).
#   bench/run_multi_gpu_bench.sh STEP...   steps: build nccl layouts table (default: all)
# Environment:
#   MODELS            "1.5B 7B" (default) or a subset; "tiny" is the CPU check's model
#   LAYOUTS           the layouts to run (default: by the GPU count, as above)
#   PP_SCHEDULES      gantry's schedules (default: 1f1b gpipe interleaved zb-h1 zb-h2 zb-interleaved)
#   ANCHOR_SCHEDULES  the anchor's (default: f1b gpipe interleaved)
#   GPU_BENCH_STEPS / GPU_BENCH_WARMUP, GPU_BENCH_WORK (logs, build cache), OUT (results)
#   MULTI_BENCH_CPU=1 the same flow on CPU with GANTRY_NATIVE_LIB (a CPU build), the anchor on
#                     gloo, no nccl step: how tests/integration/test_multi_gpu_bench.py checks
#                     this script without GPUs (NGPU sets the rank count there)
# Every run has a time limit, so one hang cannot eat the call.
set -uo pipefail
source bench/gpu_bench_common.sh
gpu_bench_dirs "$PWD/multi-gpu-bench-out" /tmp/gantry-multi-gpu-bench
steps="${*:-build nccl layouts table}"
cpu="${MULTI_BENCH_CPU:-0}"
bench_steps="${GPU_BENCH_STEPS:-8}"
bench_warmup="${GPU_BENCH_WARMUP:-2}"
pp_schedules="${PP_SCHEDULES:-1f1b gpipe interleaved zb-h1 zb-h2 zb-interleaved}"
anchor_schedules="${ANCHOR_SCHEDULES:-f1b gpipe interleaved}"

if [ "$cpu" = 1 ]; then
  ngpu="${NGPU:-4}"
  anchor_device=(--device cpu)
else
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  anchor_device=()
fi
if [ -n "${LAYOUTS:-}" ]; then
  layouts="$LAYOUTS"
elif [ "$ngpu" -ge 8 ]; then
  layouts="pp4 pp2xdp2 pp8 pp4xdp2 pp2xdp4"
elif [ "$ngpu" -ge 4 ]; then
  layouts="pp4 pp2xdp2"
else
  stamp "this machine has $ngpu GPU(s); issue 11's layouts need 4 or 8"; exit 2
fi

model_args() { # model name -> bench arguments (the same for gantry and the anchor)
  case "$1" in
    1.5B) echo "--layers 48 --dmodel 1600 --heads 25 --seq 1024 --mbs 4 --nmb 8" ;;
    7B) echo "--layers 32 --dmodel 4096 --heads 32 --seq 2048 --mbs 1 --nmb 16" ;;
    tiny) echo "--layers 8 --dmodel 32 --heads 2 --seq 16 --vocab 64 --mbs 2 --nmb 4" ;;
    *) echo "unknown model $1" >&2; return 1 ;;
  esac
}

lib="${GANTRY_NATIVE_LIB:-}"
if has build && [ "$cpu" != 1 ]; then
  GPU_BENCH_WORK="$work" OUT="$out" bash bench/run_gpu_bench.sh build || exit $?
fi
[ "$cpu" != 1 ] && [ -f "$work/lib.path" ] && lib=$(cat "$work/lib.path")
if has layouts && [ -z "$lib" ]; then echo "no library: run the build step or set GANTRY_NATIVE_LIB" >&2; exit 2; fi

if has nccl && [ "$cpu" != 1 ]; then
  stamp "NCCL bandwidth, $ngpu GPUs"
  timeout 180 torchrun --standalone --nproc_per_node "$ngpu" bench/anchors/nccl_anchor.py \
    2>>"$logs/bench.err" | tee "$out/nccl_bandwidth.json"
fi

gantry() { # label, limit, bench args...
  local label="$1" limit="$2"; shift 2
  stamp "gantry $label"
  timeout $((limit + 30)) python3 bench/bench_gantry_gpu.py --lib "$lib" --work "$work/$label" \
    --steps "$bench_steps" --warmup "$bench_warmup" --timeout "$limit" "$@" \
    2>>"$logs/bench.err" | tee -a "$results" | cut -c1-400
  cp "$work/$label/train.log" "$logs/$label.log" 2>/dev/null
}
anchor() { # label, ranks, anchor args...
  local label="$1" n="$2"; shift 2
  stamp "torch $label"
  timeout 300 python3 bench/gpu_clocks.py -- torchrun --standalone --nproc_per_node "$n" \
    bench/anchors/torch_pp_baseline.py --steps "$bench_steps" --warmup "$bench_warmup" \
    "${anchor_device[@]}" "$@" 2>>"$logs/bench.err" | tee -a "$results" | cut -c1-400
}
if has layouts; then
  for model in ${MODELS:-1.5B 7B}; do
    read -r -a margs <<< "$(model_args "$model")" || exit 2
    for layout in $layouts; do
      pp=1 dp=1
      [[ "$layout" =~ ^pp([0-9]+) ]] && pp=${BASH_REMATCH[1]}
      [[ "$layout" =~ dp([0-9]+)$ ]] && dp=${BASH_REMATCH[1]}
      n=$((pp * dp))
      if [ "$pp" -gt 1 ]; then
        for s in $pp_schedules; do
          gantry "$model-$layout-$s" 240 --layout "$layout" --schedule "$s" "${margs[@]}"
        done
        for s in $anchor_schedules; do
          anchor "$model-$layout-$s" "$n" --mode pp --dp "$dp" --schedule "$s" "${margs[@]}"
        done
      else
        gantry "$model-$layout" 240 --layout "$layout" "${margs[@]}"
        anchor "$model-$layout" "$n" --mode dp "${margs[@]}"
      fi
    done
  done
fi
if has table; then
  python3 bench/gpu_bench_table.py "$results" | tee "$out/table.md"
fi
