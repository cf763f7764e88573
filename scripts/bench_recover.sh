#!/usr/bin/env bash
# Time to recover of an elastic job (docs/benchmarks.md): 2 namespace hosts x 2 ranks of
# tests/elastic_train.py under `tessera run --min-np 2 --max-np 4`, rank 3 (host h1) killed
# (SIGKILL) after commit 4. Per trial it prints:
#   recover  from the kill to the first step after the restart (on h0's 2 ranks)
#   start    the same job's first start: from launching `tessera run` to its first step (the
#            process start, imports, MPI and the model: the "load time" a restart pays again)
# and at the end the medians and recover - start, the time recovery adds to a fresh start.
# Usage: scripts/bench_recover.sh TESSERA_BINARY [TRIALS] [OUT_DIR]      (root: namespaces)
set -uo pipefail
tessera=$(realpath "$1") trials=${2:-5} out=${3:-/tmp/tessera-bench-recover}
here=$(cd "$(dirname "$0")/.." && pwd)
PY=${TEST_PYTHON:-/usr/bin/python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export TESSERA_FUSION_THRESHOLD=0 TESSERA_HEARTBEAT_TIMEOUT=5 TESSERA_TIMEOUT=120
rm -rf "$out" && mkdir -p "$out"
printf '#!/bin/sh\nprintf "h0:2\\nh1:2\\n"\n' > "$out/hosts.sh" && chmod +x "$out/hosts.sh"
recovers=() starts=()
for ((t = 1; t <= trials; ++t)); do
  log=$out/trial$t.log
  launched=$(date +%s.%N)
  timeout 300 "$here/scripts/netns_hosts.sh" --hosts 2 --command -- "$tessera" run --min-np 2 \
    --max-np 4 --host-discovery-script "$out/hosts.sh" --elastic-dir "$out/elastic$t" \
    "$PY" "$here/tests/elastic_train.py" "$out/model$t.pt" --kill-rank 3 --kill-at-commit 4 \
    > "$log" 2>&1
  rc=$?
  [[ $rc -eq 77 ]] && { cat "$log"; exit 77; }
  [[ $rc -eq 0 ]] || { echo "trial $t failed (exit $rc):"; tail -20 "$log"; exit 1; }
  first=$(grep -o "step-time [0-9.]*" "$log" | head -1 | grep -o "[0-9.]*$")
  killed=$(grep -o "kills itself at [0-9.]*" "$log" | grep -o "[0-9.]*$")
  after=$(grep "ranks 2$" "$log" | head -1 | grep -o "step-time [0-9.]*" | grep -o "[0-9.]*$")
  recovers+=("$("$PY" -c "print(f'{$after - $killed:.2f}')")")
  starts+=("$("$PY" -c "print(f'{$first - $launched:.2f}')")")
  echo "trial $t: recover ${recovers[-1]} s, start ${starts[-1]} s"
done
"$PY" - "${recovers[*]}" "${starts[*]}" << 'EOF'
import statistics, sys
r = [float(x) for x in sys.argv[1].split()]
s = [float(x) for x in sys.argv[2].split()]
mr, ms = statistics.median(r), statistics.median(s)
print(f"median of {len(r)}: recover {mr:.2f} s (min {min(r):.2f}, max {max(r):.2f}), "
      f"start {ms:.2f} s; recover - start {mr - ms:.2f} s, recover / start {mr / ms:.2f}")
EOF
