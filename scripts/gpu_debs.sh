#!/usr/bin/env bash
# Fetches the Debian packages the GPU check needs on the GPU test machine (which has no MPI and
# no network) into .gpu-debs/, which git ignores (.git/info/exclude) so that the device tool's
# `carry` can take it there: Open MPI's libraries, orted and their closure (GPU.md), the
# header-only build dependencies, and PyPI's pybind11 wheel for the Python package (Debian's
# pybind11 2.10 predates Python 3.12, the GPU machine's; gpu_check.sh uses the machine's own
# pybind11 first, this wheel where it has none). About 9 MiB.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$SRC/.gpu-debs"
cd "$SRC/.gpu-debs"
apt-get download openmpi-bin libopenmpi3 libopenmpi-dev openmpi-common libhwloc15 \
  libevent-core-2.1-7 libevent-pthreads-2.1-7 libpmix2 \
  libfabric1 libucx0 libibverbs1 librdmacm1 ibverbs-providers libpsm-infinipath1 libpsm2-2 \
  libnuma1 libnl-3-200 libnl-route-3-200 libmunge2 \
  nlohmann-json3-dev libcli11-dev libgtest-dev > /dev/null
rm -f pybind11-dev_*.deb  # from an older run of this script
# 2.13: the last series that takes the FindPython3 we call (3.x wants FindPython).
python3 -m pip download --quiet --no-deps --only-binary :all: pybind11==2.13.6 -d .
mkdir -p "$SRC/.git/info"
for p in .gpu-debs/ build-gpu/; do
  grep -qxF "$p" "$SRC/.git/info/exclude" 2> /dev/null || echo "$p" >> "$SRC/.git/info/exclude"
done
du -sh "$SRC/.gpu-debs"
