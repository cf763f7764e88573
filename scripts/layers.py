#!/usr/bin/env python3
"""Checks the include graph against the layers of DESIGN.md: a file of layer A may include
"B/..." only when A -> B is an arrow below. Fails naming each include that is not, and each
listed exception that is no longer needed (so the list only shrinks).

    scripts/layers.py [ROOT]

The arrows are DESIGN.md's, plus common/ for everyone, include/tessera (torch's public header,
"tessera/") wherever torch/ may be used, and five arrows DESIGN.md does not draw, each with its
reason: engine -> gpu and torch -> gpu (the device path carries gpu::Device handles and device
buffers, the "device buffers only" of comm's arrow, one layer up); runtime -> tune (the
session owns the autotuner); models -> torch's public header (the models build tessera's
BatchNorm2d, which is SyncBatchNorm when the spec asks: the layer knows the ranks, the model
does not); spatial -> models (DESIGN's table gives spatial "spatial versions of the models",
which wrap the models' own blocks). apps/ and bench/ sit above every library and may use any.
"""
import collections
import glob
import os
import re
import sys

ARROWS = {
    "common": set(),
    "gpu": set(),
    "comm": {"gpu"},
    "engine": {"comm", "gpu"},
    "tune": {"engine", "comm"},
    "runtime": {"tune", "engine", "comm"},
    "torch": {"engine", "runtime", "gpu", "tessera"},
    "spatial": {"torch", "comm", "tessera", "models"},
    "models": {"tessera"},
    "data": set(),
    "train": {"models", "data", "spatial", "torch", "tessera"},
    # data: the slide reader, so tessera.torch.spatial reads only a rank's tile (issue 35).
    "python": {"torch", "spatial", "tessera", "data"},
}
TOP = {"apps", "bench"}

# Includes that break an arrow today, each a piece of work still open (issue 32): file -> layer.
EXCEPTIONS = {}


def layer_of(root, path):
    rel = os.path.relpath(path, root).split(os.sep)
    if rel[0] == "src":
        return rel[1]
    if rel[0] == "python":
        return "python"
    return rel[0]


def main(root):
    files = []
    for pattern in ("src/*/*.cc", "src/*/*.h", "src/*/*.cu", "src/*/*/*.cc", "src/*/*/*.h",
                    "python/extension/*.cc",
                    "apps/tessera/*.cc", "apps/tessera/*.h", "bench/*.cc", "bench/*.h"):
        files += glob.glob(os.path.join(root, pattern))
    bad, used = [], set()
    for path in sorted(files):
        layer = layer_of(root, path)
        if layer in TOP:
            continue
        text = open(path, encoding="utf-8").read()
        for target in sorted(set(re.findall(r'^#include "([a-z_]+)/', text, re.M))):
            if target in (layer, "common") or target in ARROWS.get(layer, set()):
                continue
            key = (layer, target, os.path.basename(path))
            if key in EXCEPTIONS:
                used.add(key)
            else:
                bad.append(f"{os.path.relpath(path, root)}: {layer} -> {target} is not an arrow "
                           f"of DESIGN.md ({layer} may use: "
                           f"{', '.join(sorted(ARROWS.get(layer, set()) | {'common'}))})")
    stale = [f"{k[0]} -> {k[1]} in {k[2]}: listed as an exception but no longer included"
             for k in EXCEPTIONS if k not in used]
    for line in bad + stale:
        print(line)
    print(f"layers: {len(files)} files; {len(bad)} includes against the arrows, "
          f"{len(used)} listed exceptions (open work), {len(stale)} stale")
    return 1 if bad or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else
                  os.path.join(os.path.dirname(__file__), "..")))
