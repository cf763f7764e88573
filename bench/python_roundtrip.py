#!/usr/bin/env python3
"""A 4-byte allreduce round trip from Python (tessera.torch), the same loop as
bench/allreduce_roundtrip.cc: synchronous allreduces of a one-element float tensor. Prints
one JSON line with the median and the quartiles of the per-call time.

    mpirun -np 2 /usr/bin/python3 bench/python_roundtrip.py [calls] [warmup]
"""
import json
import sys
import time

import torch

import tessera.torch as hvd

calls = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
warmup = int(sys.argv[2]) if len(sys.argv) > 2 else 200
hvd.init()
x = torch.ones(1)
us = []
for i in range(warmup + calls):
    t0 = time.perf_counter()
    hvd.allreduce(x, name="roundtrip", op=hvd.Sum)
    t1 = time.perf_counter()
    if i >= warmup:
        us.append((t1 - t0) * 1e6)
us.sort()
if hvd.rank() == 0:
    print(json.dumps({"side": "python", "ranks": hvd.size(), "calls": calls,
                      "p25_us": round(us[len(us) // 4], 2),
                      "median_us": round(us[len(us) // 2], 2),
                      "p75_us": round(us[3 * len(us) // 4], 2)}))
hvd.shutdown()
