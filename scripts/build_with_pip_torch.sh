#!/usr/bin/env bash
# Builds tessera against a PyTorch from PyPI instead of Debian's libtorch 1.13, then runs tests.
# CMake finds that torch's libtorch through torch.utils.cmake_prefix_path (CMakeLists.txt).
#
#   scripts/build_with_pip_torch.sh [TORCH_VERSION] [CTEST_REGEX]
#
# TORCH_VERSION defaults to the newest on PyPI; CTEST_REGEX to every test. The venv and the
# build tree go under $PIP_TORCH_ROOT (default /tmp/tessera-pip-torch), outside the checkout.
# Needs the network once (PyPI's torch wheel is CUDA-enabled, several GB with its nvidia-*
# wheels); it runs on a machine without a GPU, where torch.cuda is simply not available.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
VERSION=${1:-}
REGEX=${2:-.}
ROOT=${PIP_TORCH_ROOT:-/tmp/tessera-pip-torch}
VENV=$ROOT/venv-${VERSION:-latest}
BUILD=$ROOT/build-${VERSION:-latest}

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet "torch${VERSION:+==$VERSION}" torchvision numpy pytest
fi
"$VENV/bin/python" -c "import torch; print('torch', torch.__version__, torch.__file__)"
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTESSERA_PYTHON="$VENV/bin/python" \
  > "$BUILD.configure.log" 2>&1 || { cat "$BUILD.configure.log"; exit 1; }
grep "Found Torch" "$BUILD.configure.log"
cmake --build "$BUILD" -j"$(nproc)" -- --no-print-directory > "$BUILD.build.log" 2>&1 ||
  { grep -B2 -A8 "error" "$BUILD.build.log" | head -80; exit 1; }
ctest --test-dir "$BUILD" --output-on-failure --timeout 1800 -R "$REGEX"
