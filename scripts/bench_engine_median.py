#!/usr/bin/env python3
"""Medians over several `tessera bench engine --json FILE` runs at the same rank count.

Usage: bench_engine_median.py RUN1.json RUN2.json ...

Prints one line: step time beside one MPI_Allreduce of the same bytes, and the control plane
with the response cache on and off under each of the bench's measures (local wall, CPU, the
critical path from the last rank's arrival to the first and to the last rank holding the
agreement), with off/on ratios; then the 4 KiB latency through the engine.
"""
import json
import statistics
import sys


def main(paths):
    runs = [json.load(open(p)) for p in paths]
    n = runs[0]["ranks"]
    if any(r["ranks"] != n for r in runs):
        sys.exit("bench_engine_median.py: the runs have different rank counts")

    def med(*keys):
        values = []
        for r in runs:
            v = r
            for k in keys:
                if k not in v:
                    return None
                v = v[k]
            values.append(v)
        return statistics.median(values)

    mpi = med("mpi_allreduce_ms")
    on, off = med("cache_on", "step_ms"), med("cache_off", "step_ms")
    print(f"{n:3d} ranks, median of {len(runs)}: step {on:8.2f} ms (cache off {off:8.2f}) vs "
          f"MPI_Allreduce {mpi:8.2f} ms = {on / mpi:.2f}x")
    for label, key in [("local wall", "control_ms_per_step"),
                       ("CPU", "control_cpu_ms_per_step"),
                       ("critical, first agreed", "control_critical_ms_per_step"),
                       ("critical, all agreed", "control_critical_all_ms_per_step")]:
        a, b = med("cache_on", key), med("cache_off", key)
        if a is None or b is None:
            continue
        print(f"    control {label:<23} on {a:8.3f} ms  off {b:8.3f} ms  off/on {b / a:6.2f}x")
    print(f"    4 KiB through the engine: {med('latency_4KiB_us', 'cycle_default'):.1f} us at "
          f"{med('latency_4KiB_us', 'cycle_default_ms'):g} ms cycle, "
          f"{med('latency_4KiB_us', 'cycle_0ms'):.1f} us at cycle 0")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
