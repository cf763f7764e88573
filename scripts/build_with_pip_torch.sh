#!/usr/bin/env bash
# Builds tessera against a PyTorch from PyPI instead of Debian's libtorch 1.13, then runs tests:
# the GPU test machine's PyTorch (2.11.0+cu130), linked here with this machine's CUDA 13 and the
# wheel's NCCL, so that what only compiles against a CUDA libtorch (the libtorch-CUDA glue, the
# Python extension's CUDA paths) is compiled and linked before a GPU ever runs it.
# CMake finds that torch's libtorch through torch.utils.cmake_prefix_path (CMakeLists.txt).
#
#   scripts/build_with_pip_torch.sh [TORCH_VERSION] [CTEST_REGEX]
#
# TORCH_VERSION defaults to 2.11.0 (the GPU test machine's); CTEST_REGEX to every test. The venv
# and the build tree go under $PIP_TORCH_ROOT (default /tmp/tessera-pip-torch), outside the
# checkout. Needs the network once: PyPI's torch for Linux is a CUDA build, about 3.3 GB of
# wheels with its nvidia-* and triton ones, 4.7 GB installed (docs/gpu.md); without a GPU,
# torch.cuda is simply not available and the CUDA cases skip. PIP_TORCH_CUDA=OFF builds
# without the GPU backend.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
VERSION=${1:-2.11.0}
TORCHVISION=${TORCHVISION:-$([ "$VERSION" = 2.11.0 ] && echo 0.26.0)}
REGEX=${2:-.}
ROOT=${PIP_TORCH_ROOT:-/tmp/tessera-pip-torch}
VENV=$ROOT/venv-$VERSION
BUILD=$ROOT/build-$VERSION
mkdir -p "$ROOT"

if [ ! -x "$VENV/bin/python" ]; then
  /usr/bin/python3 -m venv "$VENV"
  # pybind11 from PyPI beside that torch: Debian's 2.10 predates Python 3.12 (the GPU machine's);
  # 2.13 knows FindPython3 as we call it (3.x wants FindPython).
  # torchvision for the interop test (0.26 goes with 2.11, as on the GPU machine); wheel and
  # setuptools for the pip-install test.
  "$VENV/bin/pip" install --quiet "torch==$VERSION" "torchvision${TORCHVISION:+==$TORCHVISION}" \
    numpy pytest pybind11==2.13.6 wheel setuptools
fi
PY=$VENV/bin/python
"$PY" -c "import torch; print('torch', torch.__version__, torch.__file__)"
# Its Caffe2 config ignores CMAKE_CUDA_ARCHITECTURES and would build for eleven architectures.
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
CUDA_ARGS=(-DTESSERA_CUDA="${PIP_TORCH_CUDA:-ON}" -DCMAKE_CUDA_ARCHITECTURES=90 -DUSE_SYSTEM_NVTX=ON)
NCCL_HOME=$("$PY" "$SRC/scripts/find_nccl.py" 2> /dev/null || true)
export NCCL_HOME
echo "NCCL_HOME=${NCCL_HOME:-not found}"
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTESSERA_PYTHON="$PY" "${CUDA_ARGS[@]}" \
  -Dpybind11_DIR="$("$PY" -m pybind11 --cmakedir)" > "$BUILD.configure.log" 2>&1 ||
  { tail -40 "$BUILD.configure.log"; exit 1; }
grep -h "Found Torch\|GPU backend\|libtorch has CUDA" "$BUILD.configure.log" || true
START=$(date +%s)
cmake --build "$BUILD" -j"$(nproc)" > "$BUILD.build.log" 2>&1 ||
  { grep -B2 -A8 "error" "$BUILD.build.log" | head -80; exit 1; }
echo "build: $(( $(date +%s) - START )) s"
ctest --test-dir "$BUILD" --output-on-failure --timeout 1800 -R "$REGEX"
