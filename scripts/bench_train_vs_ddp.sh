#!/usr/bin/env bash
# tessera bench train beside PyTorch DDP over gloo and the 2-rank ceiling, measured in one run.
#
#   scripts/bench_train_vs_ddp.sh MODEL BATCH IMAGE [WARMUP ITERS BATCHES_PER_ITER]
#
# Rows (each "Total img/sec" on 2 ranks, 1 thread per rank, same machine, same libtorch):
#   ceiling        two independent 1-rank tessera runs started together (no communication;
#                  they share the cores' memory bandwidth), sum of their rates
#   tessera        2 ranks under mpirun, tessera's memory policy (TESSERA_MALLOC_POLICY=keep)
#   ddp            bench/ddp_synthetic.py, DDP over gloo with its defaults
#   ddp+policy     the same with GLIBC_TUNABLES set to the policy's thresholds
#   and the same three without the policy (ceiling-system, tessera-system).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-resnet50}; BATCH=${2:-8}; IMAGE=${3:-224}
WARMUP=${4:-3}; ITERS=${5:-5}; PER_ITER=${6:-2}
TESSERA=${TESSERA:-build/apps/tessera/tessera}
PY=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader,tcp} OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
export OMPI_MCA_mtl=${OMPI_MCA_mtl:-^ofi} OMP_NUM_THREADS=1
POLICY_TUNABLES="glibc.malloc.mmap_threshold=1073741824:glibc.malloc.trim_threshold=4294967296"
ARGS=(--model "$MODEL" --batch-size "$BATCH" --image-size "$IMAGE" --warmup "$WARMUP"
      --iters "$ITERS" --batches-per-iter "$PER_ITER" --threads 1)
out=$(mktemp -d)
total() { grep -h "^Total img/sec" "$@" | sed 's/.*: \([0-9.]*\).*/\1/'; }

ceiling() {  # $1: policy
  TESSERA_MALLOC_POLICY=$1 mpirun -np 1 --bind-to none "$TESSERA" bench train "${ARGS[@]}" \
    > "$out/c1" 2>&1 &
  TESSERA_MALLOC_POLICY=$1 mpirun -np 1 --bind-to none "$TESSERA" bench train "${ARGS[@]}" \
    > "$out/c2" 2>&1
  wait
  awk -v a="$(total "$out/c1")" -v b="$(total "$out/c2")" 'BEGIN { print a + b }'
}
tessera2() {  # $1: policy
  TESSERA_MALLOC_POLICY=$1 mpirun -np 2 --bind-to none -x TESSERA_MALLOC_POLICY \
    "$TESSERA" bench train "${ARGS[@]}" > "$out/t" 2>&1 || { cat "$out/t"; exit 1; }
  total "$out/t"
}
ddp() {  # $1: GLIBC_TUNABLES or empty
  if [[ -n "$1" ]]; then
    GLIBC_TUNABLES=$1 $PY bench/ddp_synthetic.py "${ARGS[@]}" --nprocs 2 > "$out/d" 2>&1
  else
    $PY bench/ddp_synthetic.py "${ARGS[@]}" --nprocs 2 > "$out/d" 2>&1
  fi || { cat "$out/d"; exit 1; }
  total "$out/d"
}

c_keep=$(ceiling keep); t_keep=$(tessera2 keep)
d_def=$(ddp ""); d_pol=$(ddp "$POLICY_TUNABLES")
c_sys=$(ceiling system); t_sys=$(tessera2 system)
r() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
printf "%s batch %s %sx%s, 2 ranks x 1 thread (Total img/sec)\n" "$MODEL" "$BATCH" "$IMAGE" "$IMAGE"
printf "  %-24s %8.2f\n" "ceiling (policy keep)" "$c_keep" "tessera (policy keep)" "$t_keep" \
  "ddp (defaults)" "$d_def" "ddp (+GLIBC_TUNABLES)" "$d_pol" "ceiling (system malloc)" "$c_sys" \
  "tessera (system malloc)" "$t_sys"
printf "  tessera/ceiling %s   tessera/ddp %s   tessera/ddp+tunables %s   (system malloc: tessera/ceiling %s, tessera/ddp %s)\n" \
  "$(r "$t_keep" "$c_keep")" "$(r "$t_keep" "$d_def")" "$(r "$t_keep" "$d_pol")" \
  "$(r "$t_sys" "$c_sys")" "$(r "$t_sys" "$d_def")"
rm -rf "$out"
