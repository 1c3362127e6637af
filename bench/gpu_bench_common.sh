# gpu_bench_common.sh — sourced by bench/run_gpu_bench.sh and bench/run_multi_gpu_bench.sh: the
# environment every GPU benchmark run needs (NVLink multicast off, the checkout on PYTHONPATH,
# mpirun as root), the output and work directories, and the step/log helpers.
#   gpu_bench_dirs DEFAULT_OUT DEFAULT_WORK   sets out (= $OUT), work (= $GPU_BENCH_WORK), logs
#                                             and results, and creates them
#   has STEP                                  true when STEP is in $steps
#   stamp TEXT...                             prints TEXT with the time of day
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

gpu_bench_dirs() {
  out="${OUT:-$1}"
  work="${GPU_BENCH_WORK:-$2}"
  logs="$work/logs"
  results="$out/results.jsonl"
  mkdir -p "$out" "$logs"
}
has() { [[ " $steps " == *" $1 "* ]]; }
stamp() { echo "[$(date +%T)] $*"; }
