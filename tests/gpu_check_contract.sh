#!/usr/bin/env bash
# The GPU check's output contract (issue 33), on the fake device against a built tree: the
# device tool brings back at most 8 files from $OUT, and a run killed at its limit must still
# leave its table. Four runs of scripts/gpu_check.sh (GPU_CHECK_REUSE_BUILD=1: no configure, no
# build):
#   1. a whole run: exit 0, no FAIL row, summary.txt with its total row and logs.tar.gz only;
#   2. killed by SIGTERM halfway (after its first test row): it ends within 20 s, leaves no
#      process behind, and OUT holds the rows so far, a "killed" total row and the archive;
#   3. every row failing (a tree without binaries, 4 rank counts: 19 failing rows): exactly 8
#      files, 6 of them the first failing rows' logs, the total row saying "6 of 19";
#   4. a 6 s budget: every step capped by the time left, the run over within 15 s.
# Usage: gpu_check_contract.sh BUILD WORKDIR PYTHON
set -uo pipefail
BUILD=$1 WORK=$2 PY=$3
SRC=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$WORK" && mkdir -p "$WORK"
export GPU_CHECK_DEVICE=fake GPU_CHECK_PYTHON=$PY GPU_CHECK_REUSE_BUILD=1 GPU_CHECK_BENCH_MAX=1M
export GPU_CHECK_TRAINING=off GPU_CHECK_NPS="1 2"
fail=0
check() {  # description, condition...
  local what=$1; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fail=1; fi
}
files_in() { find "$1" -type f | wc -l; }
archive_ok() {  # OUT: a readable archive under 16 MiB
  [ -f "$1/logs.tar.gz" ] && [ "$(stat -c %s "$1/logs.tar.gz")" -lt 16777216 ] &&
    tar -tzf "$1/logs.tar.gz" > /dev/null
}
run_check() {  # name, extra environment...
  local name=$1; shift
  env GPU_CHECK_LOGS="$WORK/$name.logs" "$@" bash "$SRC/scripts/gpu_check.sh" "$WORK/$name" \
    > "$WORK/$name.stdout" 2>&1
}

# 1. A whole run (one rank: the tests themselves run in the main suite; here the output counts).
run_check whole GPU_CHECK_BUILD="$BUILD" GPU_CHECK_NPS=1 GPU_CHECK_PYTHON_NPS=1
check "whole run exits 0" [ $? = 0 ]
check "whole run: no FAIL row" bash -c "! grep -q ' FAIL ' '$WORK/whole/summary.txt'"
check "whole run: total row" grep -q "^total " "$WORK/whole/summary.txt"
check "whole run: 2 files (summary, archive)" [ "$(files_in "$WORK/whole")" = 2 ]
check "whole run: archive holds the device collectives' log" \
  bash -c "tar -tzf '$WORK/whole/logs.tar.gz' | grep -q dc_np1.log"

# 2. Killed halfway.
setsid env GPU_CHECK_LOGS="$WORK/killed.logs" GPU_CHECK_BUILD="$BUILD" \
  bash "$SRC/scripts/gpu_check.sh" "$WORK/killed" > "$WORK/killed.stdout" 2>&1 &
pid=$!
for _ in $(seq 600); do
  grep -q "^device collectives, 1 ranks" "$WORK/killed/summary.txt" 2> /dev/null && break
  sleep 0.1
done
kill -TERM "$pid"
for _ in $(seq 200); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
check "killed run ended within 20 s of SIGTERM" bash -c "! kill -0 $pid 2> /dev/null"
for _ in $(seq 50); do ps -o pid= -s "$pid" | grep -q . || break; sleep 0.1; done
check "killed run left no process in its session (5 s after its end)" \
  bash -c "! ps -o pid= -s $pid | grep -q ."
ps -o pid,etimes,args -s "$pid" | sed 's/^/     left: /' | tail -n +2
check "killed run: its total row says so" grep -q "^total .*killed.*ended by SIGTERM" "$WORK/killed/summary.txt"
check "killed run: the rows before the kill" grep -q "^unit (GpuDevice) *pass" "$WORK/killed/summary.txt"
check "killed run: archive" archive_ok "$WORK/killed"
check "killed run: at most 8 files" [ "$(files_in "$WORK/killed")" -le 8 ]
ps -o pid= -s "$pid" | xargs -r kill -9 2> /dev/null

# 3. Every row failing: a tree without binaries.
mkdir -p "$WORK/empty_tree"
run_check failing GPU_CHECK_BUILD="$WORK/empty_tree" GPU_CHECK_NPS="1 2 3 4"
check "failing run: exactly 8 files" [ "$(files_in "$WORK/failing")" = 8 ]
check "failing run: 6 failing logs copied" [ "$(find "$WORK/failing" -name 'failed_*' | wc -l)" = 6 ]
check "failing run: total row counts them" grep -q "^total .* 6 of 19 failing logs" "$WORK/failing/summary.txt"
check "failing run: the first failing row's log" [ -f "$WORK/failing/failed_unit.log" ]
check "failing run: archive" archive_ok "$WORK/failing"

# 4. A 6 s budget caps every step.
start=$(date +%s)
run_check budget GPU_CHECK_BUILD="$BUILD" GPU_CHECK_BUDGET=6
took=$(( $(date +%s) - start ))
check "budget run over in ${took} s (<= 15)" [ "$took" -le 15 ]
check "budget run: steps cut or skipped by the budget" \
  grep -q "timed out\|no time left in the 6 s budget" "$WORK/budget/summary.txt"
check "budget run: total row" grep -q "^total " "$WORK/budget/summary.txt"
for f in whole killed failing budget; do echo "== $f"; cat "$WORK/$f/summary.txt"; done
exit $fail
