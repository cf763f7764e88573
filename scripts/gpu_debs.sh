#!/usr/bin/env bash
# Fetches the Debian packages the GPU check needs on the GPU test machine (which has no MPI and
# no network) into .gpu-debs/, which git ignores (.git/info/exclude) so that the device tool's
# `carry` can take it there: Open MPI's libraries, orted and their closure (GPU.md), and the
# header-only build dependencies (pybind11 for the Python package). About 9 MiB.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$SRC/.gpu-debs"
cd "$SRC/.gpu-debs"
apt-get download openmpi-bin libopenmpi3 libopenmpi-dev openmpi-common libhwloc15 \
  libevent-core-2.1-7 libevent-pthreads-2.1-7 libpmix2 \
  libfabric1 libucx0 libibverbs1 librdmacm1 ibverbs-providers libpsm-infinipath1 libpsm2-2 \
  libnuma1 libnl-3-200 libnl-route-3-200 libmunge2 \
  nlohmann-json3-dev libcli11-dev libgtest-dev pybind11-dev > /dev/null
for p in .gpu-debs/ build-gpu/; do
  grep -qxF "$p" "$SRC/.git/info/exclude" 2> /dev/null || echo "$p" >> "$SRC/.git/info/exclude"
done
du -sh "$SRC/.gpu-debs"
