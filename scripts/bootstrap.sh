#!/usr/bin/env bash
# Installs, idempotently and only what is missing, every Debian package that tessera's build,
# tests and demo need. Run as root on a fresh Debian machine (CI does: it is called by `make`).
# `apt-get update` runs once, and only when something has to be installed.
set -euo pipefail

PACKAGES=(
  # build
  cmake g++ make pkg-config
  # the distributed engine
  libopenmpi-dev openmpi-bin
  # the tensor framework; without OpenBLAS libtorch falls back to the reference BLAS (~7x slower)
  libtorch-dev libopenblas0-openmp
  # image decoding for the input pipeline (OpenCV's codecs, libpng for palette label masks)
  libopencv-imgcodecs-dev libopencv-imgproc-dev libpng-dev
  # whole-slide images: tiled TIFFs read a region at a time (spatial decomposition)
  libtiff-dev
  # tests, benchmarks, JSON and the command line
  googletest libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev
  # the fuzz targets: clang with libFuzzer and compiler-rt (tests/fuzz, scripts/fuzz.sh)
  clang libclang-rt-14-dev
  # several "hosts" on one machine: network namespaces, veth and a bridge (ip), UTS namespaces
  # (unshare), host names (scripts/netns_hosts.sh, the multihost_* tests)
  iproute2 util-linux hostname
  # python reference (PyTorch DDP over gloo) for side-by-side benchmarks; torchvision checks
  # that weights interchange with its ResNets
  python3 python3-torch python3-torchvision
  # the Python package tessera.torch: its extension (pybind11, Python's headers) and its tests
  pybind11-dev python3-dev python3-pytest
)

missing=()
for p in "${PACKAGES[@]}"; do
  # dpkg-query prints "install ok installed" only for a fully installed package.
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "bootstrap: all ${#PACKAGES[@]} packages present"
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "bootstrap: missing packages: ${missing[*]}" >&2
  echo "bootstrap: run as root (or: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi

echo "bootstrap: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
