#!/usr/bin/env bash
# The simulator against measurement on this machine (issue 7): calibrate the `local` machine at 2
# ranks (`tessera bench allreduce --calibrate`), then measure `tessera bench allreduce --algo
# auto` and `tessera bench engine` at 2, 4 and 8 ranks (RUNS runs each, medians) and print the
# simulator's predictions beside them with their ratio.
#   scripts/validate_simulator.sh [RUNS]
set -euo pipefail
RUNS=${1:-3}
BIN=${TESSERA_BIN:-build/apps/tessera/tessera}
OUT=${OUT:-$(mktemp -d)}
SIZES=${SIZES:-64K,256K,1M,4M,16M,64M}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1 OMPI_MCA_mtl=^ofi
MPIRUN="mpirun --oversubscribe --bind-to none"
# PREDICT_ONLY=1 with OUT of an earlier run: compare again without measuring.
if [ -z "${PREDICT_ONLY:-}" ]; then
$MPIRUN -np 2 "$BIN" bench allreduce --calibrate --table "$OUT/local.json" -b 4K -e 64M \
  | grep "^# calibrated"
for np in 2 4 8; do
  for i in $(seq "$RUNS"); do
    $MPIRUN -np $np "$BIN" bench allreduce --algo auto -b 64K -e 64M -f 4 -n 10 -w 2 \
      --json "$OUT/ar_np${np}_$i.json" > /dev/null
    $MPIRUN -np $np "$BIN" bench engine -n 10 -w 2 --json "$OUT/engine_np${np}_$i.json" > /dev/null
  done
done
fi
"$BIN" simulate --preset local --cost-table "$OUT/local.json" --gpus 2,4,8 \
  --allreduce-sizes "$SIZES" --engine-bench --json "$OUT/predicted.json" > /dev/null
python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
pred = json.load(open(f"{out}/predicted.json"))
worst = 0
print(f"{'':>22} {'measured':>10} {'predicted':>10} {'pred/meas':>9}")
for row in pred["allreduce_us"]:
    size = int(row["bytes"])
    for np in ("2", "4", "8"):
        meas = statistics.median(
            r["time_us"] for i in range(1, runs + 1)
            for r in json.load(open(f"{out}/ar_np{np}_{i}.json"))["rows"]
            if r["algorithm"] == "auto" and r["size"] == size)
        ratio = row[np] / meas
        worst = max(worst, abs(ratio - 1))
        print(f"allreduce {size:>9} B np{np}  {meas:8.1f}us {row[np]:8.1f}us {ratio:9.2f}")
for e in pred["engine"]:
    np = e["gpus"]
    for key, label in (("cache_on", "step_ms"), ("cache_off", "step_ms_no_cache")):
        meas = statistics.median(json.load(open(f"{out}/engine_np{np}_{i}.json"))[key]["step_ms"]
                                 for i in range(1, runs + 1))
        ratio = e[label] / meas
        worst = max(worst, abs(ratio - 1))
        print(f"bench engine {key:<9} np{np}  {meas:8.2f}ms {e[label]:8.2f}ms {ratio:9.2f}")
print(f"largest deviation: {100 * worst:.0f}%")
PY
