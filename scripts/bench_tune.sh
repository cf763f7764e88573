#!/usr/bin/env bash
# The autotuner's gain on a communication-heavy run (issue 7's "How fast"): tune once with
# `tessera tune -- bench train ...`, then run `tessera bench train` with the defaults and with
# the tuned --config alternately, RUNS times each, and print the medians and their ratio. The
# reference for what any setting could gain: RANKS independent one-rank runs started together
# (the same cores and memory, no communication at all), the ceiling of the RANKS-rank run.
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
RUN=(--warmup 10 --iters 5 --batches-per-iter 10)
for i in $(seq "$RUNS"); do
  for which in default tuned; do
    extra=()
    [ "$which" = tuned ] && extra=(--config "$OUT/tuned.json")
    $MPIRUN "$BIN" "${BENCH[@]}" "${extra[@]}" "${RUN[@]}" --json "$OUT/$which.$i.json" > /dev/null
    python3 -c "import json,sys; print(sys.argv[2], sys.argv[3], 'total img/s %.1f' % json.load(open(sys.argv[1]))['total_mean'])" "$OUT/$which.$i.json" "$which" "$i"
  done
  for r in $(seq "$RANKS"); do
    mpirun --bind-to none -np 1 "$BIN" "${BENCH[@]}" "${RUN[@]}" --json "$OUT/ceiling.$i.$r.json" > /dev/null &
  done
  wait
  python3 -c "import json,sys; print('ceiling', sys.argv[1], 'total img/s %.1f' % sum(json.load(open(f)) ['total_mean'] for f in sys.argv[2:]))" "$i" "$OUT"/ceiling.$i.*.json
done
python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
def med(w):
    return statistics.median(json.load(open(f"{out}/{w}.{i}.json"))["total_mean"] for i in range(1, runs + 1))
import glob
d, t = med("default"), med("tuned")
c = statistics.median(sum(json.load(open(f))["total_mean"] for f in glob.glob(f"{out}/ceiling.{i}.*.json"))
                      for i in range(1, runs + 1))
print(f"median total img/s: default {d:.1f}  tuned {t:.1f}  tuned/default {t / d:.3f}x")
print(f"ceiling (no communication) {c:.1f}: default/ceiling {d / c:.3f}, tuned/ceiling {t / c:.3f}; "
      f"the most any setting could gain: {c / d:.3f}x")
PY
