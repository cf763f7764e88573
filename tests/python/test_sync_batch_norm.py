"""SyncBatchNorm on N ranks with unequal local batches equals BatchNorm2d on the concatenated
batch: output, running statistics, and the gradients of the input, weight and bias."""
import torch

import tessera.torch as hvd


def test_sync_batch_norm_equals_batch_norm_on_the_whole_batch():
    me, n = hvd.rank(), hvd.size()
    rows = [r + 2 for r in range(n)]
    g = torch.Generator().manual_seed(5)
    x_all = torch.randn(sum(rows), 3, 4, 5, dtype=torch.float64, generator=g) * 2 + 1
    dy_all = torch.randn(x_all.shape, dtype=torch.float64, generator=g)
    start = sum(rows[:me])
    x = x_all[start:start + rows[me]].clone().requires_grad_()
    dy = dy_all[start:start + rows[me]]

    sbn = hvd.SyncBatchNorm(3).double()
    bn = torch.nn.BatchNorm2d(3).double()
    with torch.no_grad():
        for m in (sbn, bn):
            m.weight.copy_(torch.tensor([0.5, 1.5, -1.0]))
            m.bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
    y = sbn(x)
    y.backward(dy)
    x_ref = x_all.clone().requires_grad_()
    y_ref = bn(x_ref)
    y_ref.backward(dy_all)

    assert torch.allclose(y, y_ref[start:start + rows[me]], rtol=0, atol=1e-10)
    assert torch.allclose(x.grad, x_ref.grad[start:start + rows[me]], rtol=0, atol=1e-10)
    assert torch.allclose(sbn.running_mean, bn.running_mean, rtol=0, atol=1e-12)
    assert torch.allclose(sbn.running_var, bn.running_var, rtol=0, atol=1e-12)
    # Parameter gradients are local sums; their sum over the ranks is the whole batch's.
    for i, (mine, ref) in enumerate(((sbn.weight.grad, bn.weight.grad),
                                     (sbn.bias.grad, bn.bias.grad))):
        total = hvd.allreduce(mine, op=hvd.Sum, name=f"sbn.grad.{i}")
        assert torch.allclose(total, ref, rtol=0, atol=1e-10)
    # Eval mode uses the running statistics, like BatchNorm2d.
    sbn.eval()
    bn.eval()
    with torch.no_grad():
        assert torch.allclose(sbn(x), bn(x), rtol=0, atol=1e-12)
    assert set(sbn.state_dict()) == set(bn.state_dict())
