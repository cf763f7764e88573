"""pip install for the Python package tessera (tessera.torch and the launcher).

    /usr/bin/python3 -m pip install --no-build-isolation .

builds the extension with the project's CMake (in build/, or TESSERA_BUILD_DIR), against the
torch of the interpreter running pip, and installs it beside the Python sources. Offline with
Debian's packages: --no-build-isolation uses the installed setuptools instead of fetching one.
"""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def cmake_build_dir():
    return os.environ.get("TESSERA_BUILD_DIR", os.path.join(ROOT, "build"))


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    """Configures (once) and builds the tessera_python target, then copies the module."""

    def build_extension(self, ext):
        build = cmake_build_dir()
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                                   f"-DTESSERA_PYTHON={sys.executable}"])
        subprocess.check_call(["cmake", "--build", build, "--target", "tessera_python",
                               f"-j{os.cpu_count() or 1}"])
        built = os.path.join(build, "python", "tessera")
        check_same_torch(os.path.join(built, "_build_info.py"), build)
        module = next(f for f in os.listdir(built) if f.startswith("_tessera."))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        # Always copied: a copy that is "up to date" by time stamp may come from another tree.
        shutil.copyfile(os.path.join(built, module), target)
        # The torch it was built against, checked again at import.
        shutil.copyfile(os.path.join(built, "_build_info.py"),
                        os.path.join(os.path.dirname(target), "_build_info.py"))


def check_same_torch(info_path, build):
    """A build tree configured for another interpreter's torch would install a module that
    cannot load here: refuse it, naming both."""
    import torch
    info = {}
    with open(info_path) as f:
        exec(f.read(), info)
    if info["torch_version"] != torch.__version__:
        sys.exit(f"{build} was configured for torch {info['torch_version']} ({info['python']}) "
                 f"but this interpreter has torch {torch.__version__}: set TESSERA_BUILD_DIR to "
                 "a new folder to build for this one")


setup(
    name="tessera",
    version="0.1.0",
    description="Data- and spatially-parallel training over MPI; Horovod's PyTorch API",
    package_dir={"": "python"},
    packages=["tessera", "tessera.torch"],
    ext_modules=[CMakeExtension("tessera._tessera")],
    cmdclass={"build_ext": CMakeBuild},
    # setuptools' own staging inside the CMake tree it installs from, so that trees built for
    # different torches (and interpreters) never share staged files.
    options={"build": {"build_base": os.path.join(cmake_build_dir(), "setuptools")}},
    python_requires=">=3.9",
)
