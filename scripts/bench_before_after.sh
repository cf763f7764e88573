#!/usr/bin/env bash
# One sitting, two builds: runs `tessera bench ...` with BEFORE's and AFTER's binary alternately,
# RUNS times each, keeping each run's --json under OUT/{before,after}/runN.json, so that a change
# is compared with the code before it on the same machine at the same time (docs/benchmarks.md).
# Usage: scripts/bench_before_after.sh BEFORE_BIN AFTER_BIN RUNS NP OUT -- <bench arguments>
set -euo pipefail
before=$1 after=$2 runs=$3 np=$4 out=$5
shift 5
[ "${1:-}" = "--" ] && shift
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader,tcp} OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
export OMPI_MCA_mtl=${OMPI_MCA_mtl:-^ofi}
mkdir -p "$out/before" "$out/after"
for i in $(seq 1 "$runs"); do
  for side in before after; do
    bin=$before
    [ "$side" = after ] && bin=$after
    mpirun --oversubscribe --bind-to none -np "$np" "$bin" bench "$@" \
      --json "$out/$side/run$i.json" > "$out/$side/run$i.txt" 2>&1
  done
done
echo "runs in $out/before and $out/after"
