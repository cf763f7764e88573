#!/usr/bin/env bash
# `pip install .` works offline with the interpreter's own packages (Debian's, or a venv's with a
# PyPI torch): built from this build tree (already built: the install only copies), into a
# separate folder so the interpreter's environment is left as it was; then the package imports
# from there, outside the checkout, and runs a one-rank allreduce.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$1
TARGET=$2
PY=${TEST_PYTHON:-/usr/bin/python3}  # the interpreter the build is for
rm -rf "$TARGET"
# --no-build-isolation: the installed setuptools, nothing fetched. --target: what a venv install
# writes to its site-packages, without a venv (one made from a venv would not see that venv's
# torch and setuptools).
TESSERA_BUILD_DIR=$BUILD "$PY" -m pip install --no-build-isolation --no-deps --no-index \
  --quiet --target "$TARGET" "$SRC"
cd "$TARGET"
env PYTHONPATH="$TARGET" "$PY" - "$TARGET" <<'PYEOF'
import sys, torch, tessera, tessera.torch as hvd
assert tessera.__file__.startswith(sys.argv[1]), tessera.__file__
hvd.init()
assert hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [1.0, 1.0]
hvd.shutdown()
print("pip-installed tessera.torch works:", tessera.__file__)
PYEOF
