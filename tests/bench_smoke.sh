#!/usr/bin/env bash
# `tessera bench` end to end at 2 ranks: every collective gives #wrong 0 beside MPI, the
# calibration writes a cost table that auto then reads, and bad input is refused with a message
# that says what is accepted. Usage: bench_smoke.sh PATH/TO/tessera WORKDIR
set -uo pipefail
tessera=$1
work=$2
mkdir -p "$work"
run() { mpirun --oversubscribe --bind-to none -np 2 "$tessera" "$@"; }
fail=0
check() {  # check NAME EXPECTED_RC PATTERN OUTPUT RC
  if [[ $5 -ne $2 ]] || ! grep -q -- "$3" <<<"$4"; then
    echo "FAIL $1: exit $5 (want $2), output lacks '$3':"
    echo "$4" | tail -20
    fail=1
  else
    echo "ok   $1"
  fi
}

for c in allreduce allgather broadcast reduce-scatter alltoall; do
  out=$(run bench "$c" -b 64 -e 256K -f 8 -n 3 -w 1 --algo all --json "$work/$c.json" 2>&1); rc=$?
  check "bench $c" 0 "#wrong total: 0" "$out" $rc
  grep -q '"rows"' "$work/$c.json" || { echo "FAIL bench $c: no JSON rows"; fail=1; }
done
out=$(run bench allreduce -d bf16 -o avg -b 64 -e 64K -f 16 -n 2 --algo ring,rhd 2>&1); rc=$?
check "bench allreduce bf16 avg" 0 "#wrong total: 0" "$out" $rc

# ResNet-50 as torchvision defines it: 161 parameter tensors, 25,557,032 parameters.
out=$(run bench engine -n 2 -w 1 --json "$work/engine.json" 2>&1); rc=$?
check "bench engine" 0 "161 tensors, 25557032 parameters" "$out" $rc
grep -q '"control_ms_per_step"' "$work/engine.json" || { echo "FAIL bench engine: no JSON"; fail=1; }
# Both ranks share this host, so the critical-path measure is there; the median script reads it.
check "bench engine critical path" 0 "until the first rank has the agreement" "$out" $rc
out=$(python3 "$(dirname "$0")/../scripts/bench_engine_median.py" "$work/engine.json" 2>&1); rc=$?
check "bench_engine_median.py" 0 "critical, first agreed" "$out" $rc
out=$(run bench allreduce -d i32 -o band -b 64 -e 64K -f 16 -n 2 --algo all 2>&1); rc=$?
check "bench allreduce i32 band" 0 "#wrong total: 0" "$out" $rc
out=$(run bench allreduce -d f32 -o bor -n 1 2>&1); rc=$?
check "bor on f32 refused" 2 "bitwise and not defined on floating dtype f32" "$out" $rc

out=$(run bench allreduce --calibrate -e 1M -n 3 -w 1 --table "$work/table.json" 2>&1); rc=$?
check "calibrate" 0 "wrote $work/table.json" "$out" $rc
grep -q '"measured"' "$work/table.json" || { echo "FAIL calibrate: no measured curves"; fail=1; }
out=$(TESSERA_COST_TABLE="$work/table.json" run bench allreduce -b 8 -e 1M -f 32 -n 3 2>&1); rc=$?
check "auto with the calibrated table" 0 "#wrong total: 0" "$out" $rc

out=$(run bench allreduce --algo nccl 2>&1); rc=$?
check "unknown algorithm" 2 "accepted: auto ring rhd dbtree multicolor hierarchical mpi" "$out" $rc
out=$(run bench allreduce -d f8 2>&1); rc=$?
check "unknown dtype" 2 "accepted: f32 f64 f16 bf16 i32 i64 u8" "$out" $rc
out=$(run bench allreduce -d i32 -o avg 2>&1); rc=$?
check "average on integers" 2 "average is not defined on integer dtype i32" "$out" $rc
out=$(TESSERA_ALLREDUCE="ring:0-10;warp:11-max" run bench allreduce -e 1K 2>&1); rc=$?
check "malformed TESSERA_ALLREDUCE" 2 "bad part 'warp:11-max'" "$out" $rc
out=$(TESSERA_SEGMENT_BYTES=lots run bench allreduce -e 1K 2>&1); rc=$?
check "malformed TESSERA_SEGMENT_BYTES" 2 "TESSERA_SEGMENT_BYTES='lots'" "$out" $rc
out=$(TESSERA_COST_TABLE=/nonexistent.json run bench allreduce -e 1K 2>&1); rc=$?
check "missing cost table" 2 "cannot read TESSERA_COST_TABLE='/nonexistent.json'" "$out" $rc
exit $fail
