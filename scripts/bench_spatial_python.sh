#!/usr/bin/env bash
# tessera.torch.spatial's benchmarks (issue 35), each beside its reference in the same run:
#
#   scripts/bench_spatial_python.sh [SPEED_SIZE MEMORY_SIZE RUNS]
#
# speed    torchvision's ResNet-50 partitioned over a 2x2 grid (4 ranks, 1 thread each) against
#          the C++ spatial ResNet-50 of `tessera bench spatial --spatial 2x2` (the step of
#          `tessera train --spatial`), same image, RUNS pairs alternately: median of the ratios.
# memory   peak CPU memory torch's allocator holds during a training step on a MEMORY_SIZE^2
#          image: the partitioned model at 2x2 (largest rank) against the ordinary model on the
#          whole image in one process (and peak resident memory beside it).
set -euo pipefail
cd "$(dirname "$0")/.."
SPEED=${1:-1024}; MEMORY=${2:-2048}; RUNS=${3:-3}
TESSERA=${TESSERA:-build/apps/tessera/tessera}
PY=${TEST_PYTHON:-/usr/bin/python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader,tcp} OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
export OMPI_MCA_mtl=${OMPI_MCA_mtl:-^ofi} OMP_NUM_THREADS=1
export PYTHONPATH=${PYTHONPATH:-build/python}
out=$(mktemp -d)
py() {  # NP GRID SIZE ITERS -> the JSON line in $out/py.json
  mpirun --oversubscribe --bind-to none -np "$1" "$PY" scripts/bench_spatial_python.py \
    --grid "$2" --image-size "$3" --warmup 1 --iters "$4" > "$out/py.log" 2>&1 || {
    cat "$out/py.log"; return 1; }
  tail -1 "$out/py.log" > "$out/py.json"; cat "$out/py.json"
}
cpp() {  # SIZE ITERS -> $out/cpp.json
  mpirun --oversubscribe --bind-to none -np 4 "$TESSERA" bench spatial --model resnet50 \
    --spatial 2x2 --image-size "$1" --threads 1 -w 1 -n "$2" --json "$out/cpp.json" \
    > "$out/cpp.log" 2>&1 || { cat "$out/cpp.log"; return 1; }
  head -1 "$out/cpp.log"
}
field() { "$PY" -c "import json,sys; print(json.load(open('$1'))['$2'])"; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

echo "== speed: ResNet-50 step on ${SPEED}x${SPEED}, 2x2 grid: partition(torchvision) vs C++ spatial"
ratios=(); pys=(); cpps=()
for r in $(seq "$RUNS"); do
  cpp "$SPEED" 3 | sed 's/^/  c++    /'
  c=$(field "$out/cpp.json" step_s)
  py 4 2x2 "$SPEED" 3 | sed 's/^/  python /'
  p=$(field "$out/py.json" step_s)
  pys+=("$p"); cpps+=("$c")
  ratios+=("$(awk -v a="$p" -v b="$c" 'BEGIN { printf "%.4f", a / b }')")
  echo "  run $r: python $p s, c++ $c s, ratio ${ratios[-1]}"
done
echo "speed: median step python $(median "${pys[@]}") s vs c++ $(median "${cpps[@]}") s;" \
  "median ratio $(median "${ratios[@]}") (target <= 1.10)"

echo "== memory: ResNet-50 step on ${MEMORY}x${MEMORY}, 2x2 (largest rank) vs the whole image"
py 1 1x1 "$MEMORY" 1 | sed 's/^/  whole /'
whole=$(field "$out/py.json" peak_allocator_gib); whole_rss=$(field "$out/py.json" peak_rss_gib)
py 4 2x2 "$MEMORY" 1 | sed 's/^/  2x2   /'
grid=$(field "$out/py.json" peak_allocator_gib); grid_rss=$(field "$out/py.json" peak_rss_gib)
echo "memory: allocator peak 2x2 $grid GiB vs whole $whole GiB: ratio" \
  "$(awk -v a="$grid" -v b="$whole" 'BEGIN { printf "%.3f", a / b }') (target <= 0.30);" \
  "resident: $grid_rss vs $whole_rss GiB, ratio" \
  "$(awk -v a="$grid_rss" -v b="$whole_rss" 'BEGIN { printf "%.3f", a / b }')"
rm -rf "$out"
