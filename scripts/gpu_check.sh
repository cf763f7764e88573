#!/usr/bin/env bash
# The GPU check: one run on the GPU test machine (one GPU, CUDA, PyTorch with its NCCL wheel; no
# MPI, no network), from a copy of the checkout plus the Debian packages of .gpu-debs/ (made
# here by scripts/gpu_debs.sh). Unpacks them into a folder (never into /), configures and builds
# the GPU backend with CUDA and NCCL, runs the GPU tests at 1, 2 and 4 ranks sharing the GPU and
# the device benchmarks, and ends with one summary table. docs/gpu.md says how to run it.
#
#   bash scripts/gpu_check.sh [OUT]      (OUT: where the logs go; default $OUT, else /tmp/gpu-check)
#
# It builds against the machine's PyTorch (its libtorch, CUDA included) without the image
# libraries it lacks (TESSERA_IMAGE_CODECS=OFF: synthetic data only): the device paths of comm
# and the engine first, then, after the benchmarks, the libtorch binding's test on CUDA
# tensors, the training checks and benchmarks (scripts/gpu_check_train.sh) and the Python
# package, each in the time left of GPU_CHECK_BUDGET (520 s). Where configuring against that
# libtorch fails, it says so and goes on without it (and without training).
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
LOG=${1:-${OUT:-/tmp/gpu-check}}
DEPS=${GPU_CHECK_DEPS:-/tmp/tessera-gpu-deps}
BUILD=${GPU_CHECK_BUILD:-$SRC/build-gpu}
mkdir -p "$LOG" "$DEPS"
SUMMARY=$LOG/summary.txt
: > "$SUMMARY"
T0=$(date +%s)
row() { printf '%-44s %-8s %s\n' "$1" "$2" "$3" | tee -a "$SUMMARY"; }
elapsed() { echo "$(( $(date +%s) - T0 )) s"; }

# 1. The Debian packages, unpacked into $DEPS (dpkg -x, or ar + tar where dpkg is missing).
for deb in "$SRC"/.gpu-debs/*.deb; do
  [ -e "$deb" ] || { echo "no .gpu-debs/*.deb: run scripts/gpu_debs.sh first"; exit 2; }
  if command -v dpkg > /dev/null; then
    dpkg -x "$deb" "$DEPS"
  else
    (cd "$(mktemp -d)" && ar x "$deb" && tar -xf data.tar.* -C "$DEPS")
  fi
done
LIB=$DEPS/usr/lib/x86_64-linux-gnu
export OPAL_PREFIX=$DEPS/usr PATH=$DEPS/usr/bin:$PATH
export LD_LIBRARY_PATH=$LIB:$LIB/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PMIX_MCA_mca_base_component_path=$LIB/pmix2/lib/pmix
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1 OMPI_MCA_mtl=^ofi TESSERA_TIMEOUT=60
MPIRUN="$DEPS/usr/bin/mpirun.openmpi --oversubscribe --bind-to none"
# NCCL from PyTorch's wheel (libnccl.so.2 without the libnccl.so link; cmake/cuda.cmake asks
# for it by name under NCCL_HOME). The wheel is a namespace package: scripts/find_nccl.py reads
# its __path__ (its __file__ is None, which once left NCCL off without a word).
NCCL_HOME=$(python3 "$SRC/scripts/find_nccl.py" 2> "$LOG/nccl_lookup.txt" || true)
export NCCL_HOME
[ -n "$NCCL_HOME" ] && export LD_LIBRARY_PATH=$NCCL_HOME/lib:$LD_LIBRARY_PATH
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$LOG/gpu.txt" 2>&1
else
  echo "no nvidia-smi here" > "$LOG/gpu.txt"
fi
row "GPU" "" "$(head -1 "$LOG/gpu.txt")"
row "NCCL (the wheel's)" "" "${NCCL_HOME:-not found: $(head -c 200 "$LOG/nccl_lookup.txt")}"

# 2. Configure (against PyTorch's libtorch and Python where that works, else with less) and
# build what the GPU checks run.
PY=${GPU_CHECK_PYTHON:-$(command -v python3 || true)}
configure() {  # extra CMake arguments...
  local gen=()  # Ninja for a fresh tree where it exists; an existing tree keeps its generator
  [ ! -f "$BUILD/CMakeCache.txt" ] && command -v ninja > /dev/null && gen=(-G Ninja)
  cmake -S "$SRC" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$DEPS/usr" \
    -DMPI_CXX_COMPILER="$DEPS/usr/bin/mpicxx.openmpi" -DTESSERA_IMAGE_CODECS=OFF "$@" \
    >> "$LOG/configure.log" 2>&1
}
TORCH=on PYTHON=on TRAINING=${GPU_CHECK_TRAINING:-on}
if ! configure -DTESSERA_WITH_TORCH=ON -DTESSERA_PYTHON="$PY" -DUSE_SYSTEM_NVTX=ON \
     -DTESSERA_WITH_TRAINING="$TRAINING"; then
  row "configure with libtorch, training and Python" "FAIL" "$LOG/configure.log (trying without Python and training)"
  PYTHON=off TRAINING=off; rm -rf "$BUILD"
  if ! configure -DTESSERA_WITH_TORCH=ON -DTESSERA_PYTHON="$PY" -DUSE_SYSTEM_NVTX=ON \
       -DTESSERA_WITH_PYTHON=OFF -DTESSERA_WITH_TRAINING=OFF; then
    row "configure with libtorch" "FAIL" "$LOG/configure.log (trying without libtorch)"
    TORCH=off; rm -rf "$BUILD"
    configure -DTESSERA_WITH_TORCH=OFF ||
      { row "configure" "FAIL" "$LOG/configure.log"; tail -30 "$LOG/configure.log"; exit 1; }
  fi
fi
row "configure" "ok" "$(grep -o 'GPU backend on.*' "$LOG/configure.log" | tail -1); libtorch $TORCH, training $TRAINING, Python $PYTHON"
[ "$TORCH" = on ] && row "libtorch" "" "$(grep -o 'libtorch has CUDA.*' "$LOG/configure.log" | tail -1 || echo 'no CUDA in this libtorch')"
if ! timeout 300 cmake --build "$BUILD" -j"$(nproc)" --target tessera_unit_tests \
     mpi_device_collectives mpi_engine_device tessera-bench > "$LOG/build.log" 2>&1; then
  row "build" "FAIL" "$LOG/build.log"; grep -B2 -A8 -m5 "error" "$LOG/build.log"; exit 1
fi
row "build" "ok" "$(elapsed)"

# 3. The GPU tests: device conformance, the device collectives and the engine on CUDA tensors
# at 1, 2 and 4 ranks sharing the GPU (each backend that can run: IPC, staged and hierarchical
# when ranks share it, NCCL at 1 rank; the others skip saying why).
test_row() {  # name, log, command...
  local name=$1 log=$2; shift 2
  if timeout 240 "$@" > "$log" 2>&1; then
    row "$name" "pass" "$(grep -c '\[       OK \].*cuda' "$log") cuda cases ok, $(grep -c '\[       OK \]' "$log") ok in all, $(grep -c SKIPPED "$log") skip lines"
  else
    row "$name" "FAIL" "$log"
  fi
}
test_row "unit (GpuDevice)" "$LOG/unit.log" "$BUILD/tests/tessera_unit_tests" --gtest_filter='GpuDevice*'
for np in 1 2 4; do
  test_row "device collectives, $np ranks" "$LOG/dc_np$np.log" \
    $MPIRUN -np "$np" "$BUILD/tests/mpi_device_collectives"
  test_row "engine on CUDA tensors, $np ranks" "$LOG/ed_np$np.log" \
    $MPIRUN -np "$np" "$BUILD/tests/mpi_engine_device"
done

# 4. The device benchmarks: allreduce 4 KiB to 256 MiB at 1 rank (NCCL) and at 2 and 4 ranks
# sharing the GPU (IPC and staged), beside the host round trip and under the measured ceilings.
for np in 1 2 4; do
  b=$LOG/bench_allreduce_np$np.txt
  backends=ipc,staged
  [ "$np" = 1 ] && backends=auto
  if timeout 150 $MPIRUN -np "$np" "$BUILD/apps/tessera/tessera-bench" allreduce --device "${GPU_CHECK_DEVICE:-cuda}" \
       --backend "$backends" -b 4K -e 256M -f 4 -n 10 -w 3 > "$b" 2>&1; then
    row "bench allreduce, $np ranks" "ok" "$b"
  else
    row "bench allreduce, $np ranks" "FAIL" "$b"
  fi
  grep "^# ceilings\|^# fusion" "$b" | sed 's/^# /    /' | tee -a "$SUMMARY"
  awk -v np="$np" '$1 == 4096 || $1 >= 67108864 {
      printf "    %d ranks %-12s %10s B  %9s us  algbw %8s  busbw %8s  vs_host %7s  %%bound %s\n",
             np, $5, $1, $6, $7, $8, $10, $12 }' "$b" | tee -a "$SUMMARY"
done
# 5. The libtorch binding on CUDA tensors (tests/mpi/test_torch_device.cc in its cuda mode) at
# 1, 2 and 4 ranks sharing the GPU, and the Python package's CUDA case, in the time left.
BUDGET=${GPU_CHECK_BUDGET:-520}
TRAIN_TARGETS=()
[ "$TRAINING" = on ] && TRAIN_TARGETS=(tessera mpi_train mpi_spatial tessera_torch_unit_tests)
if [ "$TORCH" = on ]; then
  left=$(( BUDGET - ($(date +%s) - T0) ))
  if [ "$left" -gt 60 ] && timeout "$left" cmake --build "$BUILD" -j"$(nproc)" \
       --target mpi_torch_device "${TRAIN_TARGETS[@]}" > "$LOG/build_torch.log" 2>&1; then
    row "build libtorch binding test${TRAIN_TARGETS:+ and training}" "ok" "$(elapsed)"
    for np in 1 2 4; do
      test_row "libtorch binding on CUDA tensors, $np ranks" "$LOG/td_np$np.log" \
        env TESSERA_TEST_TORCH_DEVICE="${GPU_CHECK_DEVICE:-cuda}" $MPIRUN -np "$np" "$BUILD/tests/mpi_torch_device"
    done
    # 6. Training on the GPU (issue 22).
    [ "$TRAINING" = on ] && source "$SRC/scripts/gpu_check_train.sh"
  else
    row "build libtorch binding test" "FAIL" "$LOG/build_torch.log ($left s were left)"
    grep -B2 -A8 -m5 "error" "$LOG/build_torch.log"
  fi
  left=$(( BUDGET - ($(date +%s) - T0) ))
  if [ "$PYTHON" = on ] && [ "$left" -gt 40 ] && timeout "$left" cmake --build "$BUILD" \
       -j"$(nproc)" --target tessera_python > "$LOG/build_python.log" 2>&1; then
    for np in 1 2; do
      log=$LOG/py_np$np.log
      if timeout 240 env PYTHONPATH="$BUILD/python" $MPIRUN -np "$np" "$PY" -m pytest -q \
           -p no:cacheprovider --color=no "$SRC/tests/python/test_ops.py" \
           "$SRC/tests/python/test_optimizer.py" -k "cuda or neither" -rs > "$log" 2>&1; then
        row "Python package, CUDA case, $np ranks" "pass" "$(grep -E 'passed|skipped' "$log" | tail -1)"
      else
        row "Python package, CUDA case, $np ranks" "FAIL" "$log"
      fi
    done
  elif [ "$PYTHON" = on ]; then
    row "build Python package" "FAIL" "$LOG/build_python.log ($left s were left)"
  fi
fi
row "total" "" "$(elapsed)"
echo "== summary ($SUMMARY)"
cat "$SUMMARY"
