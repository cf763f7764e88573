"""DistributedOptimizer on N ranks with batch b equals one process with batch N*b (float64,
1e-10), for SGD with momentum and Adam, with backward_passes_per_step=2, with groups; and
broadcast_optimizer_state, broadcast_parameters, join with uneven data."""
import copy

import pytest
import torch

import tessera.torch as hvd

TOL = 1e-10
B = 4  # per-rank batch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 3, 3, padding=1)
        self.fc = torch.nn.Linear(3 * 4 * 4, 5)
        self.unused = torch.nn.Linear(2, 2)  # never in the graph: reduced as zeros

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def make_model(seed=1):
    torch.manual_seed(seed)
    return Net().double()


def global_batch(step, n):
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(n * B, 2, 4, 4, dtype=torch.float64, generator=g)
    y = torch.randint(0, 5, (n * B,), generator=g)
    return x, y


def loss_of(model, x, y):
    return torch.nn.functional.cross_entropy(model(x), y)


OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-3),
    "adam": lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=1e-3),
}


def zero_missing_grads(model):
    # Horovod's rule, which DistributedOptimizer follows: a parameter without a gradient this
    # step (unused) is reduced as zeros, so the optimizer then steps it with a zero gradient
    # (weight decay and momentum still act) on every rank alike.
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)


def reference(name, steps, n):
    """One process, batch n*B."""
    model = make_model()
    opt = OPTIMIZERS[name](model.parameters())
    for s in range(steps):
        x, y = global_batch(s, n)
        opt.zero_grad()
        loss_of(model, x, y).backward()
        zero_missing_grads(model)
        opt.step()
    return model


def assert_same(model, ref):
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert (p - q).abs().max().item() <= TOL, name


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("passes", [1, 2])
@pytest.mark.parametrize("groups", [None, 2])
def test_n_ranks_batch_b_equal_one_process_batch_nb(name, passes, groups):
    me, n, steps = hvd.rank(), hvd.size(), 3
    model = make_model()
    opt = hvd.DistributedOptimizer(OPTIMIZERS[name](model.parameters()),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=passes, groups=groups)
    assert isinstance(opt, type(OPTIMIZERS[name]([torch.zeros(1, requires_grad=True)])))
    for s in range(steps):
        x, y = global_batch(s, n)
        x, y = x[me * B:(me + 1) * B], y[me * B:(me + 1) * B]
        opt.zero_grad()
        part = B // passes
        for k in range(passes):  # local passes summed: each pass's loss weighs 1/passes
            sl = slice(k * part, (k + 1) * part)
            (loss_of(model, x[sl], y[sl]) / passes).backward()
        opt.step()
    assert_same(model, reference(name, steps, n))


@pytest.mark.skipif(not (hvd.cuda_built() and torch.cuda.is_available()),
                    reason="needs a CUDA build of tessera, a CUDA torch and a GPU")
def test_a_cuda_model_equals_one_process_on_the_cpu():
    """The model and its batches on the rank's GPU (moved before the optimizer is made, as
    Horovod's scripts do): the same steps as the CPU reference, f64, 1e-10."""
    me, n, steps = hvd.rank(), hvd.size(), 3
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    model = make_model().cuda()
    opt = hvd.DistributedOptimizer(OPTIMIZERS["sgd"](model.parameters()),
                                   named_parameters=model.named_parameters())
    for s in range(steps):
        x, y = global_batch(s, n)
        opt.zero_grad()
        loss_of(model, x[me * B:(me + 1) * B].cuda(), y[me * B:(me + 1) * B].cuda()).backward()
        opt.step()
    assert all(p.is_cuda for p in model.parameters())
    assert_same(model.cpu(), reference("sgd", steps, n))


def test_synchronize_then_step_in_skip_synchronize_and_gradient_predivide():
    me, n = hvd.rank(), hvd.size()
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   gradient_predivide_factor=float(n))
    x, y = global_batch(0, n)
    loss_of(model, x[me * B:(me + 1) * B], y[me * B:(me + 1) * B]).backward()
    opt.synchronize()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)  # what synchronize() is for
    with opt.skip_synchronize():
        opt.step()
    ref = make_model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    loss_of(ref, x, y).backward()
    zero_missing_grads(ref)
    ref_opt.step()
    assert_same(model, ref)


def test_fp16_compression_stays_close():
    me, n = hvd.rank(), hvd.size()
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   compression=hvd.Compression.fp16)
    x, y = global_batch(0, n)
    loss_of(model, x[me * B:(me + 1) * B], y[me * B:(me + 1) * B]).backward()
    opt.step()
    ref = reference_sgd_one_step(n)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert p.dtype == torch.float64
        assert (p - q).abs().max().item() < 1e-3  # f16 keeps about 3 decimal digits


def reference_sgd_one_step(n):
    ref = make_model()
    x, y = global_batch(0, n)
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    loss_of(ref, x, y).backward()
    zero_missing_grads(ref)
    opt.step()
    return ref


def test_broadcast_parameters_and_optimizer_state_make_every_rank_equal_rank_0():
    me = hvd.rank()
    model = make_model(seed=10 + me)  # different weights on every rank
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    assert_same(model, make_model(seed=10))
    # Adam with rank-dependent options and state; rank 1 (if any) has no state yet (lazy).
    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (me + 1), betas=(0.8 + 0.01 * me, 0.99))
    if me != 1:
        for _ in range(me + 1):
            for p in model.parameters():
                p.grad = torch.full_like(p, float(me + 1))
            opt.step()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    mine = opt.state_dict()
    root = hvd.broadcast_object(copy.deepcopy(mine) if me == 0 else None, root_rank=0)
    assert mine["param_groups"] == root["param_groups"]
    assert sorted(mine["state"]) == sorted(root["state"]) and mine["state"]
    for k, st in root["state"].items():
        for key, v in st.items():
            w = mine["state"][k][key]
            assert torch.equal(torch.as_tensor(w), torch.as_tensor(v)), (k, key)


def test_broadcast_optimizer_state_when_root_has_none_yet():
    me = hvd.rank()
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    if me != 0:
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        opt.step()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.state_dict()["state"] == {}


def test_join_with_uneven_batches():
    """Rank r has r + 2 batches; a rank whose data ran out joins. Each step's update is the
    average over the ranks that still had data."""
    me, n = hvd.rank(), hvd.size()
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for s in range(me + 2):
        x, y = global_batch(s, n)
        opt.zero_grad()
        loss_of(model, x[me * B:(me + 1) * B], y[me * B:(me + 1) * B]).backward()
        opt.step()
    last = hvd.join()
    assert last == n - 1  # the rank with the most batches joins last
    # The reference replays this rank's steps: each the average over the ranks with data.
    ref_mine = make_model()
    for s in range(me + 2):
        active = [r for r in range(n) if s < r + 2]
        x, y = global_batch(s, n)
        grads = []
        for r in active:
            ref_mine.zero_grad()
            loss_of(ref_mine, x[r * B:(r + 1) * B], y[r * B:(r + 1) * B]).backward()
            grads.append([torch.zeros_like(p) if p.grad is None else p.grad.clone()
                          for p in ref_mine.parameters()])
        with torch.no_grad():
            for i, p in enumerate(ref_mine.parameters()):
                p -= 0.1 * sum(g[i] for g in grads) / len(active)
    assert_same(model, ref_mine)
    # A second join (the next epoch) works the same way.
    assert hvd.join() in range(n)
