#!/usr/bin/env bash
# The sanitizer builds (docs/reliability.md): AddressSanitizer + UndefinedBehaviorSanitizer, and
# ThreadSanitizer, of everything that does not link libtorch (common, comm, engine, tune, the
# spatial planning), running the unit tests and the multi-rank tests of the collectives, the
# engine and the autotuner at 1, 2 and 4 ranks. libtorch (Debian's) is not built with
# sanitizers, so the parts that use it are left out rather than reported through.
#
# Usage: scripts/sanitize.sh [address|thread|all] [BUILD_ROOT]   (default: all, build-san)
# Suppressions cover Open MPI's own allocations and internals only: tests/sanitizers/*.supp.
set -uo pipefail
kind=${1:-all}
root=${2:-build-san}
here=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)
case $kind in address|thread|all) ;; *)
  echo "sanitize.sh: the first argument is address, thread or all, not '$kind'" >&2; exit 2 ;;
esac
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader,tcp} OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
export OMPI_MCA_mtl=${OMPI_MCA_mtl:-^ofi}
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=0
export LSAN_OPTIONS=suppressions=$here/tests/sanitizers/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# mpi_allreduce checks its largest count (2^20 elements, default segments) for f32 sum only, not
# every dtype and op: the same code, and most of the sanitizer time. The main build checks all.
export TESSERA_TEST_LARGEST_ONCE=1
export TSAN_OPTIONS=suppressions=$here/tests/sanitizers/tsan.supp:halt_on_error=1:second_deadlock_stack=1:report_signal_unsafe=0
status=0
run() {  # run NAME SANITIZERS
  local dir=$root/$1
  echo "== sanitize: $1 (-fsanitize=$2) in $dir"
  cmake -S "$here" -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1 \
    -DTESSERA_WITH_TORCH=OFF -DTESSERA_SANITIZE="$2" -DTESSERA_TEST_RANKS="1;2;4" \
    > "$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; status=1; return; }
  cmake --build "$dir" -j"$jobs" -- --no-print-directory > "$dir.build.log" 2>&1 ||
    { tail -40 "$dir.build.log"; status=1; return; }
  (cd "$dir" && ctest --output-on-failure --timeout 900) || status=1
}
# Under TSan, Open MPI's shared-memory transport fails its single-copy reads of another rank's
# memory (process_vm_readv: "Read -1, expected 4194316, errno = 14", then a collective times
# out; the ASan build does not see this). The TSan run copies through the shared segment
# instead; the ASan run keeps the default.
run_tsan() {
  OMPI_MCA_btl_vader_single_copy_mechanism=none run "$@"
}
mkdir -p "$root"
[[ $kind == address || $kind == all ]] && run asan address,undefined
[[ $kind == thread || $kind == all ]] && run_tsan tsan thread
exit $status
