#!/usr/bin/env bash
# TESSERA_CUDA at configure time, on a machine whose nvcc is hidden (CUDACXX names a missing
# one): ON fails saying what is missing and what works, AUTO configures without the GPU
# backend, and a value outside AUTO/ON/OFF is refused naming the accepted ones.
#   tests/cuda_option.sh SOURCE_DIR WORK_DIR
set -uo pipefail
SRC=$1
WORK=$2
rm -rf "$WORK"
mkdir -p "$WORK"
fail=0
configure() {  # name, cmake arguments...
  local name=$1
  shift
  CUDACXX=/nonexistent/nvcc cmake -S "$SRC" -B "$WORK/$name" -DTESSERA_WITH_TORCH=OFF \
    -DTESSERA_BUILD_TESTS=OFF "$@" > "$WORK/$name.log" 2>&1
}
expect() {  # name, expected exit status (0 or non-zero), text the log must hold
  local name=$1 want=$2 text=$3 rc=$4
  if { [ "$want" = 0 ] && [ "$rc" != 0 ]; } || { [ "$want" != 0 ] && [ "$rc" = 0 ]; } ||
     ! grep -qF -- "$text" "$WORK/$name.log"; then
    echo "FAIL $name: exit $rc, expected text: $text"
    tail -20 "$WORK/$name.log"
    fail=1
  else
    echo "ok   $name"
  fi
}
configure on -DTESSERA_CUDA=ON
expect on 1 "TESSERA_CUDA=ON but no CUDA compiler (nvcc) was found" $?
expect on 1 "-DTESSERA_CUDA=AUTO (the default) builds without the GPU backend" 1
configure bogus -DTESSERA_CUDA=yes
expect bogus 1 "TESSERA_CUDA must be AUTO, ON or OFF, got 'yes'" $?
configure auto -DTESSERA_CUDA=AUTO
expect auto 0 "tessera: no CUDA compiler found, building without the GPU backend" $?
exit $fail
