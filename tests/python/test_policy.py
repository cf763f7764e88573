"""Horovod's policy through the Python front end (the same rules as tests/mpi/
test_horovod_policy.cc checks from C++): automatic names per kind and process set, a rank that
refuses its arguments failing the op on every rank within 5 s, the engine going on after every
kind of failure, integer averages and scale factors as Horovod's, the broadcast root as a rank
of the whole job, alltoall's return, reducescatter's gradient and grouped_allgather's autograd.
"""
import time

import pytest
import torch

import tessera.torch as hvd


def every_kind_works():
    """One unnamed op of every kind, against its closed form."""
    n, me = hvd.size(), hvd.rank()
    one = torch.ones(n, 2)
    assert torch.equal(hvd.allreduce(one, op=hvd.Sum), one * n)
    assert torch.equal(hvd.allreduce_(one.clone(), op=hvd.Sum), one * n)
    assert hvd.allgather(torch.tensor([me])).sum().item() == n * (n - 1) // 2
    assert torch.equal(hvd.broadcast(torch.full((3,), me), 0), torch.zeros(3, dtype=torch.long))
    assert torch.equal(hvd.alltoall(torch.full((n,), me)), torch.arange(n))
    assert torch.equal(hvd.reducescatter(one, op=hvd.Sum), torch.full((1, 2), float(n)))
    assert torch.equal(hvd.grouped_allreduce([one, 2 * one], op=hvd.Sum)[1], 2 * one * n)
    assert torch.equal(hvd.grouped_allgather([torch.tensor([me])])[0], torch.arange(n))
    hvd.barrier()


def fails_everywhere_then_works(call, *fragments):
    # The rank that refused raises its own ValueError; the others HorovodInternalError.
    start = time.monotonic()
    with pytest.raises((hvd.HorovodInternalError, ValueError)) as e:
        call()
    assert time.monotonic() - start < 5.0
    for f in fragments:
        assert f in str(e.value), str(e.value)
    every_kind_works()


@pytest.fixture
def two_ranks():
    # Evaluated after the session's init (a skipif string would run before it).
    if hvd.size() < 2:
        pytest.skip("needs 2 ranks")


needs2 = pytest.mark.usefixtures("two_ranks")


@needs2
def test_a_rank_raising_locally_fails_the_others_and_names_stay_in_step():
    last = hvd.size() - 1
    # The last rank's tensor is a string, refused by Python's checks; the others enqueue.
    def call():
        hvd.allreduce("not a tensor" if hvd.rank() == last else torch.ones(2), op=hvd.Sum)
    fragments = () if hvd.rank() == last else (f"rank {last} refused", "allreduce.set0.noname.")
    fails_everywhere_then_works(call, *fragments)
    # The same through the core's own checks (a bool tensor averaged), and asynchronously.
    def call_async():
        t = torch.ones(2, dtype=torch.bool) if hvd.rank() == last else torch.ones(2)
        hvd.synchronize(hvd.allreduce_async(t))
    fails_everywhere_then_works(call_async)


@needs2
def test_every_kind_of_mismatch_leaves_the_engine_working():
    zero = hvd.rank() == 0
    fails_everywhere_then_works(lambda: hvd.allreduce(torch.ones(3 if zero else 4)), "shape")
    fails_everywhere_then_works(
        lambda: hvd.allreduce(torch.ones(2, dtype=torch.float32 if zero else torch.float64)),
        "dtype")
    fails_everywhere_then_works(
        lambda: hvd.allreduce(torch.ones(2), op=hvd.Sum if zero else hvd.Max), "reduce op")
    fails_everywhere_then_works(lambda: hvd.broadcast(torch.ones(2), 0 if zero else 1), "root")
    fails_everywhere_then_works(
        lambda: hvd.allgather(torch.ones(2) if zero else torch.ones(2, dtype=torch.int32)),
        "dtype")
    # A grouped op whose last member disagrees, and an alltoall whose splits are bad on one rank.
    fails_everywhere_then_works(
        lambda: hvd.grouped_allreduce([torch.ones(2), torch.ones(2 if zero else 3)]), "shape")
    fails_everywhere_then_works(
        lambda: hvd.alltoall(torch.ones(hvd.size()), splits=[1] * hvd.size() if zero else [9]),
        "splits" if not zero else "refused")


def test_a_duplicate_name_in_flight_is_refused_and_the_first_completes():
    a = torch.ones(2)
    first = hvd.allreduce_async(a, name="dup", op=hvd.Sum)
    try:  # only fails while the first is in flight
        hvd.synchronize(hvd.allreduce_async(a, name="dup", op=hvd.Sum))
    except ValueError as e:
        assert "still in flight" in str(e)
    assert torch.equal(hvd.synchronize(first), a * hvd.size())
    every_kind_works()


@needs2
def test_a_subset_op_then_a_world_op_unnamed_both_complete():
    # The divergence this fixes: counted per kind only, the world op's automatic name differed
    # between the set's members and the others.
    n = hvd.size()
    subset = hvd.add_process_set(list(range(n - 1)))
    try:
        if subset.included():
            assert hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=subset).item() == n - 1
            hvd.allgather(torch.ones(1), process_set=subset)
        assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == n
        assert hvd.allgather(torch.ones(1)).shape == (n,)
    finally:
        hvd.remove_process_set(subset)


def horovod_scale(values, factor):
    """Horovod's integer scaling on the CPU: in double, truncated toward zero."""
    return [int(v * factor) for v in values]


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.int8])
def test_integer_average_and_scale_factors_are_horovods(dtype):
    n, me = hvd.size(), hvd.rank()
    base = [5, 3, 7, 1] if dtype == torch.uint8 else [5, -5, 7, 1]
    x = torch.tensor([b * (me + 1) for b in base], dtype=dtype)
    total = [b * n * (n + 1) // 2 for b in base]
    assert hvd.allreduce(x).tolist() == horovod_scale(total, 1.0 / n)
    scaled = [sum(int(b * (r + 1) * 0.5) for r in range(n)) for b in base]
    assert hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5,
                         postscale_factor=3.0).tolist() == horovod_scale(scaled, 3.0)
    rows = torch.full((2 * n,), 3 * (me + 1), dtype=dtype)
    got = hvd.reducescatter(rows)
    assert got.tolist() == horovod_scale([3 * n * (n + 1) // 2] * 2, 1.0 / n)


@needs2
def test_broadcast_root_is_a_rank_of_the_whole_job_on_a_process_set():
    n = hvd.size()
    rest = hvd.add_process_set(list(range(1, n)))
    try:
        if rest.included():
            got = hvd.broadcast(torch.full((2,), hvd.rank()), 1, process_set=rest)
            assert got.tolist() == [1, 1]
            with pytest.raises(ValueError, match="root rank 0 is not in process set"):
                hvd.broadcast(torch.ones(2), 0, process_set=rest)
            # The gradient is the root's, by its rank in the job.
            x = torch.ones(2, dtype=torch.float64, requires_grad=True)
            hvd.broadcast(x, 1, process_set=rest).sum().backward()
            assert x.grad.tolist() == ([1.0, 1.0] if hvd.rank() == 1 else [0.0, 0.0])
    finally:
        hvd.remove_process_set(rest)


def test_alltoall_returns_what_horovod_returns():
    n, me = hvd.size(), hvd.rank()
    x = torch.arange(n) + 10 * me
    out = hvd.alltoall(x)
    assert isinstance(out, torch.Tensor) and out.tolist() == [10 * k + me for k in range(n)]
    out, received = hvd.alltoall(x, splits=torch.ones(n, dtype=torch.int64))
    assert out.tolist() == [10 * k + me for k in range(n)]
    assert received.tolist() == [1] * n and received.dtype == torch.int64
    out, received = hvd.synchronize(hvd.alltoall_async(x))
    assert received.dtype == torch.int32


def test_grouped_allgather_carries_autograd():
    n, me = hvd.size(), hvd.rank()
    a = torch.ones(me + 1, 2, dtype=torch.float64, requires_grad=True)
    b = torch.ones(1, dtype=torch.float64, requires_grad=True)
    ga, gb = hvd.grouped_allgather([a, b])
    assert ga.requires_grad and gb.requires_grad
    rows = n * (n + 1) // 2
    (ga * (me + 1)).sum().backward(retain_graph=True)
    (gb * 2).sum().backward()
    # Horovod's gradient: averaged over the ranks, this rank's rows.
    mean = sum(r + 1 for r in range(n)) / n
    assert torch.allclose(a.grad, torch.full((me + 1, 2), mean, dtype=torch.float64))
    assert torch.allclose(b.grad, torch.full((1,), 2.0, dtype=torch.float64))
    assert ga.shape == (rows, 2)


def test_grouped_reducescatter_gradient_is_horovods():
    n, me = hvd.size(), hvd.rank()
    for op, factor in ((hvd.Sum, float(n)), (hvd.Average, 1.0)):
        xs = [torch.ones(2 * n, 2, dtype=torch.float64, requires_grad=True) for _ in range(2)]
        ys = hvd.grouped_reducescatter(xs, op=op)
        (ys[0] * (me + 1) + ys[1] * 3).sum().backward()
        want0 = torch.cat([torch.full((2, 2), r + 1.0, dtype=torch.float64) for r in range(n)])
        assert torch.allclose(xs[0].grad, want0 * factor), op
        assert torch.allclose(xs[1].grad, torch.full((2 * n, 2), 3.0 * factor,
                                                     dtype=torch.float64)), op


def adasum_reference(vectors):
    """Horovod's Adasum in double: neighbours first (step d pairs r and r + d)."""
    v = [x.double() for x in vectors]
    d = 1
    while d < len(v):
        for r in range(0, len(v) - d, 2 * d):
            a, b = v[r], v[r + d]
            dot, aa, bb = (a * b).sum(), (a * a).sum(), (b * b).sum()
            ca = 1 - dot / aa / 2 if aa >= 1e-8 else 1.0
            cb = 1 - dot / bb / 2 if bb >= 1e-8 else 1.0
            v[r] = ca * a + cb * b
        d *= 2
    return v[0]


def vector_of(rank, n=11, salt=0):
    return torch.sin(torch.arange(n, dtype=torch.float64) * 1.3 + 0.7 * rank + salt)


def test_adasum_allreduce_is_horovods():
    n, me = hvd.size(), hvd.rank()
    if n & (n - 1):  # Horovod's CPU Adasum: power-of-two ranks only
        with pytest.raises(ValueError, match="power-of-two"):
            hvd.allreduce(vector_of(me), op=hvd.Adasum)
        return
    want = adasum_reference([vector_of(r) for r in range(n)])
    assert torch.allclose(hvd.allreduce(vector_of(me), op=hvd.Adasum), want, rtol=0, atol=1e-13)
    e = torch.zeros(n, dtype=torch.float64)
    e[me] = 1.0  # orthogonal: the sum
    assert torch.allclose(hvd.allreduce(e, op=hvd.Adasum), torch.ones(n, dtype=torch.float64))
    # Differentiable: the gradient is the Adasum of the gradients (Horovod's).
    x = vector_of(me).requires_grad_()
    hvd.allreduce(x, op=hvd.Adasum).backward(vector_of(me, salt=5))
    assert torch.allclose(x.grad, adasum_reference([vector_of(r, salt=5) for r in range(n)]),
                          rtol=0, atol=1e-13)


def test_distributed_optimizer_with_adasum_combines_the_updates():
    n, me = hvd.size(), hvd.rank()
    if n & (n - 1):
        pytest.skip("Adasum needs a power-of-two number of ranks")
    torch.manual_seed(0)
    w0 = torch.randn(4, 3, dtype=torch.float64)
    model = torch.nn.Linear(3, 4, bias=False).double()
    with torch.no_grad():
        model.weight.copy_(w0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    x = lambda r: torch.full((2, 3), float(r + 1), dtype=torch.float64)  # noqa: E731
    for _ in range(2):
        opt.zero_grad()
        (model(x(me)) ** 2).sum().backward()
        opt.step()
    # The reference: every rank's SGD-with-momentum delta from the same weights, combined with
    # Adasum, applied; the momentum buffers stay each rank's own.
    w = w0.clone()
    bufs = [None] * n
    for _ in range(2):
        deltas = []
        for r in range(n):
            wr = w.clone().requires_grad_()
            (torch.nn.functional.linear(x(r), wr) ** 2).sum().backward()
            bufs[r] = wr.grad if bufs[r] is None else 0.9 * bufs[r] + wr.grad
            deltas.append(-0.1 * bufs[r])
        w = w + adasum_reference([d.reshape(-1) for d in deltas]).reshape(w.shape)
    assert torch.allclose(model.weight, w, rtol=0, atol=1e-12)
