#!/usr/bin/env python3
"""Writes cases.json: the conformance cases that both front ends run (tests/mpi/
test_conformance.cc through include/tessera/torch.h, tests/python/test_conformance.py through
tessera.torch), with the results Horovod's documentation gives, worked out here once.

    python3 tests/conformance/make_cases.py > tests/conformance/cases.json

Every case's input on global rank r, member m (groups), is the [rows, cols] tensor with
element i (row-major) = a + b*r + c*i + 10*m, in each dtype the case lists. For each world
size (1 to 4) a case gives the set (default: every rank), each rank's rows, the alltoall
splits or the broadcast root, and per rank of the set, per member, the expected 2-D result.
The rules, from Horovod's documentation and docs/python.md:
  - Sum/Min/Max/Product elementwise over the set; Average is Sum times 1/size.
  - prescale multiplies each rank's input, postscale the reduced result. Integer tensors
    scale in double and truncate toward zero (prescale per rank; then the sum times
    postscale/size for Average), as Horovod's on the CPU.
  - allgather concatenates the set's tensors along dimension 0, in set order.
  - broadcast's root is a rank of the whole job, also on a process set.
  - alltoall sends rows splits[j] to rank j of the set, received in set order.
  - reducescatter gives rank j block j of dimension 0, the first rows % size blocks one row
    longer, reduced as by allreduce.
"""
import json
import math

INTS = ["uint8", "int8", "int16", "int32", "int64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]


def value(case, r, m, i):
    a, b, c = case["value"]
    return a + b * r + c * i + 10 * m


def tensor(case, r, m, rows):
    cols = case["cols"]
    return [[value(case, r, m, row * cols + k) for k in range(cols)] for row in range(rows)]


def trunc(x):
    return float(math.trunc(x))


def reduce_rows(case, inputs, integer):
    """Elementwise reduction of the set's equal-shaped inputs, as the case's op and factors."""
    op, pre, post = case["reduce"], case.get("prescale", 1.0), case.get("postscale", 1.0)
    scaled = [[[trunc(v * pre) if integer else v * pre for v in row] for row in t]
              for t in inputs]
    out = []
    for rows in zip(*scaled):
        out_row = []
        for vals in zip(*rows):
            if op in ("Sum", "Average"):
                v = sum(vals)
            elif op == "Min":
                v = min(vals)
            elif op == "Max":
                v = max(vals)
            else:
                v = math.prod(vals)
            factor = post / len(vals) if op == "Average" else post
            out_row.append((trunc(v * factor) if integer else v * factor) if factor != 1 else v)
        out.append(out_row)
    return out


def blocks(rows, n):
    """Horovod's reducescatter split of `rows` over n ranks: (start, length) of each block."""
    out, start = [], 0
    for j in range(n):
        length = rows // n + (1 if j < rows % n else 0)
        out.append((start, length))
        start += length
    return out


def expect(case, size, integer):
    s = case["sizes"][str(size)]
    members = case.get("members", 1)
    ranks = s.get("set", list(range(size)))
    rows = s["rows"]
    kind = case["op"].replace("grouped_", "")
    result = []
    for q, r in enumerate(ranks):
        per_member = []
        for m in range(members):
            ins = [tensor(case, g, m, rows[g]) for g in ranks]
            if kind == "allreduce":
                per_member.append(reduce_rows(case, ins, integer))
            elif kind == "allgather":
                per_member.append([row for t in ins for row in t])
            elif kind == "broadcast":
                per_member.append(ins[ranks.index(s["root"])])
            elif kind == "alltoall":
                got = []
                for src, t in enumerate(ins):
                    first = sum(s["splits"][ranks[src]][:q])
                    got += t[first:first + s["splits"][ranks[src]][q]]
                per_member.append(got)
            elif kind == "reducescatter":
                start, length = blocks(rows[r], len(ranks))[q]
                per_member.append(reduce_rows(case, ins, integer)[start:start + length])
        result.append(per_member)
    return result


def check_ranges(case, s):
    """Every input and result of the case fits each of its integer dtypes."""
    values = [value(case, r, m, i) for r, rows in enumerate(s["rows"])
              for m in range(case.get("members", 1)) for i in range(rows * case["cols"])]
    values += [v for rank in s["expect"] for t in rank for row in t for v in row]
    for d in case["dtypes"]:
        low, high = {"uint8": (0, 255), "int8": (-128, 127)}.get(d, (-2 ** 15, 2 ** 15 - 1))
        assert all(low <= v <= high for v in values), (case["id"], d)


def even(rows):
    return {str(n): {"rows": [rows] * n} for n in (1, 2, 3, 4)}


CASES = [
    # allreduce, every op; integer and floating averages differ (truncation)
    {"id": "allreduce.sum", "op": "allreduce", "reduce": "Sum", "dtypes": INTS + FLOATS,
     "value": [1, 2, 1], "cols": 3, "sizes": even(2)},
    {"id": "allreduce.average.float", "op": "allreduce", "reduce": "Average", "dtypes": FLOATS,
     "value": [1, 3, 1], "cols": 2, "sizes": even(2)},
    {"id": "allreduce.average.int_truncates", "op": "allreduce", "reduce": "Average",
     "dtypes": ["int8", "int16", "int32", "int64"], "value": [-7, 5, 3], "cols": 3,
     "sizes": even(2)},
    {"id": "allreduce.min", "op": "allreduce", "reduce": "Min", "dtypes": INTS + FLOATS,
     "value": [9, -2, 1], "cols": 2, "sizes": even(2)},
    {"id": "allreduce.max", "op": "allreduce", "reduce": "Max", "dtypes": INTS + FLOATS,
     "value": [3, 2, -1], "cols": 1, "sizes": even(3)},
    {"id": "allreduce.product", "op": "allreduce", "reduce": "Product", "dtypes": INTS + FLOATS,
     "value": [1, 1, 0], "cols": 2, "sizes": even(1)},
    {"id": "allreduce.scaled.float", "op": "allreduce", "reduce": "Sum", "dtypes": FLOATS,
     "prescale": 0.5, "postscale": 3.0, "value": [2, 2, 2], "cols": 2, "sizes": even(2)},
    {"id": "allreduce.scaled.int_truncates", "op": "allreduce", "reduce": "Average",
     "dtypes": ["int32", "int64", "int16"], "prescale": 0.5, "postscale": 3.0,
     "value": [3, 1, 1], "cols": 3, "sizes": even(1)},
    {"id": "allreduce.average.set", "op": "allreduce", "reduce": "Average", "dtypes": FLOATS,
     "value": [0, 4, 1], "cols": 2,
     "sizes": {"2": {"rows": [1, 1], "set": [1]}, "3": {"rows": [1, 1, 1], "set": [0, 2]},
               "4": {"rows": [1, 1, 1, 1], "set": [1, 2, 3]}}},
    {"id": "grouped_allreduce.sum", "op": "grouped_allreduce", "reduce": "Sum", "members": 3,
     "dtypes": ["int32", "float32", "float64"], "value": [1, 1, 1], "cols": 2, "sizes": even(2)},
    {"id": "grouped_allreduce.average.set", "op": "grouped_allreduce", "reduce": "Average",
     "members": 2, "dtypes": ["float32", "float64"], "value": [1, 2, 1], "cols": 3,
     "sizes": {"3": {"rows": [1, 1, 1], "set": [1, 2]}, "4": {"rows": [2] * 4, "set": [0, 3]}}},
    # allgather: ranks may differ in dimension 0
    {"id": "allgather.uneven", "op": "allgather", "dtypes": INTS + FLOATS, "value": [0, 20, 1],
     "cols": 2, "sizes": {str(n): {"rows": [r + 1 for r in range(n)]} for n in (1, 2, 3, 4)}},
    {"id": "allgather.set", "op": "allgather", "dtypes": ["int64", "float32"],
     "value": [5, 10, 1], "cols": 1,
     "sizes": {"2": {"rows": [2, 1], "set": [0]}, "3": {"rows": [3, 1, 2], "set": [0, 2]},
               "4": {"rows": [1, 2, 3, 4], "set": [1, 3]}}},
    {"id": "grouped_allgather.uneven", "op": "grouped_allgather", "members": 2,
     "dtypes": ["int32", "float64"], "value": [1, 10, 1], "cols": 3,
     "sizes": {str(n): {"rows": [(r % 2) + 1 for r in range(n)]} for n in (1, 2, 3, 4)}},
    # broadcast: the root is a rank of the whole job, also on a set
    {"id": "broadcast.last", "op": "broadcast", "dtypes": INTS + FLOATS, "value": [1, 7, 1],
     "cols": 3, "sizes": {str(n): {"rows": [2] * n, "root": n - 1} for n in (1, 2, 3, 4)}},
    {"id": "broadcast.set_global_root", "op": "broadcast", "dtypes": ["int32", "float32"],
     "value": [2, 5, 1], "cols": 2,
     "sizes": {"2": {"rows": [1, 1], "set": [1], "root": 1},
               "3": {"rows": [1, 1, 1], "set": [1, 2], "root": 2},
               "4": {"rows": [1] * 4, "set": [0, 2, 3], "root": 2}}},
    # alltoall with splits (uneven) and without (even blocks)
    {"id": "alltoall.splits", "op": "alltoall", "dtypes": INTS + FLOATS, "value": [0, 30, 1],
     "cols": 2,
     "sizes": {str(n): {"rows": [sum((r + j) % 3 for j in range(n)) for r in range(n)],
                        "splits": [[(r + j) % 3 for j in range(n)] for r in range(n)]}
               for n in (1, 2, 3, 4)}},
    {"id": "alltoall.even", "op": "alltoall", "dtypes": ["int64", "float32"],
     "value": [0, 100, 1], "cols": 1,
     "sizes": {str(n): {"rows": [2 * n] * n, "splits": [[2] * n] * n} for n in (1, 2, 3, 4)},
     "pass_splits": False},
    {"id": "alltoall.set", "op": "alltoall", "dtypes": ["int32", "float64"], "value": [1, 10, 1],
     "cols": 1,
     "sizes": {"3": {"rows": [3, 0, 1], "set": [0, 2], "splits": [[1, 2], [], [1, 0]]},
               "4": {"rows": [0, 2, 0, 2], "set": [1, 3], "splits": [[], [0, 2], [], [1, 1]]}}},
    # reducescatter: even and uneven first dimensions, Sum and Average, scale factors
    {"id": "reducescatter.sum.uneven", "op": "reducescatter", "reduce": "Sum",
     "dtypes": INTS + FLOATS, "value": [1, 1, 1], "cols": 2, "sizes": even(5)},
    {"id": "reducescatter.average.float", "op": "reducescatter", "reduce": "Average",
     "dtypes": FLOATS, "value": [0, 3, 1], "cols": 1, "sizes": even(4)},
    {"id": "reducescatter.average.int_scaled", "op": "reducescatter", "reduce": "Average",
     "dtypes": ["int32", "int64"], "prescale": 2.0, "postscale": 0.5, "value": [-5, 3, 2],
     "cols": 2, "sizes": even(3)},
    {"id": "grouped_reducescatter.sum", "op": "grouped_reducescatter", "reduce": "Sum",
     "members": 2, "dtypes": ["int32", "float32"], "value": [1, 2, 1], "cols": 1,
     "sizes": even(4)},
    {"id": "reducescatter.set", "op": "reducescatter", "reduce": "Sum",
     "dtypes": ["float32", "int64"], "value": [1, 1, 1], "cols": 1,
     "sizes": {"3": {"rows": [3] * 3, "set": [0, 1]}, "4": {"rows": [3] * 4, "set": [1, 2, 3]}}},
]


def main():
    out = []
    for case in CASES:
        case = dict(case)
        integer = case["dtypes"][0] in INTS
        for size, s in case["sizes"].items():
            s["expect"] = expect(case, int(size), integer)
            check_ranges(case, s)
            # One expectation for every dtype listed: integer and floating results agree.
            assert s["expect"] == expect(case, int(size), not integer) or all(
                (d in INTS) == integer for d in case["dtypes"]), case["id"]
        out.append(case)
    print(json.dumps({"doc": __doc__.strip().splitlines()[0], "cases": out}, indent=1))


if __name__ == "__main__":
    main()
