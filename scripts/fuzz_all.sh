#!/usr/bin/env bash
# Builds the libFuzzer targets (clang; ASan+UBSan; docs/reliability.md) and runs each for a fixed
# time over its corpus in tests/fuzz/corpus: the wire decoder, the knob grammars, --config files,
# the data-set lists (manifest, split files, classes.txt), PyTorch weight files and checkpoints.
# Usage: scripts/fuzz_all.sh [SECONDS_EACH] [BUILD_DIR]          (default: 20, build-fuzz)
# `make test` runs it with 15 s each; longer runs on demand, e.g. scripts/fuzz_all.sh 600.
set -uo pipefail
seconds=${1:-20}
dir=${2:-build-fuzz}
here=$(cd "$(dirname "$0")/.." && pwd)
[[ $seconds =~ ^[0-9]+$ && $seconds -ge 1 ]] ||
  { echo "fuzz_all.sh: SECONDS_EACH is a whole number >= 1, not '$seconds'" >&2; exit 2; }
mkdir -p "$dir"
cmake -S "$here" -B "$dir" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS=-O1 -DTESSERA_FUZZ=ON -DTESSERA_BUILD_BENCHMARKS=OFF \
  -DTESSERA_FUZZ_SECONDS="$seconds" > "$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; exit 1; }
cmake --build "$dir" -j"$(nproc)" --target fuzz_all -- --no-print-directory > "$dir/build.log" 2>&1 ||
  { tail -40 "$dir/build.log"; exit 1; }
cd "$dir" || exit 1
# Each target runs a fixed time on one core: as many at once as there are cores.
ctest -L fuzz -V -j"$(nproc)" > fuzz.log 2>&1
rc=$?
# Per target: its executions and what it added; a failure's whole output.
grep -E "Test +#|stat::number_of_executed_units|stat::new_units_added|fuzz: .* failed" fuzz.log |
  sed -E 's/^[0-9]+: //'
[[ $rc -eq 0 ]] || { grep -A60 -E "ERROR|deadly|terminate called" fuzz.log | head -80; }
exit $rc
