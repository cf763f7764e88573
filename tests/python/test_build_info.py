"""The package refuses a torch other than the one it was built against, before loading the
extension (whose C++ ABI would not match), and says how to rebuild."""
import os
import shutil
import subprocess
import sys

import tessera


def test_import_refuses_another_torch(tmp_path):
    package = os.path.dirname(tessera.__file__)
    copy = tmp_path / "tessera"
    shutil.copytree(package, copy)
    info = (copy / "_build_info.py").read_text()
    (copy / "_build_info.py").write_text(info.replace("torch_version = ", "torch_version = '0.0' #"))
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    for name in [k for k in env if k.startswith(("OMPI_", "PMIX_"))]:
        del env[name]  # a plain process, not another rank of this job
    r = subprocess.run([sys.executable, "-c", "import tessera.torch"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "ImportError: tessera was built against torch 0.0" in r.stderr, r.stderr
    assert "-DTESSERA_PYTHON=" in r.stderr, r.stderr
