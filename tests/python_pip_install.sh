#!/usr/bin/env bash
# `pip install .` works offline with Debian's packages: into a venv that sees the system's torch,
# using this build tree (already built: the install only copies), then the package imports and
# runs a one-rank allreduce from outside the checkout.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$1
VENV=$2
PY=${TEST_PYTHON:-/usr/bin/python3}  # the interpreter the build is for
rm -rf "$VENV"
"$PY" -m venv --system-site-packages "$VENV"
# A venv sees its base interpreter's packages, not those of a venv it was made from: when $PY is
# itself a venv's (a pip-installed torch), point the new one at that torch.
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  "$PY" -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))" \
    > "$("$VENV/bin/python" -c "import site; print(site.getsitepackages()[0])")/torch_from.pth"
fi
TESSERA_BUILD_DIR=$BUILD "$VENV/bin/python" -m pip install --no-build-isolation --no-deps \
  --no-index --quiet "$SRC"
cd "$VENV"
env -u PYTHONPATH "$VENV/bin/python" - <<'PYEOF'
import torch, tessera, tessera.torch as hvd
assert tessera.__file__.startswith(__import__("sys").prefix), tessera.__file__
hvd.init()
assert hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [1.0, 1.0]
hvd.shutdown()
print("pip-installed tessera.torch works:", tessera.__file__)
PYEOF
