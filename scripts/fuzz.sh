#!/usr/bin/env bash
# Runs one libFuzzer target for a fixed time over the corpus kept in the repo
# (tests/fuzz/corpus/NAME, read only) and a scratch corpus for what it finds, and prints
# libFuzzer's final counts (executions, coverage). A crash leaves its input in WORKDIR and fails.
# Usage: scripts/fuzz.sh FUZZ_BINARY CORPUS_DIR WORKDIR SECONDS
# Longer runs on demand: build with -DTESSERA_FUZZ=ON (clang) and pass more seconds; keep new
# inputs worth having by copying them from WORKDIR/new into the corpus.
set -uo pipefail
bin=$1 corpus=$2 work=$3 seconds=$4
mkdir -p "$work/new"
here=$(cd "$(dirname "$0")/.." && pwd)
export LSAN_OPTIONS=suppressions=$here/tests/fuzz/lsan.supp:print_suppressions=0
"$bin" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$work/" "$work/new" "$corpus" > "$work/log" 2>&1
rc=$?
grep -E "^stat::number_of_executed_units|^stat::new_units_added|cov: [0-9]+ ft" "$work/log" | tail -4
if [[ $rc -ne 0 ]]; then
  tail -40 "$work/log"
  echo "fuzz: $(basename "$bin") failed (exit $rc); the input is in $work/crash-* or $work/leak-*"
fi
exit $rc
