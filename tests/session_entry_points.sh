#!/usr/bin/env bash
# Every entry point opens the one runtime::Session (src/runtime/session.h), so the same
# settings reach the liveness monitor and a mistyped name is named in each: `tessera-bench`,
# `tessera` without libtorch (bench allreduce) and with it (make-dataset, through
# tessera::init), the Python package, and the multi-rank test main. Before the session,
# tessera-bench kept comm's settings only: its monitor always ran with 10 s, typos unseen.
# Usage: session_entry_points.sh BUILD_DIR WORKDIR
set -uo pipefail
build=$1
work=$2
mkdir -p "$work"
export TESSERA_HEARTBEAT_TIMEOUT=7 TESSERA_LOG_LEVEL=info TESSERA_HEARTBEAT_TIMEOUTT=1
run() { mpirun --oversubscribe --bind-to none -np 2 "$@" 2>&1; }
fail=0
check() {  # check NAME OUTPUT RC
  local want_live="liveness: a rank silent for 7 s is taken for dead"
  local want_typo="TESSERA_HEARTBEAT_TIMEOUTT (did you mean TESSERA_HEARTBEAT_TIMEOUT?)"
  if [[ $3 -ne 0 ]] || [[ $(grep -c -- "$want_live" <<<"$2") -ne 2 ]] ||
     ! grep -q -- "$want_typo" <<<"$2"; then
    echo "FAIL $1: exit $3; want rc 0, '$want_live' from both ranks and '$want_typo':"
    echo "$2" | tail -20
    fail=1
  else
    echo "ok   $1"
  fi
}
out=$(run "$build/apps/tessera/tessera-bench" allreduce -b 64 -e 64 -n 1 -w 0); check tessera-bench "$out" $?
if [[ -x $build/apps/tessera/tessera ]]; then
  out=$(run "$build/apps/tessera/tessera" bench allreduce -b 64 -e 64 -n 1 -w 0)
  check "tessera bench allreduce" "$out" $?
  out=$(run "$build/apps/tessera/tessera" make-dataset shapes --out "$work/shapes" --size 4 \
        --image-size 16)
  check "tessera make-dataset (tessera::init)" "$out" $?
fi
if [[ -n ${TEST_PYTHON:-} && -d $build/python/tessera ]]; then
  out=$(PYTHONPATH=$build/python run "$TEST_PYTHON" -c \
        "import tessera.torch as hvd; hvd.init(); hvd.shutdown()")
  check "python hvd.init" "$out" $?
fi
out=$(run "$build/tests/mpi_collectives" --gtest_filter=-*); check "mpi test main" "$out" $?
exit $fail
