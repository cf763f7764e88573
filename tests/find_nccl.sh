#!/usr/bin/env bash
# scripts/find_nccl.py against a fake nvidia-nccl wheel laid out as the real one (issue 33):
# `nvidia` and `nvidia.nccl` are namespace packages (no __init__.py) holding lib/libnccl.so.2.
# The lookup gpu_check.sh used before (os.path.dirname(nvidia.nccl.__file__)) fails on it,
# which is what left NCCL off on the GPU machine; the script finds the folder; without a wheel
# it exits 1 saying where it looked.
# Usage: find_nccl.sh PYTHON WORKDIR
set -uo pipefail
py=$1
work=$2
here=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$work" && mkdir -p "$work/site/nvidia/nccl/lib" "$work/empty"
: > "$work/site/nvidia/nccl/lib/libnccl.so.2"
fail=0
if PYTHONPATH=$work/site "$py" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' \
   > /dev/null 2>&1; then
  echo "FAIL: the old lookup worked on a namespace package; the fake wheel is not like the real one"
  fail=1
else
  echo "ok   the old lookup fails on the namespace package"
fi
got=$(PYTHONPATH=$work/site "$py" "$here/scripts/find_nccl.py")
if [[ $got != "$work/site/nvidia/nccl" ]]; then
  echo "FAIL: find_nccl.py printed '$got', want '$work/site/nvidia/nccl'"
  fail=1
else
  echo "ok   find_nccl.py: $got"
fi
if msg=$(cd "$work/empty" && PYTHONPATH=$work/empty "$py" -S "$here/scripts/find_nccl.py" 2>&1); then
  echo "FAIL: find_nccl.py found '$msg' where there is no wheel"
  fail=1
elif [[ $msg != *"no lib/libnccl.so.2"* ]]; then
  echo "FAIL: without a wheel it said '$msg'"
  fail=1
else
  echo "ok   without a wheel: exit 1, '${msg:0:80}...'"
fi
exit $fail
