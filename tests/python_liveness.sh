#!/usr/bin/env bash
# Ctrl-C and a dead rank end every process of a tessera.torch job within the heartbeat time
# (TESSERA_HEARTBEAT_TIMEOUT=3 here), with a message naming the cause: never a hang. A dead
# rank is first a HorovodInternalError in the survivors' loops ("caught").
set -uo pipefail
DIR=$1
SRC=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$DIR"
PY=${TEST_PYTHON:-/usr/bin/python3}  # the interpreter the build is for
export TESSERA_HEARTBEAT_TIMEOUT=3 TESSERA_TIMEOUT=60
for scenario in interrupt kill caught; do
  start=$(date +%s%N)
  timeout 60 mpirun --oversubscribe --bind-to none -np 3 "$PY" \
    "$SRC/tests/python_liveness.py" "$scenario" > "$DIR/$scenario.log" 2>&1
  rc=$?
  elapsed_ms=$((($(date +%s%N) - start) / 1000000))
  echo "$scenario: rc $rc after ${elapsed_ms} ms"
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || grep -q "returned normally" "$DIR/$scenario.log"; then
    echo "FAIL: $scenario did not end every rank with an error"; cat "$DIR/$scenario.log"; exit 1
  fi
  # mpirun's start-up is part of the time; the ending itself must fit the heartbeat time.
  if [ "$elapsed_ms" -gt 20000 ]; then
    echo "FAIL: $scenario took ${elapsed_ms} ms"; cat "$DIR/$scenario.log"; exit 1
  fi
done
grep -q "KeyboardInterrupt" "$DIR/interrupt.log" || { cat "$DIR/interrupt.log"; exit 1; }
grep -q "rank 0" "$DIR/interrupt.log" || { cat "$DIR/interrupt.log"; exit 1; }
grep -q "rank 1" "$DIR/kill.log" || { cat "$DIR/kill.log"; exit 1; }
# The survivors' loops caught the loss as HorovodInternalError, within the heartbeat time.
for r in 0 2; do
  grep -q "rank $r caught HorovodInternalError" "$DIR/caught.log" ||
    { echo "FAIL: rank $r did not catch the loss"; cat "$DIR/caught.log"; exit 1; }
done
echo "liveness: both scenarios ended every rank"
