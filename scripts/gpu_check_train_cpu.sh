#!/usr/bin/env bash
# The training part of the GPU check (scripts/gpu_check_train.sh) on this machine's CPU against
# an existing build tree, with small benchmarks: a check of the script itself where no GPU is.
# Its figures say nothing about a GPU (f16 skips, device memory reads 0, NCCL cannot run).
# The same output contract as the GPU check (scripts/gpu_check_lib.sh): OUT gets summary.txt,
# logs.tar.gz and the failing rows' logs; the logs themselves stay in OUT.logs.
#
#   bash scripts/gpu_check_train_cpu.sh [BUILD (default build)] [OUT (default /tmp/gpu-check-cpu)]
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
OUT_DIR=${2:-/tmp/gpu-check-cpu}
LOG=$OUT_DIR.logs
BUDGET=3000
DEV=cpu
MPIRUN="mpirun --oversubscribe --bind-to none"
PY=${GPU_CHECK_PYTHON:-/usr/bin/python3}
# shellcheck source=scripts/gpu_check_lib.sh
source "$SRC/scripts/gpu_check_lib.sh"
gpu_check_start
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader,tcp
export OMPI_MCA_pml=ob1 OMPI_MCA_mtl=^ofi TESSERA_TIMEOUT=60 OMP_NUM_THREADS=1
export GPU_CHECK_SPATIAL_SIZE=256
export GPU_CHECK_BENCHES="resnet50 4 64;deeplabv3plus_resnet50 2 64"
export GPU_CHECK_BENCH_ITERS="--warmup 1 --iters 2 --batches-per-iter 1"
# The simulator step reads bench allreduce's ceilings; stand-in values here.
printf '# ceilings while every rank copies: device copy 10.00 GB/s, pinned host->device 5.00 GB/s, device->host 5.00 GB/s\n' \
  > "$LOG/bench_allreduce_np1.txt"
source "$SRC/scripts/gpu_check_train.sh"
