#!/usr/bin/env python3
"""Medians over several `tessera bench ... --json FILE` runs of the same command.

Usage: bench_median.py RUN1.json RUN2.json ...   (prints one table, nccl-tests columns)

For each (size, algorithm) it takes the median time over the runs, recomputes algbw/busbw from
it, and prints the ratio to the median time of `mpi` at that size (>1: faster than MPI), plus
the best tessera algorithm at each size and how far `auto` is behind it.
"""
import json
import statistics
import sys
from collections import defaultdict


def main(paths):
    runs = [json.load(open(p)) for p in paths]
    first = runs[0]
    n = first["ranks"]
    coll = first["collective"]
    factor = {"allreduce": 2 * (n - 1) / n, "broadcast": 1.0}.get(coll, (n - 1) / n)
    times = defaultdict(list)
    counts = {}
    order = []
    for run in runs:
        for row in run["rows"]:
            key = (row["size"], row["algorithm"])
            if key not in counts:
                order.append(key)
            times[key].append(row["time_us"])
            counts[key] = row["count"]
    print(f"# {coll}, {n} ranks, {first['nodes']} node(s), {first['dtype']} {first['op']}: "
          f"median of {len(runs)} runs")
    copies = [r["memcpy_gbps"] for r in runs if "memcpy_gbps" in r]
    if copies:
        print(f"# memcpy while every rank copies: {statistics.median(copies):.2f} GB/s per rank")
    print(f"#{'size':>11} {'algorithm':>13} {'time(us)':>11} {'busbw':>8} {'vs_mpi':>7}")
    best_by_size = {}
    for size, algo in order:
        t = statistics.median(times[(size, algo)])
        mpi = statistics.median(times[(size, "mpi")]) if (size, "mpi") in times else float("nan")
        moved = size
        bus = moved / t / 1e3 * factor
        print(f" {size:>11} {algo:>13} {t:>11.2f} {bus:>8.3f} {mpi / t:>6.2f}x")
        if algo not in ("mpi", "auto"):
            if size not in best_by_size or t < best_by_size[size][1]:
                best_by_size[size] = (algo, t)
    print("# size: best tessera algorithm, its speed-up over mpi, auto behind best")
    for size, (algo, t) in sorted(best_by_size.items()):
        mpi = statistics.median(times[(size, "mpi")])
        line = f"# {size:>11}: {algo:>13} {mpi / t:>6.2f}x"
        if (size, "auto") in times:
            a = statistics.median(times[(size, "auto")])
            line += f"   auto {100 * (a / t - 1):+6.1f}%"
        print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
