#!/usr/bin/env bash
# Runs `tessera bench allreduce --algo all` RUNS times at NP ranks and prints the medians
# (scripts/bench_median.py). Usage: scripts/bench_allreduce.sh NP [RUNS] [extra bench args...]
set -euo pipefail
np=${1:-2}
runs=${2:-3}
shift $(( $# >= 2 ? 2 : $# ))
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader,tcp} OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
out=$(mktemp -d)
for i in $(seq 1 "$runs"); do
  mpirun --oversubscribe --bind-to none -np "$np" build/apps/tessera/tessera bench allreduce \
    --algo all -b 8 -e 128M -f 4 --json "$out/run$i.json" "$@" > "$out/run$i.txt"
done
/usr/bin/python3 scripts/bench_median.py "$out"/run*.json
