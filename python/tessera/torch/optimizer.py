"""DistributedOptimizer: wraps any torch.optim optimizer so that step() applies gradients
reduced over the ranks, each gradient's allreduce starting as soon as backward produced it.

The bookkeeping (hooks on the gradient accumulators, backward_passes_per_step, groups,
compression, gradient_predivide_factor, sparse gradients, unused parameters) is the core's
GradientReducer, the same as tessera::DistributedOptimizer's in C++ (src/torch/
gradient_reducer.h); this module keeps the Python object around it and Horovod's Adasum
delta optimizer, which steps the wrapped Python optimizer per parameter inside its hooks."""
import contextlib
import warnings

import torch

from tessera.torch.basics import _C, _set_id, global_process_set
from tessera.torch.compression import Compression
from tessera.torch.mpi_ops import Adasum, Average, Sum, _allreduce_async, _resolve_op, synchronize

_COMPRESSION = {Compression.none: "none", Compression.fp16: "fp16", Compression.bf16: "bf16"}


def _named(optimizer, named_parameters):
    """(name, parameter) of every parameter the optimizer holds that requires a gradient, in
    the optimizer's order, checked against named_parameters."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    if named_parameters is None:
        named = [(f"param.{i}", p) for i, p in enumerate(params)]
    else:
        named = list(named_parameters)
        if named and not isinstance(named[0], tuple):
            raise ValueError("named_parameters must be (name, parameter) pairs, as "
                             "model.named_parameters() gives")
    names = [n for n, _ in named]
    if len(set(names)) != len(names):
        raise ValueError("named_parameters lists a name twice: "
                         f"{sorted({n for n in names if names.count(n) > 1})}")
    name_of = {id(p): n for n, p in named}
    missing = [i for i, p in enumerate(params) if id(p) not in name_of]
    if missing:
        raise ValueError(f"the optimizer updates {len(missing)} parameter(s) that are not in "
                         "named_parameters; pass model.named_parameters() of every parameter "
                         "the optimizer holds")
    return [(name_of[id(p)], p) for p in params if p.requires_grad], named


def _group_indices(groups, params):
    """`groups`: an int (that many contiguous groups, in the optimizer's order) or lists of
    parameters. Returns index lists into `params`."""
    if groups is None or groups == 0:
        return []
    if isinstance(groups, int):
        n = len(params)
        k = min(groups, n)
        bounds = [n * i // k for i in range(k + 1)]
        return [list(range(bounds[i], bounds[i + 1])) for i in range(k)]
    index = {id(p): i for i, p in enumerate(params)}
    try:
        return [[index[id(p)] for p in group] for group in groups]
    except KeyError:
        raise ValueError("groups list a parameter the optimizer does not update") from None


class _DistributedMixin:
    """Methods added to the wrapped optimizer's own class (see DistributedOptimizer)."""

    def _tessera_setup(self, named_parameters, compression, backward_passes_per_step, op,
                       gradient_predivide_factor, groups, sparse_as_dense, process_set):
        trainable, named = _named(self, named_parameters)
        if compression not in _COMPRESSION:
            raise ValueError(f"compression {compression!r} is not one tessera's core runs; "
                             "accepted: Compression.none, Compression.fp16, Compression.bf16")
        self._set_attributes(named, backward_passes_per_step, op, gradient_predivide_factor,
                             sparse_as_dense, process_set)
        self._params = [p for _, p in trainable]
        self._reducer = _C.GradientReducer(
            trainable, backward_passes_per_step, _group_indices(groups, self._params),
            _COMPRESSION[compression], op, float(gradient_predivide_factor),
            bool(sparse_as_dense), _set_id(process_set, "DistributedOptimizer"))

    def _set_attributes(self, named, passes, op, predivide, sparse_as_dense, process_set):
        # Horovod's attributes that scripts read: parameter -> name, and the options.
        self._parameter_names = {p: n for n, p in named}
        self.backward_passes_per_step = passes
        self.op = op
        self.gradient_predivide_factor = predivide
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._synchronized = False
        self._skip_sync = False

    def set_backward_passes_per_step(self, passes):
        """Horovod's: from now on, `passes` backward passes are summed before each reduction."""
        self._reducer.set_backward_passes_per_step(passes)
        self.backward_passes_per_step = passes

    def synchronize(self):
        """Waits for every gradient's reduction and leaves the results in .grad. Parameters
        whose gradient never came (unused this step) reduce zeros, so every rank runs the same
        collectives."""
        self._reducer.synchronize()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside this block does not synchronize (call synchronize() yourself first)."""
        self._skip_sync = True
        try:
            yield
        finally:
            self._skip_sync = False

    def step(self, closure=None):
        if not self._skip_sync:
            if self._synchronized:
                warnings.warn("optimizer.step() after synchronize(): wrap it in "
                              "optimizer.skip_synchronize() to avoid reducing twice")
            self.synchronize()
        self._synchronized = False
        result = super().step(closure)
        # The core's autotuner (TESSERA_AUTOTUNE=1) counts steps here, as under tessera train.
        _C.step_done()
        return result

    def zero_grad(self, *args, **kwargs):
        if self._reducer.in_flight():
            raise AssertionError("optimizer.zero_grad() while gradients are being reduced: call "
                                 "step() or synchronize() first")
        return super().zero_grad(*args, **kwargs)


def _grad_accumulator(p):
    # The AccumulateGrad node of a leaf: its hooks run once the gradient is in p.grad.
    return p.expand_as(p).grad_fn.next_functions[0][0]


class _DistributedAdasumMixin(_DistributedMixin):
    """Horovod's _DistributedAdasumOptimizer: the updates, not the gradients, are combined
    with Adasum. Once p's gradient is ready (the last of backward_passes_per_step passes), the
    wrapped optimizer steps p alone; the change it made is allreduced with op=Adasum, and
    synchronize() sets p to its value before the step plus the combined change. Its hooks are
    Python's: they run the Python optimizer."""

    def _tessera_setup(self, named_parameters, compression, backward_passes_per_step, op,
                       gradient_predivide_factor, groups, sparse_as_dense, process_set):
        trainable, named = _named(self, named_parameters)
        self._set_attributes(named, backward_passes_per_step, op, gradient_predivide_factor,
                             sparse_as_dense, process_set)
        self._compression = compression
        self._params = [p for _, p in trainable]
        self._names = {id(p): n for n, p in trainable}
        self._delay = {id(p): backward_passes_per_step for p in self._params}
        self._starting = {id(p): torch.zeros_like(p, requires_grad=False) for p in self._params}
        self._handles = {}
        self._accumulators = []
        for p in self._params:
            acc = _grad_accumulator(p)
            acc.register_hook(self._make_hook(p))
            self._accumulators.append(acc)  # the hook lives as long as its node

    def _make_hook(self, p):
        def hook(*unused):
            if p.grad is None or id(p) in self._handles:
                return
            self._delay[id(p)] -= 1
            if self._delay[id(p)] == 0:
                self._ready(p)
        return hook

    def _ready(self, p):
        start = self._starting[id(p)]
        stashed = [g["params"] for g in self.param_groups]
        with torch.no_grad():
            start.copy_(p)
            for g in self.param_groups:  # the wrapped optimizer's step on p alone
                g["params"] = [q for q in g["params"] if q is p]
            try:
                super(_DistributedMixin, self).step()
            finally:
                for g, params in zip(self.param_groups, stashed):
                    g["params"] = params
            p.sub_(start)  # p holds its delta until synchronize()
        wire, ctx = self._compression.compress(p.detach())
        h = _allreduce_async(wire, f"grad.{self._names[id(p)]}", Adasum, 1.0, 1.0,
                             self.process_set, True)
        self._handles[id(p)] = (h, wire, ctx)

    def set_backward_passes_per_step(self, passes):
        if passes < 1:
            raise ValueError(f"backward_passes_per_step must be >= 1, got {passes}")
        self.backward_passes_per_step = passes
        self._delay = {id(p): passes for p in self._params}

    def synchronize(self):
        for p in self._params:
            if id(p) not in self._handles:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                self._ready(p)
        with torch.no_grad():
            for p in self._params:
                h, wire, ctx = self._handles[id(p)]
                synchronize(h)
                p.copy_(self._starting[id(p)] + self._compression.decompress(wire, ctx))
        self._handles.clear()
        self._delay = {id(p): self.backward_passes_per_step for p in self._params}
        self._synchronized = True

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        self.synchronize()
        self._synchronized = False
        _C.step_done()
        return loss

    def zero_grad(self, *args, **kwargs):
        return super(_DistributedMixin, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps `optimizer` (any torch.optim.Optimizer): the result is an instance of a subclass
    of its class sharing its state and param groups, whose step() first waits for the
    gradients' allreduces (started by hooks during backward) and applies their average.
    Collective: the ranks' parameters (names, shapes, dtypes) are compared once.

    backward_passes_per_step: local passes summed before one reduction. groups: an int or lists
    of parameters reduced together (num_groups is Horovod's older name for the int)."""
    if groups is None and num_groups:
        groups = num_groups
    op = _resolve_op(None, op, "DistributedOptimizer")
    if op not in (Average, Sum, Adasum):
        raise ValueError("DistributedOptimizer: op must be Average, Sum or Adasum")
    # As Horovod: op=Adasum on more than one rank combines the updates (the delta optimizer);
    # on one rank it is the plain optimizer's path.
    adasum = op == Adasum and process_set.size() > 1
    mixin = _DistributedAdasumMixin if adasum else _DistributedMixin
    cls = type(optimizer.__class__.__name__, (mixin, optimizer.__class__),
               {"_tessera_wrapped": True})
    wrapped = cls.__new__(cls)
    wrapped.__dict__ = optimizer.__dict__  # the same state, param groups and defaults
    wrapped._tessera_setup(named_parameters, compression, backward_passes_per_step, op,
                           gradient_predivide_factor, groups, sparse_as_dense, process_set)
    return wrapped
