"""The conformance cases of tests/conformance/cases.json through tessera.torch: every case ×
dtype × each form Horovod's API offers (synchronous, asynchronous, in place; named and
unnamed) on its process set, against the results the case gives. tests/mpi/
test_conformance.cc runs the same file through the C++ front end."""
import json
import os

import pytest
import torch

import tessera.torch as hvd

CASES = json.load(open(os.path.join(os.path.dirname(__file__), "..", "conformance",
                                    "cases.json")))["cases"]
DTYPES = {"uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
          "int64": torch.int64, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float32": torch.float32, "float64": torch.float64}
OPS = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max,
       "Product": hvd.Product}


def make_input(case, r, m, rows, dtype):
    """Element i of global rank r's member m: a + b*r + c*i + 10*m."""
    a, b, c = case["value"]
    i = torch.arange(rows * case["cols"], dtype=torch.float64).view(rows, case["cols"])
    return (a + b * r + 10 * m + c * i).to(dtype)


def check(got, want_rows, cols, dtype, where):
    want = torch.tensor(want_rows, dtype=torch.float64).view(len(want_rows), cols)
    assert got.dtype == dtype, where
    assert tuple(got.shape) == tuple(want.shape), where
    tol = {torch.float16: 1e-2, torch.bfloat16: 1e-2, torch.float32: 1e-6}.get(dtype, 1e-12)
    assert torch.allclose(got.double(), want, rtol=tol, atol=tol), (where, got, want)


def forms(case, s, ps, me):
    """The forms of the case's op: name -> function of the inputs returning the results."""
    op, kind = case["op"], OPS.get(case.get("reduce"))
    f = dict(prescale_factor=case.get("prescale", 1.0),
             postscale_factor=case.get("postscale", 1.0), process_set=ps)
    if op == "allreduce":
        return {"sync": lambda t: [hvd.allreduce(t[0], op=kind, **f)],
                "named": lambda t: [hvd.allreduce(t[0], name=f"{case['id']}.n", op=kind, **f)],
                "async": lambda t: [hvd.synchronize(hvd.allreduce_async(t[0], op=kind, **f))],
                "sync_": lambda t: [hvd.allreduce_(t[0], op=kind, **f)],
                "async_": lambda t: [hvd.synchronize(hvd.allreduce_async_(t[0], op=kind, **f))]}
    if op == "grouped_allreduce":
        return {"sync": lambda t: hvd.grouped_allreduce(t, op=kind, **f),
                "async": lambda t: hvd.synchronize(hvd.grouped_allreduce_async(t, op=kind, **f)),
                "sync_": lambda t: hvd.grouped_allreduce_(t, op=kind, **f),
                "async_": lambda t: hvd.synchronize(
                    hvd.grouped_allreduce_async_(t, op=kind, **f))}
    if op == "allgather":
        return {"sync": lambda t: [hvd.allgather(t[0], process_set=ps)],
                "async": lambda t: [hvd.synchronize(hvd.allgather_async(t[0], process_set=ps))]}
    if op == "grouped_allgather":
        return {"sync": lambda t: hvd.grouped_allgather(t, process_set=ps),
                "async": lambda t: hvd.synchronize(hvd.grouped_allgather_async(t, process_set=ps))}
    if op == "broadcast":
        root = s["root"]
        return {"sync": lambda t: [hvd.broadcast(t[0], root, process_set=ps)],
                "async": lambda t: [hvd.synchronize(hvd.broadcast_async(t[0], root,
                                                                        process_set=ps))],
                "sync_": lambda t: [hvd.broadcast_(t[0], root, process_set=ps)],
                "async_": lambda t: [hvd.synchronize(hvd.broadcast_async_(t[0], root,
                                                                          process_set=ps))]}
    if op == "alltoall":
        return alltoall_forms(case, s, ps, me)
    g = dict(op=kind, **f)
    if op == "reducescatter":
        return {"sync": lambda t: [hvd.reducescatter(t[0], **g)],
                "async": lambda t: [hvd.synchronize(hvd.reducescatter_async(t[0], **g))]}
    assert op == "grouped_reducescatter", op
    return {"sync": lambda t: hvd.grouped_reducescatter(t, **g),
            "async": lambda t: hvd.synchronize(hvd.grouped_reducescatter_async(t, **g))}


def alltoall_forms(case, s, ps, me):
    """Horovod's returns: the tensor alone without splits, (tensor, received splits) with them;
    alltoall_async's synchronize() gives the pair either way. The received splits are checked
    here: what each rank of the set sent this one."""
    ranks = s.get("set", list(range(len(s["rows"]))))
    q = ranks.index(me)
    want = [s["splits"][src][q] for src in ranks]
    if not case.get("pass_splits", True):
        def sync(t):
            return [hvd.alltoall(t[0], process_set=ps)]

        def unsplit_async(t):
            out, received = hvd.synchronize(hvd.alltoall_async(t[0], process_set=ps))
            assert received.tolist() == want
            return [out]
        return {"sync": sync, "async": unsplit_async}
    splits = torch.tensor(s["splits"][me], dtype=torch.int64)

    def split_sync(t):
        out, received = hvd.alltoall(t[0], splits=splits, process_set=ps)
        assert received.tolist() == want and received.dtype == torch.int64
        return [out]

    def split_async(t):
        out, received = hvd.synchronize(hvd.alltoall_async(t[0], splits=s["splits"][me],
                                                           process_set=ps))
        assert received.tolist() == want and received.dtype == torch.int32
        return [out]
    return {"sync": split_sync, "async": split_async}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case_through_the_python_front_end(case):
    n, me = hvd.size(), hvd.rank()
    s = case["sizes"].get(str(n))
    if s is None:
        pytest.skip(f"{case['id']} has no expectation at {n} ranks")
    ps = hvd.global_process_set if "set" not in s else hvd.add_process_set(s["set"])
    try:
        if me not in s.get("set", range(n)):
            return
        q = s.get("set", list(range(n))).index(me)
        for dtype_name in case["dtypes"]:
            dtype = DTYPES[dtype_name]
            for form, run in forms(case, s, ps, me).items():
                ins = [make_input(case, me, m, s["rows"][me], dtype)
                       for m in range(case.get("members", 1))]
                outs = run(ins)
                assert len(outs) == len(ins)
                for m, out in enumerate(outs):
                    check(out, s["expect"][q][m], case["cols"], dtype,
                          f"{case['id']} {dtype_name} {form} member {m} rank {me} of {n}")
    finally:
        if ps is not hvd.global_process_set:
            hvd.remove_process_set(ps)
