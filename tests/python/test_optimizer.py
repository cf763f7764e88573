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
    # Horovod's rule: the root without state makes it with one step of zero gradients, and
    # every rank takes it (Adam's moments zero, one step counted; the weights unchanged).
    state = opt.state_dict()["state"]
    assert sorted(state) == list(range(len(list(model.parameters()))))
    for st in state.values():
        assert float(st["step"]) == 1.0
        assert not st["exp_avg"].any() and not st["exp_avg_sq"].any()
    if me == 0:  # a step of zero gradients leaves Adam's weights where they were
        assert_same(model, make_model())


def test_broadcast_optimizer_state_with_a_parameter_that_takes_no_gradient():
    # Horovod's test_broadcast_state_no_grad: a parameter with requires_grad=False keeps .grad
    # None; the others get the zero gradient of the state-making step, the same everywhere.
    class NoGrad(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Parameter(torch.tensor([1, 3]), requires_grad=False)
            self.b = torch.nn.Parameter(torch.rand(4, generator=torch.Generator().manual_seed(1)))

        def forward(self, x):
            return torch.index_select(self.b, 0, self.a) * x
    model = NoGrad()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.001, weight_decay=1e-6, momentum=0.9,
                        nesterov=True), named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    grad = opt.param_groups[0]["params"][1].grad
    assert opt.param_groups[0]["params"][0].grad is None
    assert torch.equal(hvd.broadcast(grad, root_rank=0), grad)
    model(torch.ones(2)).sum().backward()  # the optimizer still works after it
    opt.step()


def test_set_backward_passes_per_step_and_the_parameter_names():
    me, n = hvd.rank(), hvd.size()
    model = torch.nn.Linear(3, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                   named_parameters=model.named_parameters())
    assert opt._parameter_names[model.weight] == "weight"
    assert opt.backward_passes_per_step == 1
    opt.set_backward_passes_per_step(2)
    assert opt.backward_passes_per_step == 2
    opt.zero_grad()
    for k in range(2):  # two local passes summed, then one reduction
        model(torch.full((1, 3), float(me + k))).sum().backward()
    opt.step()
    mean_of_sums = sum(2 * r + 1 for r in range(n)) / n
    assert torch.allclose(model.weight, torch.full((1, 3), 1.0 - mean_of_sums))


def test_sparse_gradients_take_horovods_allgather_path():
    me, n = hvd.rank(), hvd.size()
    for sparse_as_dense in (False, True):
        emb = torch.nn.Embedding(6, 2, sparse=True)
        with torch.no_grad():
            emb.weight.fill_(0.0)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=1.0),
                                       named_parameters=emb.named_parameters(),
                                       sparse_as_dense=sparse_as_dense)
        opt.zero_grad()
        emb(torch.tensor([me % 6, 5])).sum().backward()
        assert emb.weight.grad.is_sparse
        opt.step()
        assert emb.weight.grad.is_sparse  # as the optimizer (SparseAdam, ...) needs it
        want = torch.zeros(6, 2)
        for r in range(n):
            want[r % 6] -= 1.0 / n
        want[5] -= 1.0
        assert torch.allclose(emb.weight, want), (sparse_as_dense, emb.weight)


def test_sparse_allreduce_async_gathers_indices_and_values():
    me, n = hvd.rank(), hvd.size()
    t = torch.sparse_coo_tensor([[me % 4]], [float(me + 1)], (4,))
    for op, scale in ((hvd.Sum, 1.0), (hvd.Average, 1.0 / n)):
        out = hvd.sparse_allreduce_async(t, f"sparse.{op}", op)()
        want = torch.zeros(4)
        for r in range(n):
            want[r % 4] += (r + 1) * scale
        assert out.is_sparse and torch.allclose(out.to_dense(), want)


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
