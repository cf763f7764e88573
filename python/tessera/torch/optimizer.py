"""DistributedOptimizer: wraps any torch.optim optimizer so that step() applies gradients
reduced over the ranks, each gradient's allreduce starting as soon as backward produced it."""
import contextlib
import warnings

import torch

from tessera.torch.basics import _C, global_process_set
from tessera.torch.compression import Compression
from tessera.torch.mpi_ops import (Adasum, Average, Sum, _grouped_allreduce_async,
                                   _allreduce_async, _resolve_op, sparse_allreduce_async,
                                   synchronize)


def _grad_accumulator(p):
    # The AccumulateGrad node of a leaf: its hooks run once the gradient is in p.grad.
    return p.expand_as(p).grad_fn.next_functions[0][0]


class _DistributedMixin:
    """Methods added to the wrapped optimizer's own class (see DistributedOptimizer)."""

    def _tessera_setup(self, named_parameters, compression, backward_passes_per_step, op,
                       gradient_predivide_factor, groups, sparse_as_dense, process_set):
        params = [p for g in self.param_groups for p in g["params"]]
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
        known = {id(p) for _, p in named}
        missing = [i for i, p in enumerate(params) if id(p) not in known]
        if missing:
            raise ValueError(f"the optimizer updates {len(missing)} parameter(s) that are not in "
                             "named_parameters; pass model.named_parameters() of every "
                             "parameter the optimizer holds")
        if op not in (Average, Sum, Adasum):
            raise ValueError("DistributedOptimizer: op must be Average, Sum or Adasum")
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("gradient_predivide_factor needs op=Average")
        if backward_passes_per_step < 1:
            raise ValueError(f"backward_passes_per_step must be >= 1, got "
                             f"{backward_passes_per_step}")
        self._names = {id(p): n for n, p in named}
        # Horovod's attributes that scripts read: parameter -> name, and the options.
        self._parameter_names = {p: n for n, p in named}
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._op = op
        self._prescale = 1.0 / gradient_predivide_factor
        self._postscale = gradient_predivide_factor
        self._sparse_as_dense = sparse_as_dense
        self._process_set = process_set
        self._params = [p for p in params if p.requires_grad]
        self._groups = self._plan_groups(groups)
        self._delay = {id(p): backward_passes_per_step for p in self._params}
        self._handles = {}      # id(p) -> (handle, compressed tensor, ctx)
        self._group_ready = {}  # group index -> parameters whose gradient is ready
        self._synchronized = False
        self._skip_sync = False
        self._starting = {}  # op=Adasum: each parameter's value before the step
        self._accumulators = []
        for p in self._params:
            acc = _grad_accumulator(p)
            acc.register_hook(self._make_hook(p))
            self._accumulators.append(acc)  # the hook lives as long as its node

    def _plan_groups(self, groups):
        """Parameter id -> group index. `groups`: an int (that many contiguous groups, in the
        optimizer's order) or lists of parameters; parameters in no group go alone."""
        if groups is None or groups == 0:
            return {}
        if isinstance(groups, int):
            n = len(self._params)
            k = min(groups, n)
            bounds = [n * i // k for i in range(k + 1)]
            lists = [self._params[bounds[i]:bounds[i + 1]] for i in range(k)]
        else:
            lists = [list(g) for g in groups]
        plan = {}
        for gi, members in enumerate(lists):
            for p in members:
                if id(p) in plan:
                    raise ValueError("groups list a parameter twice")
                plan[id(p)] = gi
        self._group_members = lists
        return plan

    def _make_hook(self, p):
        def hook(*unused):
            if p.grad is None:
                return
            if id(p) in self._handles and self._handles[id(p)][0] is not None:
                raise AssertionError(
                    f"gradient of '{self._names[id(p)]}' computed more than "
                    f"backward_passes_per_step ({self.backward_passes_per_step}) times before "
                    "step() or "
                    "synchronize()")
            self._delay[id(p)] -= 1
            if self._delay[id(p)] == 0:
                self._ready(p)
            else:
                self._handles[id(p)] = (None, None, None)
        return hook

    def set_backward_passes_per_step(self, passes):
        """Horovod's: from now on, `passes` backward passes are summed before each reduction."""
        if passes < 1:
            raise ValueError(f"backward_passes_per_step must be >= 1, got {passes}")
        self.backward_passes_per_step = passes
        self._delay = {id(p): passes for p in self._params}

    def _wire_grad(self, p):
        """The tensor that travels for p's gradient, and its compression context. A sparse
        gradient travels dense with sparse_as_dense (and becomes sparse again after)."""
        grad = p.grad.to_dense() if p.grad.is_sparse else p.grad
        return self._compression.compress(grad)

    def _ready(self, p):
        gi = self._groups.get(id(p))
        if p.grad.is_sparse and not self.sparse_as_dense:
            # Horovod's sparse path: the indices and values allgathered (sparse_allreduce_async),
            # never in a group; its handle is a function that returns the reduced gradient.
            h = sparse_allreduce_async(p.grad, f"grad.{self._names[id(p)]}", self._op,
                                       self._process_set)
            self._handles[id(p)] = (h, None, None)
            return
        if gi is None:
            wire, ctx = self._wire_grad(p)
            h = _allreduce_async(wire, f"grad.{self._names[id(p)]}", self._op, self._prescale,
                                 self._postscale, self._process_set, True)
            self._handles[id(p)] = (h, wire, ctx)
            return
        ready = self._group_ready.setdefault(gi, [])
        ready.append(p)
        members = self._group_members[gi]
        if len(ready) < len(members):
            self._handles[id(p)] = (None, None, None)
            return
        wires = [self._wire_grad(q) for q in members]
        h = _grouped_allreduce_async([w for w, _ in wires], f"grad.group.{gi}", self._op,
                                     self._prescale, self._postscale, self._process_set, True)
        for q, (w, ctx) in zip(members, wires):
            self._handles[id(q)] = (h, w, ctx)
        del self._group_ready[gi]

    def synchronize(self):
        """Waits for every gradient's reduction and leaves the results in .grad. Parameters
        whose gradient never came (unused this step) reduce zeros, so every rank runs the same
        collectives."""
        for p in self._params:
            entry = self._handles.get(id(p))
            if entry is not None and entry[0] is not None:
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            waiting = self._group_ready.get(self._groups.get(id(p)), [])
            if not any(q is p for q in waiting):
                self._ready(p)
        done = set()
        for p in self._params:
            h, wire, ctx = self._handles[id(p)]
            if callable(h):  # sparse: the function gathers and returns the reduced gradient
                p.grad.zero_().add_(h())
                continue
            if h not in done:
                synchronize(h)
                done.add(h)
            out = self._compression.decompress(wire, ctx)
            if p.grad.is_sparse:  # sparse_as_dense: back to sparse, as Horovod does
                p.grad.zero_().add_(out.to_sparse())
            elif out is not p.grad:
                p.grad.copy_(out)
        self._handles.clear()
        self._delay = {id(p): self.backward_passes_per_step for p in self._params}
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
        if any(entry[0] is not None for entry in self._handles.values()):
            raise AssertionError("optimizer.zero_grad() while gradients are being reduced: call "
                                 "step() or synchronize() first")
        return super().zero_grad(*args, **kwargs)


class _DistributedAdasumMixin(_DistributedMixin):
    """Horovod's _DistributedAdasumOptimizer: the updates, not the gradients, are combined
    with Adasum. Once p's gradient is ready, the wrapped optimizer steps p alone; the change it
    made (its delta) is allreduced with op=Adasum, and synchronize() sets p to its value before
    the step plus the combined delta. step() is that synchronize() (the wrapped optimizer has
    stepped already)."""

    def _ready(self, p):
        start = self._starting.setdefault(id(p), torch.zeros_like(p, requires_grad=False))
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
                             self._process_set, True)
        self._handles[id(p)] = (h, wire, ctx)

    def synchronize(self):
        for p in self._params:
            entry = self._handles.get(id(p))
            if entry is None or entry[0] is None:
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


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps `optimizer` (any torch.optim.Optimizer): the result is an instance of a subclass
    of its class sharing its state and param groups, whose step() first waits for the
    gradients' allreduces (started by hooks during backward) and applies their average.

    backward_passes_per_step: local passes summed before one reduction. groups: an int or lists
    of parameters reduced together (num_groups is Horovod's older name for the int)."""
    if groups is None and num_groups:
        groups = num_groups
    op = _resolve_op(None, op, "DistributedOptimizer")
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
