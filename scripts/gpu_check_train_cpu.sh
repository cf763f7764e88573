#!/usr/bin/env bash
# The training part of the GPU check (scripts/gpu_check_train.sh) on this machine's CPU against
# an existing build tree, with small benchmarks: a check of the script itself where no GPU is.
# Its figures say nothing about a GPU (f16 skips, device memory reads 0, NCCL cannot run).
#
#   bash scripts/gpu_check_train_cpu.sh [BUILD (default build)] [OUT (default /tmp/gpu-check-cpu)]
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
LOG=${2:-/tmp/gpu-check-cpu}
rm -rf "$LOG" && mkdir -p "$LOG"
SUMMARY=$LOG/summary.txt
: > "$SUMMARY"
T0=$(date +%s)
row() { printf '%-44s %-8s %s\n' "$1" "$2" "$3" | tee -a "$SUMMARY"; }
test_row() {  # name, log, command... (as gpu_check.sh's)
  local name=$1 log=$2; shift 2
  if timeout 240 "$@" > "$log" 2>&1; then
    row "$name" "pass" "$(grep -c '\[       OK \]' "$log") ok, $(grep -c SKIPPED "$log") skip lines"
  else
    row "$name" "FAIL" "$log"
  fi
}
MPIRUN="mpirun --oversubscribe --bind-to none"
PY=${GPU_CHECK_PYTHON:-/usr/bin/python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader,tcp
export OMPI_MCA_pml=ob1 OMPI_MCA_mtl=^ofi TESSERA_TIMEOUT=60 OMP_NUM_THREADS=1
export GPU_CHECK_TRAIN_DEVICE=cpu GPU_CHECK_BUDGET=3000 GPU_CHECK_SPATIAL_SIZE=256
export GPU_CHECK_BENCHES="resnet50 4 64;deeplabv3plus_resnet50 2 64"
export GPU_CHECK_BENCH_ITERS="--warmup 1 --iters 2 --batches-per-iter 1"
# The simulator step reads bench allreduce's ceilings; stand-in values here.
printf '# ceilings while every rank copies: device copy 10.00 GB/s, pinned host->device 5.00 GB/s, device->host 5.00 GB/s\n' \
  > "$LOG/bench_allreduce_np1.txt"
source "$SRC/scripts/gpu_check_train.sh"
echo "== summary ($SUMMARY)"
cat "$SUMMARY"
