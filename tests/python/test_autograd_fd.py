"""Every differentiable collective's gradient against central finite differences (f64).

The objective is the sum over ranks of <op(x), g_r> (g_r: rank r's upstream gradient). Horovod's
gradients are the objective's derivative up to a factor that is part of each op's convention,
so each case states its factor: analytic * factor == finite difference.
  allreduce (Sum, Average), alltoall:      1 (the exact derivative)
  allgather, grouped_allgather, broadcast: size (Horovod averages the gradients)
  reducescatter (Sum, Average):            1 / size (Horovod multiplies Sum's by the size, and
                                           does not divide Average's)
Each element of each rank's input is perturbed in turn (every rank evaluates the objective
together), so wrong routing (rows, splits, the root) shows, not only a wrong scale."""
import pytest
import torch

import tessera.torch as hvd

EPS = 1e-6


def inputs(rank, shape):
    n = torch.Size(shape).numel()
    return torch.sin(torch.arange(n, dtype=torch.float64) * 0.9 + rank * 1.7).view(shape)


def objective(op, x, upstream):
    """sum over ranks of <op(x), upstream>, on every rank (no autograd)."""
    with torch.no_grad():
        mine = (op(x) * upstream).sum().reshape(1)
        return hvd.allreduce(mine, op=hvd.Sum).item()


def check(op, shape, out_shape, factor):
    me, n = hvd.rank(), hvd.size()
    x = inputs(me, shape).requires_grad_()
    upstream = torch.cos(torch.arange(torch.Size(out_shape).numel(), dtype=torch.float64)
                         + me).view(out_shape)
    (op(x) * upstream).sum().backward()
    analytic = x.grad.reshape(-1)
    worst = 0.0
    sizes = hvd.allgather_object(x.numel())  # ranks' inputs may differ in size
    for k in range(n):
        for i in range(sizes[k]):
            plus, minus = x.detach().clone(), x.detach().clone()
            if me == k:
                plus.view(-1)[i] += EPS
                minus.view(-1)[i] -= EPS
            fd = (objective(op, plus, upstream) - objective(op, minus, upstream)) / (2 * EPS)
            if me == k:
                worst = max(worst, abs(analytic[i].item() * factor - fd))
    assert worst < 1e-7, worst


def test_allreduce_sum_and_average():
    for op in (hvd.Sum, hvd.Average):
        check(lambda x: hvd.allreduce(x, op=op), (2, 3), (2, 3), 1.0)


def test_allgather_with_uneven_rows():
    n, me = hvd.size(), hvd.rank()
    rows = n * (n + 1) // 2  # rank r gives r + 1 rows
    check(lambda x: hvd.allgather(x), (me + 1, 2), (rows, 2), float(n))


def test_grouped_allgather():
    n = hvd.size()
    check(lambda x: torch.cat([y.reshape(-1) for y in hvd.grouped_allgather([x, 2 * x])]),
          (2, 2), (2 * 4 * n,), float(n))


def test_broadcast_from_the_last_rank():
    n = hvd.size()
    check(lambda x: hvd.broadcast(x, n - 1), (3,), (3,), float(n))


def test_alltoall_with_splits():
    n, me = hvd.size(), hvd.rank()
    splits = [me + j + 1 for j in range(n)]  # rank i sends i + j + 1 rows to rank j
    received = sum(i + me + 1 for i in range(n))
    check(lambda x: hvd.alltoall(x, splits=splits)[0], (sum(splits), 2), (received, 2), 1.0)


@pytest.mark.parametrize("rows_per_rank", [2, None])
def test_reducescatter_sum_and_average(rows_per_rank):
    n, me = hvd.size(), hvd.rank()
    rows = 2 * n if rows_per_rank else 2 * n + 1  # even, and Horovod's uneven split
    mine = rows // n + (1 if me < rows % n else 0)
    for op in (hvd.Sum, hvd.Average):
        check(lambda x: hvd.reducescatter(x, op=op), (rows, 2), (mine, 2), 1.0 / n)
