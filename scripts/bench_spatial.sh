#!/usr/bin/env bash
# Spatial decomposition's benchmarks (issue 6), each grid beside its reference in one run:
#
#   scripts/bench_spatial.sh [SPEED_SIZE MEMORY_SIZE BUDGET_GIB RUNS]
#
# speed    ResNet-50 training step on one SPEED_SIZE^2 image: a 1x2 grid (2 ranks, 1 thread
#          each) against one rank with 2 threads (the ordinary model), RUNS times alternately;
#          the median of the per-run ratios, and the share of the grid's step in halo exchange.
# memory   peak resident memory per rank for the same step on a MEMORY_SIZE^2 image: a 2x2
#          grid against one rank.
# budget   the largest image (a side that cuts into the grid) whose step keeps every rank under
#          BUDGET_GIB of resident memory, for 1 rank, 1x2 and 2x2: sides tried upwards until the
#          first one over the budget.
set -euo pipefail
cd "$(dirname "$0")/.."
SPEED=${1:-2048}; MEMORY=${2:-2048}; BUDGET=${3:-4}; RUNS=${4:-3}
TESSERA=${TESSERA:-build/apps/tessera/tessera}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader,tcp} OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
export OMPI_MCA_mtl=${OMPI_MCA_mtl:-^ofi} OMP_NUM_THREADS=1
out=$(mktemp -d)
bench() {  # NP GRID SIZE THREADS WARMUP ITERS -> JSON in $out/last.json
  mpirun --oversubscribe --bind-to none -np "$1" "$TESSERA" bench spatial --model resnet50 \
    --spatial "$2" --image-size "$3" --threads "$4" -w "$5" -n "$6" --json "$out/last.json" \
    > "$out/log" 2>&1 || { cat "$out/log"; return 1; }
  cat "$out/log"
}
field() { /usr/bin/python3 -c "import json,sys; print(json.load(open('$out/last.json'))['$1'])"; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

echo "== speed: ResNet-50 step on ${SPEED}x${SPEED}, 1x2 grid (2 ranks x 1 thread) vs 1 rank x 2 threads"
ratios=(); shares=(); refs=(); grids=()
for r in $(seq "$RUNS"); do
  bench 1 1x1 "$SPEED" 2 1 3 | sed 's/^/  ref  /'
  ref=$(field step_s); ref_rss=$(field peak_rss_gib)
  bench 2 1x2 "$SPEED" 1 1 3 | sed 's/^/  grid /'
  grid=$(field step_s)
  share=$(awk -v h="$(field halo_s)" -v s="$grid" 'BEGIN { printf "%.4f", h / s }')
  refs+=("$ref"); grids+=("$grid"); shares+=("$share")
  ratios+=("$(awk -v a="$grid" -v b="$ref" 'BEGIN { printf "%.4f", a / b }')")
  echo "  run $r: grid $grid s, reference $ref s, ratio ${ratios[-1]}, halo share $share"
done
echo "speed: median step 1x2 $(median "${grids[@]}") s vs one rank $(median "${refs[@]}") s;" \
  "median ratio $(median "${ratios[@]}") (target <= 1.15); halo exchange $(median "${shares[@]}") of the step"

echo "== memory: peak resident memory per rank, ResNet-50 step on ${MEMORY}x${MEMORY}, 2x2 vs 1 rank"
bench 1 1x1 "$MEMORY" 1 0 1 | sed 's/^/  ref  /'
one=$(field peak_rss_gib)
bench 4 2x2 "$MEMORY" 1 0 1 | sed 's/^/  grid /'
four=$(field peak_rss_gib)
echo "memory: 2x2 $four GiB per rank vs one rank $one GiB: ratio" \
  "$(awk -v a="$four" -v b="$one" 'BEGIN { printf "%.3f", a / b }') (target <= 0.35)"

echo "== budget: largest image whose step stays under $BUDGET GiB per rank"
for spec in "1 1x1 1024 64" "2 1x2 1408 64" "4 2x2 2048 128"; do
  read -r np grid side step <<<"$spec"
  best=none
  while :; do
    bench "$np" "$grid" "$side" 1 0 1 > /dev/null
    rss=$(field peak_rss_gib)
    echo "  $grid ($np rank(s)): ${side}x${side} peaks at $rss GiB per rank"
    if awk -v a="$rss" -v b="$BUDGET" 'BEGIN { exit !(a > b) }'; then break; fi
    best=$side; side=$((side + step))
  done
  echo "budget: $np rank(s) ($grid): largest ${best}x${best} under $BUDGET GiB (next side $side over)"
done
