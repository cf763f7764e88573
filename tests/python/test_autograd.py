"""Gradients through the collectives, against Horovod's definitions:
  allreduce:      the same allreduce (op, scale factors) of the output gradients;
  allgather:      the output gradients averaged over the ranks, this rank's rows;
  broadcast:      the output gradients averaged over the ranks on the root, zero elsewhere;
  alltoall:       the output gradients sent back (alltoall with the received splits);
  reducescatter:  the allgather of the blocks' gradients (times the ranks for Sum, as Horovod).
Each rank's upstream gradient differs (it depends on the rank), so a wrong reduction shows."""
import torch

import tessera.torch as hvd


def upstream(rank, shape):
    return (torch.arange(torch.Size(shape).numel(), dtype=torch.float64).view(shape) + 1) * \
        (rank + 1)


def test_allreduce_gradient():
    me, n = hvd.rank(), hvd.size()
    for op, factor in ((hvd.Sum, 1.0), (hvd.Average, 1.0 / n)):
        x = torch.ones(2, 3, dtype=torch.float64, requires_grad=True)
        y = hvd.allreduce(x, op=op, name=f"grad.ar.{op}", prescale_factor=2.0,
                          postscale_factor=0.5)
        y.backward(upstream(me, (2, 3)))
        want = sum(upstream(r, (2, 3)) for r in range(n)) * factor
        assert torch.allclose(x.grad, want, rtol=0, atol=1e-12), (op, x.grad, want)


def test_grouped_allreduce_gradient():
    me, n = hvd.rank(), hvd.size()
    a = torch.ones(3, dtype=torch.float64, requires_grad=True)
    b = torch.ones(2, 2, dtype=torch.float64, requires_grad=True)
    ya, yb = hvd.grouped_allreduce([a, b], op=hvd.Sum, name="grad.gar")
    (ya * upstream(me, (3,))).sum().add((yb * upstream(me, (2, 2))).sum()).backward()
    assert torch.equal(a.grad, sum(upstream(r, (3,)) for r in range(n)))
    assert torch.equal(b.grad, sum(upstream(r, (2, 2)) for r in range(n)))


def test_allgather_gradient():
    me, n = hvd.rank(), hvd.size()
    x = torch.ones(me + 1, 2, dtype=torch.float64, requires_grad=True)
    y = hvd.allgather(x, name="grad.ag")
    rows = n * (n + 1) // 2
    assert y.shape == (rows, 2)
    y.backward(upstream(me, (rows, 2)))
    mean = sum(upstream(r, (rows, 2)) for r in range(n)) / n
    start = me * (me + 1) // 2
    assert torch.allclose(x.grad, mean[start:start + me + 1], rtol=0, atol=1e-12)


def test_broadcast_gradient():
    me, n = hvd.rank(), hvd.size()
    root = n - 1
    x = torch.ones(4, dtype=torch.float64, requires_grad=True)
    hvd.broadcast(x, root, name="grad.bc").backward(upstream(me, (4,)))
    mean = sum(upstream(r, (4,)) for r in range(n)) / n
    want = mean if me == root else torch.zeros(4, dtype=torch.float64)
    assert torch.allclose(x.grad, want, rtol=0, atol=1e-12)


def test_alltoall_gradient_goes_back_the_way_the_data_came():
    me, n = hvd.rank(), hvd.size()
    splits = [me + 2 * j + 1 for j in range(n)]  # rank i sends i + 2j + 1 rows to rank j
    x = torch.zeros(sum(splits), 2, dtype=torch.float64, requires_grad=True)
    y, received = hvd.alltoall(x, splits=splits, name="grad.a2a")
    assert received.tolist() == [i + 2 * me + 1 for i in range(n)]
    # The gradient of received row k from rank i is 1000 * i + k: back on rank i it must
    # sit in the rows rank i sent to this rank.
    g = torch.cat([torch.full((i + 2 * me + 1, 2), 1000.0 * i, dtype=torch.float64)
                   for i in range(n)])
    y.backward(g + me)
    want = torch.cat([torch.full((me + 2 * j + 1, 2), 1000.0 * me + j, dtype=torch.float64)
                      for j in range(n)])
    assert torch.equal(x.grad, want)


def test_reducescatter_gradient():
    me, n = hvd.rank(), hvd.size()
    # Horovod's: the allgather of the blocks' gradients, times the size for Sum, as it is for
    # Average (HorovodReducescatter.backward).
    for op, factor in ((hvd.Sum, float(n)), (hvd.Average, 1.0)):
        x = torch.ones(2 * n, 3, dtype=torch.float64, requires_grad=True)
        y = hvd.reducescatter(x, op=op, name=f"grad.rs.{op}")
        assert y.shape == (2, 3)
        y.backward(upstream(me, (2, 3)))
        want = torch.cat([upstream(r, (2, 3)) for r in range(n)]) * factor
        assert torch.allclose(x.grad, want, rtol=0, atol=1e-12), op
