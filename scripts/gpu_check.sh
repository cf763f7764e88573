#!/usr/bin/env bash
# The GPU check: one run on the GPU test machine (one GPU, CUDA, PyTorch with its NCCL wheel; no
# MPI, no network), from a copy of the checkout plus .gpu-debs/ (Debian's Open MPI and header
# packages and PyPI's pybind11 wheel, fetched here by scripts/gpu_debs.sh). Unpacks them into a
# folder (never into /), configures and builds the GPU backend with CUDA and NCCL, runs the GPU
# tests at 1, 2 and 4 ranks sharing the GPU and the device benchmarks, and ends with one summary
# table. docs/gpu.md says how to run it.
#
#   bash scripts/gpu_check.sh [OUT]      (OUT: what comes back; default $OUT, else /tmp/gpu-check-out)
#
# Output contract (scripts/gpu_check_lib.sh): the logs stay in GPU_CHECK_LOGS (/tmp/gpu-check);
# OUT gets summary.txt row by row and, on any exit (a kill by SIGTERM included), logs.tar.gz and
# the logs of failing rows: at most 8 files. Every step's timeout is capped by what is left of
# GPU_CHECK_BUDGET (480 s; the device tool's limit should be about a minute more).
#
# It builds against the machine's PyTorch (its libtorch, CUDA included) without the image
# libraries it lacks (TESSERA_IMAGE_CODECS=OFF: synthetic data only): the device paths of comm
# and the engine first, then, after the benchmarks, the libtorch binding's test on CUDA
# tensors, the training checks (scripts/gpu_check_train.sh) and the Python package. Where
# configuring against that libtorch fails, it says so and goes on without it.
#
# On a machine without a GPU, GPU_CHECK_DEVICE=fake runs the same steps on the fake device (the
# CUDA cases skip) to check the script itself; with GPU_CHECK_REUSE_BUILD=1 and GPU_CHECK_BUILD
# pointing at a built tree it neither configures nor builds (tests/gpu_check_contract.sh).
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT_DIR=${1:-${OUT:-/tmp/gpu-check-out}}
LOG=${GPU_CHECK_LOGS:-/tmp/gpu-check}
BUDGET=${GPU_CHECK_BUDGET:-480}
DEPS=${GPU_CHECK_DEPS:-/tmp/tessera-gpu-deps}
BUILD=${GPU_CHECK_BUILD:-$SRC/build-gpu}
DEV=${GPU_CHECK_DEVICE:-cuda}
NPS=${GPU_CHECK_NPS:-1 2 4}
PY=${GPU_CHECK_PYTHON:-$(command -v python3 || true)}
# shellcheck source=scripts/gpu_check_lib.sh
source "$SRC/scripts/gpu_check_lib.sh"
gpu_check_start

# 1. Open MPI from the carried Debian packages, unpacked into $DEPS (dpkg -x, or ar + tar where
# dpkg is missing); on a machine that has an MPI (the fake-device run), that one.
unpack_debs() {
  local deb
  mkdir -p "$DEPS"
  for deb in "$SRC"/.gpu-debs/*.deb; do
    case $(basename "$deb") in pybind11-dev_*) continue ;; esac  # 2.10 predates Python 3.12
    if command -v dpkg > /dev/null; then
      dpkg -x "$deb" "$DEPS"
    else
      (cd "$(mktemp -d)" && ar x "$deb" && tar -xf data.tar.* -C "$DEPS")
    fi
  done
  local lib=$DEPS/usr/lib/x86_64-linux-gnu
  export OPAL_PREFIX=$DEPS/usr PATH=$DEPS/usr/bin:$PATH
  export LD_LIBRARY_PATH=$lib:$lib/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PMIX_MCA_mca_base_component_path=$lib/pmix2/lib/pmix
  MPIRUN="$DEPS/usr/bin/mpirun.openmpi --oversubscribe --bind-to none"
  MPI_ARGS=(-DCMAKE_PREFIX_PATH="$DEPS/usr" -DMPI_CXX_COMPILER="$DEPS/usr/bin/mpicxx.openmpi")
}
if compgen -G "$SRC/.gpu-debs/*.deb" > /dev/null; then
  unpack_debs
  row "MPI" "" "Open MPI from .gpu-debs, unpacked into $DEPS"
elif [ "$DEV" = fake ] && command -v mpirun > /dev/null; then
  MPIRUN="mpirun --oversubscribe --bind-to none" MPI_ARGS=()
  row "MPI" "" "this machine's: $(command -v mpirun)"
else
  row "MPI" "FAIL" "no .gpu-debs/*.deb: run scripts/gpu_debs.sh first and carry .gpu-debs"
  exit 2
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1 OMPI_MCA_mtl=^ofi TESSERA_TIMEOUT=60

# NCCL from PyTorch's wheel (libnccl.so.2 without the libnccl.so link; cmake/cuda.cmake asks
# for it by name under NCCL_HOME). The wheel is a namespace package: scripts/find_nccl.py reads
# its __path__ (its __file__ is None, which once left NCCL off without a word).
NCCL_HOME=$("$PY" "$SRC/scripts/find_nccl.py" 2> "$LOG/nccl_lookup.txt" || true)
export NCCL_HOME
[ -n "$NCCL_HOME" ] && export LD_LIBRARY_PATH=$NCCL_HOME/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$LOG/gpu.txt" 2>&1
else
  echo "no nvidia-smi here" > "$LOG/gpu.txt"
fi
row "GPU" "" "$(head -1 "$LOG/gpu.txt")"
row "NCCL (the wheel's)" "" "${NCCL_HOME:-not found: $(head -c 200 "$LOG/nccl_lookup.txt")}"

# pybind11 from the machine's Python where it has one, else PyPI's wheel carried in .gpu-debs
# (Debian's 2.10 predates the GPU machine's Python 3.12).
pybind11_dir() {
  local whl
  "$PY" -m pybind11 --cmakedir 2> /dev/null && return
  whl=$(compgen -G "$SRC/.gpu-debs/pybind11-*.whl" | head -1)
  [ -n "$whl" ] || return 1
  "$PY" -m zipfile -e "$whl" "$DEPS/pybind11-wheel" &&
    echo "$DEPS/pybind11-wheel/pybind11/share/cmake/pybind11"
}
PYBIND11_DIR=$(pybind11_dir || true)
row "pybind11" "" "${PYBIND11_DIR:-neither the machine's Python nor .gpu-debs has one: CMake's own search}"

# 2. Configure (against PyTorch's libtorch and Python where that works, else with less) and
# build what the GPU checks run.
configure() {  # extra CMake arguments...
  local gen=()  # Ninja for a fresh tree where it exists; an existing tree keeps its generator
  [ ! -f "$BUILD/CMakeCache.txt" ] && command -v ninja > /dev/null && gen=(-G Ninja)
  # PyTorch's Caffe2 config ignores CMAKE_CUDA_ARCHITECTURES: Hopper only, not eleven targets.
  TORCH_CUDA_ARCH_LIST=9.0 step 120 "$LOG/configure_$#.log" cmake -S "$SRC" -B "$BUILD" \
    "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    "${MPI_ARGS[@]}" -DTESSERA_IMAGE_CODECS=OFF ${PYBIND11_DIR:+-Dpybind11_DIR="$PYBIND11_DIR"} "$@"
  local rc=$?
  cat "$LOG/configure_$#.log" >> "$LOG/configure.log"
  return "$rc"
}
configure_tree() {
  TORCH=on PYTHON=on TRAINING=${GPU_CHECK_TRAINING:-on}
  if [ "${GPU_CHECK_REUSE_BUILD:-0}" = 1 ]; then
    grep -q "TESSERA_WITH_PYTHON:BOOL=OFF" "$BUILD/CMakeCache.txt" 2> /dev/null && PYTHON=off
    row "configure" "reused" "$BUILD as it is; training $TRAINING, Python $PYTHON"
    return
  fi
  configure -DTESSERA_WITH_TORCH=ON -DTESSERA_PYTHON="$PY" -DUSE_SYSTEM_NVTX=ON \
    -DTESSERA_WITH_PYTHON="$PYTHON" -DTESSERA_WITH_TRAINING="$TRAINING" && return
  row "configure with libtorch, training and Python" "FAIL" "configure.log (trying without Python and training)"
  failed "$LOG/configure.log"
  PYTHON=off TRAINING=off; rm -rf "$BUILD"
  configure -DTESSERA_WITH_TORCH=ON -DTESSERA_PYTHON="$PY" -DUSE_SYSTEM_NVTX=ON \
    -DTESSERA_WITH_PYTHON=OFF -DTESSERA_WITH_TRAINING=OFF && return
  row "configure with libtorch" "FAIL" "configure.log (trying without libtorch)"
  TORCH=off; rm -rf "$BUILD"
  configure -DTESSERA_WITH_TORCH=OFF && return
  row "configure" "FAIL" "configure.log"
  exit 1
}
configure_tree
if [ "${GPU_CHECK_REUSE_BUILD:-0}" != 1 ]; then
  row "configure" "ok" "$(grep -o 'GPU backend on.*' "$LOG/configure.log" | tail -1); libtorch $TORCH, training $TRAINING, Python $PYTHON"
  [ "$TORCH" = on ] && row "libtorch" "" "$(grep -o 'libtorch has CUDA.*' "$LOG/configure.log" | tail -1 || echo 'no CUDA in this libtorch')"
fi

# The build, timed as a row: the first build of the tree against a CUDA libtorch.
build() {  # name, log, targets...
  local name=$1 log=$2 start rc; shift 2
  start=$(date +%s)
  if [ "${GPU_CHECK_REUSE_BUILD:-0}" = 1 ]; then
    row "$name" "reused" "not built: GPU_CHECK_REUSE_BUILD=1"
    return
  fi
  step 400 "$log" cmake --build "$BUILD" -j"$(nproc)" --target "$@"
  rc=$?
  if [ "$rc" = 0 ]; then
    row "$name" "ok" "$(( $(date +%s) - start )) s (at $(elapsed))"
  else
    fail_row "$name (after $(( $(date +%s) - start )) s)" "$log" "$rc"
    return 1
  fi
}
build "build (device tests, tessera-bench)" "$LOG/build.log" tessera_unit_tests \
  mpi_device_collectives mpi_engine_device tessera-bench || exit 1
# 3-6. The tests, the benchmarks, the libtorch binding, training and the Python package.
source "$SRC/scripts/gpu_check_device.sh"
