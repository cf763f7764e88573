"""Every collective against its closed form (computed locally from every rank's input), for
every dtype it accepts, in place and out of place, sync and async, on the global set and on a
process set."""
import functools

import pytest
import torch

import tessera.torch as hvd
from conftest import ALL_DTYPES, FLOAT_DTYPES, rank_tensor

SHAPE = (3, 5)
REDUCE = {
    hvd.Sum: lambda ts: functools.reduce(torch.add, ts),
    hvd.Min: lambda ts: functools.reduce(torch.minimum, ts),
    hvd.Max: lambda ts: functools.reduce(torch.maximum, ts),
    hvd.Product: lambda ts: functools.reduce(torch.mul, ts),
}


def expected(op, dtype, ranks, salt=0):
    # Computed in float64 (exact for these small integers), then cast like the result.
    inputs = [rank_tensor(r, SHAPE, torch.float64, salt) for r in ranks]
    if op == hvd.Average:
        return (REDUCE[hvd.Sum](inputs) / len(ranks)).to(dtype)
    return REDUCE[op](inputs).to(dtype)


def same(got, want, op):
    """Exact, except an average: the engine multiplies the sum by 1/n, which may round one ulp
    away from sum/n."""
    if op != hvd.Average:
        return got.dtype == want.dtype and torch.equal(got, want)
    eps = torch.finfo(want.dtype).eps
    return got.dtype == want.dtype and torch.allclose(got.double(), want.double(), rtol=eps,
                                                      atol=0)


def ops_for(dtype):
    return [hvd.Sum, hvd.Min, hvd.Max, hvd.Product] + ([hvd.Average] if dtype.is_floating_point
                                                       else [])


@pytest.fixture(params=["global", "subset"])
def process_set(request):
    if request.param == "global":
        yield hvd.global_process_set
        return
    # The first size-1 ranks (every rank at size 1); ranks outside it sit this test out.
    n = hvd.size()
    ps = hvd.add_process_set(list(range(max(1, n - 1))))
    yield ps
    hvd.remove_process_set(ps)


def members(ps):
    return ps.ranks


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_allreduce_every_op_and_form(dtype, process_set):
    if not process_set.included():
        return
    me = hvd.rank()
    for op in ops_for(dtype):
        want = expected(op, dtype, members(process_set))
        tag = f"ar.{dtype}.{op}.{process_set.process_set_id}"
        x = rank_tensor(me, SHAPE, dtype)
        got = hvd.allreduce(x, name=tag + ".sync", op=op, process_set=process_set)
        assert same(got, want, op), (op, got, want)
        assert torch.equal(x, rank_tensor(me, SHAPE, dtype))  # out of place leaves the input
        h = hvd.allreduce_async(x, name=tag + ".async", op=op, process_set=process_set)
        assert same(hvd.synchronize(h), want, op)
        y = rank_tensor(me, SHAPE, dtype)
        assert hvd.allreduce_(y, name=tag + ".inplace", op=op, process_set=process_set) is y
        assert same(y, want, op)
        z = rank_tensor(me, SHAPE, dtype)
        h = hvd.allreduce_async_(z, name=tag + ".inplace.async", op=op, process_set=process_set)
        while not hvd.poll(h):
            pass
        assert hvd.synchronize(h) is z and same(z, want, op)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_allreduce_scale_factors_and_average_flag(dtype):
    me, n = hvd.rank(), hvd.size()
    x = rank_tensor(me, SHAPE, dtype)
    got = hvd.allreduce(x, name=f"ar.scale.{dtype}", op=hvd.Sum, prescale_factor=0.5,
                        postscale_factor=4.0)
    assert torch.equal(got, (expected(hvd.Sum, torch.float64, range(n)) * 2).to(dtype))
    # Horovod's deprecated average=False is a sum.
    got = hvd.allreduce(x, average=False, name=f"ar.avgflag.{dtype}")
    assert torch.equal(got, expected(hvd.Sum, dtype, range(n)))


def test_allreduce_non_contiguous_in_and_out_of_place():
    me, n = hvd.rank(), hvd.size()
    base = rank_tensor(me, (5, 3), torch.float32)
    t = base.t()  # non-contiguous view [3, 5]
    assert not t.is_contiguous()
    want = sum(rank_tensor(r, (5, 3), torch.float32) for r in range(n)).t()
    assert torch.equal(hvd.allreduce(t, op=hvd.Sum, name="ar.nc"), want)
    hvd.allreduce_(t, op=hvd.Sum, name="ar.nc.inplace")
    assert torch.equal(t, want) and torch.equal(base.t(), want)  # written through the view


def test_bool_reductions_are_logical():
    me, n = hvd.rank(), hvd.size()
    x = torch.tensor([me == 0, True, False, me % 2 == 1])
    any_ = hvd.allreduce(x, op=hvd.Sum, name="bool.or")
    all_ = hvd.allreduce(x, op=hvd.Min, name="bool.and")
    assert any_.dtype == torch.bool
    assert any_.tolist() == [True, True, False, n > 1]
    assert all_.tolist() == [n == 1, True, False, False]
    with pytest.raises(ValueError, match="Average is not defined on bool"):
        hvd.allreduce(x, name="bool.avg")


@pytest.mark.parametrize("dtype", ALL_DTYPES + [torch.bool])
def test_allgather_uneven_first_dimension(dtype, process_set):
    if not process_set.included():
        return
    me = hvd.rank()
    rows = lambda r: r + 1  # noqa: E731  rank r contributes r + 1 rows
    x = rank_tensor(me, (rows(me), 2), dtype)
    want = torch.cat([rank_tensor(r, (rows(r), 2), dtype) for r in members(process_set)])
    tag = f"ag.{dtype}.{process_set.process_set_id}"
    assert torch.equal(hvd.allgather(x, name=tag, process_set=process_set), want)
    h = hvd.allgather_async(x, name=tag + ".async", process_set=process_set)
    assert torch.equal(hvd.synchronize(h), want)
    two = hvd.grouped_allgather([x, x[:1]], name=tag + ".grouped", process_set=process_set)
    assert torch.equal(two[0], want)
    assert torch.equal(two[1], torch.cat([rank_tensor(r, (rows(r), 2), dtype)[:1]
                                          for r in members(process_set)]))


@pytest.mark.parametrize("dtype", ALL_DTYPES + [torch.bool])
def test_broadcast_from_every_root(dtype, process_set):
    if not process_set.included():
        return
    me = process_set.rank()
    for root in process_set.ranks:  # Horovod's root_rank: a rank of the whole job
        want = rank_tensor(root, SHAPE, dtype)
        x = rank_tensor(hvd.rank(), SHAPE, dtype)
        tag = f"bc.{dtype}.{root}.{process_set.process_set_id}"
        assert torch.equal(hvd.broadcast(x, root, name=tag, process_set=process_set), want)
        assert torch.equal(x, rank_tensor(hvd.rank(), SHAPE, dtype))
        assert torch.equal(hvd.synchronize(hvd.broadcast_async(x, root, name=tag + ".a",
                                                               process_set=process_set)), want)
        assert hvd.broadcast_(x, root, name=tag + ".i", process_set=process_set) is x
        assert torch.equal(x, want)
        y = rank_tensor(hvd.rank(), SHAPE, dtype)
        assert hvd.synchronize(hvd.broadcast_async_(y, root, name=tag + ".ia",
                                                    process_set=process_set)) is y
        assert torch.equal(y, want), me


def test_broadcast_root_outside_the_set_is_refused():
    with pytest.raises(ValueError, match="root rank 99 is not in process set 0"):
        hvd.broadcast(torch.ones(1), 99, name="bc.bad")
    with pytest.raises(ValueError, match="root rank -1 is not in process set 0"):
        hvd.broadcast_(torch.ones(1), -1, name="bc.bad2")
    # As Horovod's binding: a root_rank that is no int is a TypeError listing what is accepted,
    # raised on every rank (each refuses the name), and the next op works.
    with pytest.raises(TypeError, match="incompatible function arguments"):
        hvd.broadcast_(torch.ones(1), "0", name="bc.bad3")
    assert hvd.broadcast(torch.full([1], float(hvd.rank())), 0).item() == 0.0


@pytest.mark.parametrize("dtype", ALL_DTYPES + [torch.bool])
def test_alltoall_even_and_with_splits(dtype, process_set):
    if not process_set.included():
        return
    n, me = process_set.size(), process_set.rank()
    world = process_set.ranks
    # Even: rank i sends block j (2 rows, values 100*i + j) to rank j.
    blocks = lambda i: torch.cat([torch.full((2, 3), (10 * i + j) % 100)  # noqa: E731
                                  for j in range(n)]).to(dtype)
    # Horovod: without splits, alltoall returns the tensor alone; the async form's
    # synchronize() returns (tensor, received splits) either way.
    out = hvd.alltoall(blocks(me), name=f"a2a.{dtype}.{process_set.process_set_id}",
                       process_set=process_set)
    assert torch.equal(out, torch.cat([blocks(i)[2 * me:2 * me + 2] for i in range(n)]))
    out, splits = hvd.synchronize(hvd.alltoall_async(
        blocks(me), name=f"a2a.a.{dtype}.{process_set.process_set_id}", process_set=process_set))
    assert torch.equal(out, torch.cat([blocks(i)[2 * me:2 * me + 2] for i in range(n)]))
    assert splits.tolist() == [2] * n and splits.dtype == torch.int32
    # Uneven and asymmetric: rank i sends i + 2j + 1 rows to rank j (what a rank sends and what
    # it receives differ, so mixing up the two directions shows).
    rows = lambda i, j: i + 2 * j + 1  # noqa: E731
    send = lambda i: [rows(i, j) for j in range(n)]  # noqa: E731
    data = lambda i: torch.cat([torch.full((rows(i, j), 2), (world[i] * 10 + j) % 100)  # noqa
                                for j in range(n)]).to(dtype)
    h = hvd.alltoall_async(data(me), splits=torch.tensor(send(me), dtype=torch.int32),
                           name=f"a2a.v.{dtype}.{process_set.process_set_id}",
                           process_set=process_set)
    out, splits = hvd.synchronize(h)
    want = torch.cat([torch.full((rows(i, me), 2), (world[i] * 10 + me) % 100)
                      for i in range(n)]).to(dtype)
    assert torch.equal(out, want)
    assert splits.tolist() == [rows(i, me) for i in range(n)]


def test_alltoall_bad_splits_are_refused():
    with pytest.raises(ValueError, match="adding up to the first dimension"):
        hvd.alltoall(torch.ones(5), splits=[1] * hvd.size(), name="a2a.bad")


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_reducescatter_even_and_uneven(dtype, process_set):
    if not process_set.included():
        return
    n, me = process_set.size(), process_set.rank()
    for rows in (2 * n, 2 * n + 1 if n > 1 else 3):
        shape = (rows, 2)
        x = rank_tensor(hvd.rank(), shape, dtype)
        total = sum(rank_tensor(r, shape, torch.float64) for r in process_set.ranks)
        counts = [rows // n + (1 if r < rows % n else 0) for r in range(n)]
        start = sum(counts[:me])
        tag = f"rs.{dtype}.{rows}.{process_set.process_set_id}"
        got = hvd.reducescatter(x, name=tag, op=hvd.Sum, process_set=process_set)
        assert torch.equal(got, total[start:start + counts[me]].to(dtype))
        if dtype.is_floating_point:
            got = hvd.synchronize(hvd.reducescatter_async(x, name=tag + ".avg",
                                                          process_set=process_set))
            assert same(got, (total[start:start + counts[me]] / n).to(dtype), hvd.Average)
        a, b = hvd.grouped_reducescatter([x, x * 2], name=tag + ".g", op=hvd.Sum,
                                         process_set=process_set)
        assert torch.equal(a, total[start:start + counts[me]].to(dtype))
        assert torch.equal(b, (2 * total[start:start + counts[me]]).to(dtype))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_grouped_allreduce_all_forms(dtype):
    me, n = hvd.rank(), hvd.size()
    xs = [rank_tensor(me, SHAPE, dtype, salt=s) for s in range(3)]
    wants = [REDUCE[hvd.Sum]([rank_tensor(r, SHAPE, torch.float64, s) for r in range(n)])
             .to(dtype) for s in range(3)]
    tag = f"gar.{dtype}"
    for got in (hvd.grouped_allreduce(xs, name=tag, op=hvd.Sum),
                hvd.synchronize(hvd.grouped_allreduce_async(xs, name=tag + ".a", op=hvd.Sum))):
        assert all(torch.equal(g, w) for g, w in zip(got, wants))
    assert all(torch.equal(x, rank_tensor(me, SHAPE, dtype, s)) for s, x in enumerate(xs))
    outs = hvd.grouped_allreduce_(xs, name=tag + ".i", op=hvd.Sum)
    assert all(o is x for o, x in zip(outs, xs))
    assert all(torch.equal(x, w) for x, w in zip(xs, wants))
    ys = [rank_tensor(me, SHAPE, dtype, salt=s) for s in range(3)]
    hvd.synchronize(hvd.grouped_allreduce_async_(ys, name=tag + ".ia", op=hvd.Sum))
    assert all(torch.equal(y, w) for y, w in zip(ys, wants))


def test_unsupported_dtype_names_the_accepted_ones():
    for bad in (torch.complex64, torch.quint8 if hasattr(torch, "quint8") else torch.complex128):
        if bad == torch.quint8:
            continue
        with pytest.raises(ValueError, match="accepted: uint8, int8, int16"):
            hvd.allreduce(torch.zeros(2, dtype=bad), name="bad.dtype")


def test_adasum_on_integers_is_refused_clearly():
    with pytest.raises(ValueError, match="adasum combines floating-point tensors"):
        hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Adasum, name="adasum")


def test_barrier_join_and_objects():
    hvd.barrier()
    last = hvd.join()
    assert 0 <= last < hvd.size()
    obj = {"rank": hvd.rank(), "list": [1, 2, 3]}
    assert hvd.broadcast_object(obj if hvd.rank() == 0 else None, root_rank=0) == \
        {"rank": 0, "list": [1, 2, 3]}
    gathered = hvd.allgather_object(("r", hvd.rank()))
    assert gathered == [("r", r) for r in range(hvd.size())]


def test_duplicate_name_in_flight_is_a_value_error():
    x = torch.ones(4)
    # Rank 0 holds a name in flight (the others have not sent theirs yet) and reuses it.
    if hvd.size() == 1:
        return
    if hvd.rank() == 0:
        h = hvd.allreduce_async(x, name="dup.name")
        with pytest.raises(ValueError, match="still in flight"):
            hvd.allreduce_async(x, name="dup.name")
        hvd.barrier()
        hvd.synchronize(h)
    else:
        hvd.barrier()
        hvd.allreduce(x, name="dup.name")


def test_allreduce_with_compression_travels_narrow_and_comes_back_in_its_dtype():
    me, n = hvd.rank(), hvd.size()
    x = torch.full((4,), 1.0 + me, dtype=torch.float64)
    for compression in (hvd.Compression.fp16, hvd.Compression.bf16):
        got = hvd.allreduce(x, op=hvd.Sum, compression=compression,
                            name=f"compressed.{compression.__name__}")
        assert got.dtype == torch.float64
        assert torch.equal(got, torch.full((4,), float(sum(1 + r for r in range(n))),
                                           dtype=torch.float64))
    # An integer tensor is sent as it is.
    assert hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Sum,
                         compression=hvd.Compression.fp16, name="compressed.int").dtype == \
        torch.int32


def test_timeline_records_the_named_collectives(tmp_path_factory):
    path = tmp_path_factory.mktemp("timeline") / f"rank{hvd.rank()}.json"
    hvd.start_timeline(str(path))
    hvd.allreduce(torch.ones(8), name="timeline.visible")
    hvd.stop_timeline()
    assert "timeline.visible" in path.read_text()


@pytest.mark.skipif(not (hvd.cuda_built() and torch.cuda.is_available()),
                    reason="needs tessera built with CUDA against a CUDA torch, and a GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64])
def test_cuda_tensors_on_the_current_stream(dtype):
    """CUDA tensors: written on a side stream made current, reduced after that work (the
    binding's readiness event), and read back on it."""
    ranks = list(range(hvd.size()))
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = rank_tensor(hvd.rank(), SHAPE, dtype).cuda(non_blocking=True) * 1
        got = hvd.allreduce(x, name=f"cuda.sum.{dtype}", op=hvd.Sum)
        gathered = hvd.allgather(x, name=f"cuda.ag.{dtype}")
        hvd.allreduce_(x, name=f"cuda.sum_.{dtype}", op=hvd.Sum)
    assert got.device == x.device and gathered.device == x.device
    want = expected(hvd.Sum, dtype, ranks)
    assert torch.equal(got.cpu(), want) and torch.equal(x.cpu(), want)
    assert torch.equal(gathered.cpu(), torch.cat([rank_tensor(r, SHAPE, dtype) for r in ranks]))


def test_tensors_on_neither_cpu_nor_cuda_are_refused_saying_what_is_taken():
    with pytest.raises(ValueError, match="CPU and CUDA"):
        hvd.allreduce(torch.ones(2, device="meta"), name="meta")
