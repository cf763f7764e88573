#!/usr/bin/env bash
# The autotuner's gain on a communication-heavy run (issue 7's "How fast"): tune once with
# `tessera tune -- bench train ...`, then run `tessera bench train` with the defaults and with
# the tuned --config alternately, RUNS times each, and print the medians and their ratio.
#   scripts/bench_tune.sh [RANKS] [RUNS] [MODEL] [IMAGE] [BATCH]
set -euo pipefail
RANKS=${1:-4}
RUNS=${2:-5}
MODEL=${3:-resnet18}
IMAGE=${4:-64}
BATCH=${5:-4}
BIN=${TESSERA_BIN:-build/apps/tessera/tessera}
OUT=${OUT:-$(mktemp -d)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1 OMPI_MCA_mtl=^ofi
MPIRUN="mpirun --oversubscribe --bind-to none -np $RANKS"
BENCH=(bench train --model "$MODEL" --image-size "$IMAGE" --batch-size "$BATCH")
echo "== tuning: tessera tune -- ${BENCH[*]} (300 steps)"
$MPIRUN "$BIN" tune --log "$OUT/tune.jsonl" --output "$OUT/tuned.json" -- "${BENCH[@]}" \
  --warmup 0 --iters 30 --batches-per-iter 10 | grep -E "^autotune|^Total"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('steps to tune:', d['steps'], ' tuned knobs:', d['knobs'])" "$OUT/tuned.json"
for i in $(seq "$RUNS"); do
  for which in default tuned; do
    extra=()
    [ "$which" = tuned ] && extra=(--config "$OUT/tuned.json")
    $MPIRUN "$BIN" "${BENCH[@]}" "${extra[@]}" --warmup 10 --iters 5 --batches-per-iter 10 \
      --json "$OUT/$which.$i.json" > /dev/null
    python3 -c "import json,sys; print(sys.argv[2], sys.argv[3], 'total img/s %.1f' % json.load(open(sys.argv[1]))['total_mean'])" "$OUT/$which.$i.json" "$which" "$i"
  done
done
python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
def med(w):
    return statistics.median(json.load(open(f"{out}/{w}.{i}.json"))["total_mean"] for i in range(1, runs + 1))
d, t = med("default"), med("tuned")
print(f"median total img/s: default {d:.1f}  tuned {t:.1f}  tuned/default {t / d:.3f}x")
PY
