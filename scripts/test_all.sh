#!/usr/bin/env bash
# `make test`'s phases, each timed, with a table of minutes at the end (also when a phase
# fails: every phase runs, and the exit status is the first failure's):
#   build   configure and build BUILD (nothing to do when `make build` just ran)
#   ctest   every test of the main build, independent single-process tests two at a time
#           (multi-rank tests declare PROCESSORS 2 and run alone on a 2-core machine)
#   asan    scripts/sanitize.sh address: ASan+UBSan build and its tests
#   tsan    scripts/sanitize.sh thread: TSan build, its tests and the control race
#   fuzz    scripts/fuzz_all.sh: every fuzz target for FUZZ_SECONDS
# Usage: scripts/test_all.sh [BUILD] [FUZZ_SECONDS] [JOBS]    (build, 15, nproc)
set -uo pipefail
build=${1:-build}
fuzz_seconds=${2:-15}
jobs=${3:-$(nproc)}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 1
names=() minutes=() results=()
status=0
phase() {  # phase NAME COMMAND...
  local name=$1 t0=$SECONDS rc
  shift
  echo "== make test: $name"
  "$@"
  rc=$?
  names+=("$name")
  minutes+=("$(awk -v s=$((SECONDS - t0)) 'BEGIN { printf "%.1f", s / 60 }')")
  results+=("$([[ $rc -eq 0 ]] && echo ok || echo "FAILED ($rc)")")
  [[ $rc -ne 0 && $status -eq 0 ]] && status=$rc
  return 0
}
configure_and_build() {
  mkdir -p "$build"
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release > "$build/configure.log" 2>&1 ||
    { cat "$build/configure.log"; return 1; }
  cmake --build "$build" -j"$jobs" -- --no-print-directory
}
t_all=$SECONDS
phase build configure_and_build
phase ctest bash -c "cd '$build' && ctest --output-on-failure --timeout 1800 -j$jobs"
phase asan bash scripts/sanitize.sh address "$build-san"
phase tsan bash scripts/sanitize.sh thread "$build-san"
phase fuzz bash scripts/fuzz_all.sh "$fuzz_seconds" "$build-fuzz"
echo
echo "== make test: minutes per phase (this machine: $(nproc) cores)"
for i in "${!names[@]}"; do
  printf '   %-6s %6s min  %s\n' "${names[$i]}" "${minutes[$i]}" "${results[$i]}"
done
printf '   %-6s %6s min\n' total "$(awk -v s=$((SECONDS - t_all)) 'BEGIN { printf "%.1f", s / 60 }')"
exit $status
