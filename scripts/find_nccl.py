#!/usr/bin/env python3
"""Prints the folder of NCCL from PyTorch's `nvidia-nccl-cu*` wheel: the one holding
lib/libnccl.so.2 (cmake/cuda.cmake takes it as NCCL_HOME). Exit 1, saying where it looked, when
there is none.

The wheel's `nvidia` and `nvidia.nccl` are namespace packages (no __init__.py): their
`__file__` is None, so the folder comes from `__path__`; failing that, from nvidia/nccl under
every site-packages folder and sys.path entry.

    scripts/find_nccl.py
"""
import os
import site
import sys


def candidates():
    try:
        import nvidia.nccl as nccl
        yield from list(getattr(nccl, "__path__", []))
        if getattr(nccl, "__file__", None):
            yield os.path.dirname(nccl.__file__)
    except ImportError:
        pass
    folders = list(sys.path)
    try:
        folders += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # a virtualenv's old site module
        pass
    for folder in folders:
        yield os.path.join(folder, "nvidia", "nccl")


def main():
    seen = []
    for c in candidates():
        if os.path.isfile(os.path.join(c, "lib", "libnccl.so.2")):
            print(c)
            return 0
        seen.append(c)
    print("find_nccl: no lib/libnccl.so.2 from the nvidia-nccl wheel; looked in " +
          ", ".join(dict.fromkeys(seen)), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
