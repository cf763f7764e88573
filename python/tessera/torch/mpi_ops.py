"""Horovod's collectives on tensors over tessera's engine: each op enqueues on the extension
(asynchronous, named) and returns a handle; synchronize() waits with the GIL released.

Semantics follow Horovod's documentation; where it is silent, Horovod's source
(docs/python.md lists each rule). Names, checks and refusals follow the core's policy
(src/torch/op_policy.h): the name is taken once the process set is known, and a rank whose
arguments fail its checks refuses that name, so the ranks that enqueued it fail within a cycle.
Where tessera decides, it says so here:
  - bool tensors (the core's rule) travel as bytes; their reductions are logical: Sum and Max
    are "or", Min and Product are "and".
  - alltoall with uneven splits and reducescatter with a first dimension that does not divide
    by the ranks pad each block to the largest one (zeros) and cut the padding off after.
"""
import contextlib
import itertools
import threading

import torch

from tessera.torch.basics import _C, _set_id, global_process_set
from tessera.torch.compression import Compression

Average = _C.ReduceOp_Average
Sum = _C.ReduceOp_Sum
Min = _C.ReduceOp_Min
Max = _C.ReduceOp_Max
Product = _C.ReduceOp_Product
Adasum = _C.ReduceOp_Adasum  # the core's (comm/adasum_allreduce.cc): CPU, 2^k ranks

_OP_NAMES = {Average: "Average", Sum: "Sum", Min: "Min", Max: "Max", Product: "Product",
             Adasum: "Adasum"}

# Handles: Horovod's are integers. Each maps to the extension's handles and a function that
# turns their tensors into the result. The lock guards the map only, never a wait.
_handles = {}
_handles_lock = threading.Lock()
_next_handle = itertools.count(1)


def _op(kind, name, process_set, what, members=0):
    """Horovod's naming and refusal policy, the core's (_C.Op): a `with` block around this
    rank's own steps of one op, giving its name and set. A rank outside the set raises and
    takes no name; an exception leaving the block refuses the name (`members` > 0: a group's,
    name.0 .. name.N-1), so the ranks that enqueued it fail within a cycle."""
    return _C.Op(kind, name, _set_id(process_set, what), members)


def _register(c_handles, finish):
    h = next(_next_handle)
    with _handles_lock:
        _handles[h] = (c_handles, finish)
    return h


def poll(handle):
    """True when the collective behind `handle` is done (without waiting)."""
    with _handles_lock:
        entry = _handles.get(handle)
    if entry is None:
        raise ValueError(f"poll: handle {handle} is unknown (never issued, or synchronized)")
    return all(h.poll() for h in entry[0])


def synchronize(handle):
    """Waits for the collective behind `handle` and returns its result; raises the engine's
    error (HorovodInternalError, naming the tensor and the ranks) if it failed."""
    with _handles_lock:
        entry = _handles.pop(handle, None)
    if entry is None:
        raise ValueError(f"synchronize: handle {handle} is unknown (never issued, or "
                         "synchronized already)")
    c_handles, finish = entry
    return finish([h.wait() for h in c_handles])


def _check_tensor(tensor, what):
    """What only Python can say: the object is not a tensor (the core checks dtypes, shapes,
    layouts and devices, for both front ends)."""
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{what}: expected a torch.Tensor, got {type(tensor).__name__}")


def _resolve_op(average, op, what):
    if average is not None and op is not None:
        raise ValueError(f"{what}: pass op or the deprecated average, not both")
    if op is None:
        op = Sum if average is False else Average
    if op not in _OP_NAMES:
        raise ValueError(f"{what}: unknown op {op!r}; accepted: Average, Sum, Min, Max, Product, "
                         "Adasum")
    return op


def _needs_grad(tensor):
    # Autograd's Function costs microseconds per call: only tensors that need it go through it.
    return tensor.requires_grad and torch.is_grad_enabled()


# ---- allreduce ----

def _allreduce_async(tensor, name, op, prescale_factor, postscale_factor, process_set, inplace,
                     average=None):
    what = "allreduce_async_" if inplace else "allreduce_async"
    with _op("allreduce", name, process_set, what) as o:
        op = _resolve_op(average, op, what)
        _check_tensor(tensor, what)
        start = _C.allreduce_async_ if inplace else _C.allreduce_async
        h = start(tensor, o.name, op, float(prescale_factor), float(postscale_factor),
                  o.process_set)
        return _register([h], (lambda outs: tensor) if inplace else (lambda outs: outs[0]))


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over the ranks of `process_set` into a new tensor; returns a handle."""
    return _allreduce_async(tensor, name, op, prescale_factor, postscale_factor, process_set,
                            False, average)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """In place: synchronize() leaves the result in `tensor` and returns it."""
    return _allreduce_async(tensor, name, op, prescale_factor, postscale_factor, process_set,
                            True, average)


def _check_differentiable(op, what):
    # Horovod's: the gradient is the same reduction of the gradients (Adasum's is Adasum's).
    if op not in (Average, Sum, Adasum):
        raise ValueError(f"{what} with op {_OP_NAMES[op]} has no gradient; only Average, Sum "
                         "and Adasum are differentiable")


class _Allreduce(torch.autograd.Function):
    # The gradient of an allreduce is the same allreduce of the gradients (Horovod's).
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set):
        ctx.args = (op, prescale, postscale, process_set, False)
        return synchronize(_allreduce_async(tensor, name, *ctx.args))

    @staticmethod
    def backward(ctx, grad):
        _check_differentiable(ctx.args[0], "allreduce")
        return (synchronize(_allreduce_async(grad.contiguous(), None, *ctx.args)),) + (None,) * 5


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Returns `tensor` reduced over the ranks (Average by default); differentiable."""
    with _op("allreduce", name, process_set, "allreduce") as o:
        op = _resolve_op(average, op, "allreduce")
        _check_tensor(tensor, "allreduce")
        compressed, ctx = compression.compress(tensor)
    if _needs_grad(compressed):
        out = _Allreduce.apply(compressed, o.name, op, prescale_factor, postscale_factor,
                               process_set)
    else:
        out = synchronize(_allreduce_async(compressed, o.name, op, prescale_factor,
                                           postscale_factor, process_set, False))
    return compression.decompress(out, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """In place; returns `tensor`."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


# ---- grouped allreduce: released together and fused ----

def _grouped_allreduce_async(tensors, name, op, prescale, postscale, process_set, inplace,
                             average=None):
    what = "grouped_allreduce_async_" if inplace else "grouped_allreduce_async"
    tensors = _members(tensors, what)
    with _op("grouped_allreduce", name, process_set, what, len(tensors)) as o:
        op = _resolve_op(average, op, what)
        for t in tensors:
            _check_tensor(t, what)
        if len({t.dtype for t in tensors}) > 1:
            raise ValueError(f"{what}: every tensor of a group must have one dtype, got "
                             f"{sorted({str(t.dtype) for t in tensors})}")
        targets = tensors if inplace else [t.detach().clone() for t in tensors]
        names = [f"{o.name}.{i}" for i in range(len(targets))]
        hs = _C.grouped_allreduce_async_(targets, names, op, float(prescale), float(postscale),
                                         o.process_set)
        return _register(hs, lambda outs: targets)


def _members(tensors, what):
    """A group's tensors as a list; an empty group raises before any name is taken (a group's
    names are its members')."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{what}: needs at least one tensor")
    return tensors


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    return _grouped_allreduce_async(tensors, name, op, prescale_factor, postscale_factor,
                                    process_set, False, average)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    return _grouped_allreduce_async(tensors, name, op, prescale_factor, postscale_factor,
                                    process_set, True, average)


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale, postscale, process_set, *tensors):
        ctx.args = (op, prescale, postscale, process_set, False)
        return tuple(synchronize(_grouped_allreduce_async(tensors, name, *ctx.args)))

    @staticmethod
    def backward(ctx, *grads):
        _check_differentiable(ctx.args[0], "grouped_allreduce")
        grads = [g.contiguous() for g in grads]
        return (None,) * 5 + tuple(synchronize(_grouped_allreduce_async(grads, None, *ctx.args)))


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    tensors = _members(tensors, "grouped_allreduce")
    with _op("grouped_allreduce", name, process_set, "grouped_allreduce", len(tensors)) as o:
        op = _resolve_op(average, op, "grouped_allreduce")
        pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedAllreduce.apply(o.name, op, prescale_factor, postscale_factor, process_set,
                                   *[p[0] for p in pairs])
    return [compression.decompress(out, p[1]) for out, p in zip(outs, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


# ---- sparse allreduce (Horovod's allgather-based path) ----

def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Horovod's sparse allreduce (the core's): every rank's indices and values allgathered
    (`name`.indices, `name`.values) into one uncoalesced sparse tensor of the same size;
    Average divides the values by the set's size. Returns a function that waits and returns
    that tensor."""
    ps_id = _set_id(process_set, "sparse_allreduce_async")
    return _C.sparse_allreduce_async(tensor, "" if name is None else str(name), op, ps_id).wait


# ---- allgather ----

def allgather_async(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's tensor along dimension 0 (sizes may differ); returns a handle."""
    with _op("allgather", name, process_set, "allgather") as o:
        _check_tensor(tensor, "allgather")
        return _register([_C.allgather_async(tensor, o.name, o.process_set)], lambda outs: outs[0])


def _rows_before(rows, process_set):
    """This rank's first row in a concatenation along dimension 0 of every rank's `rows` (an
    int, or a list for a group's members)."""
    t = torch.tensor([rows], dtype=torch.int64).view(1, -1)
    every = synchronize(allgather_async(t, None, process_set))
    return every[:process_set.rank()].sum(dim=0).tolist()


class _Allgather(torch.autograd.Function):
    # Horovod's gradient: the gradients averaged over the ranks, this rank's rows of them.
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows, ctx.process_set = tensor.shape[0], process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        reduced = synchronize(_allreduce_async(grad.contiguous(), None, Average, 1.0, 1.0,
                                               ctx.process_set, False))
        start = _rows_before([ctx.rows], ctx.process_set)[0]
        return reduced.narrow(0, start, ctx.rows), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's tensor concatenated along dimension 0; differentiable."""
    with _op("allgather", name, process_set, "allgather") as o:
        _check_tensor(tensor, "allgather")
    if not _needs_grad(tensor):
        return synchronize(allgather_async(tensor, o.name, process_set))
    return _Allgather.apply(tensor, o.name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Allgathers each tensor (names `name`.0, .1, ...), released together; synchronize()
    returns the list."""
    tensors = _members(tensors, "grouped_allgather")
    with _op("grouped_allgather", name, process_set, "grouped_allgather", len(tensors)) as o:
        for t in tensors:
            _check_tensor(t, "grouped_allgather")
        hs = _C.grouped_allgather_async(tensors, o.name, o.process_set)
        return _register(hs, lambda outs: list(outs))


class _GroupedAllgather(torch.autograd.Function):
    # Horovod's gradient, per member: the gradients averaged over the ranks (one grouped
    # allreduce), this rank's rows of each.
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.rows, ctx.process_set = [t.shape[0] for t in tensors], process_set
        return tuple(synchronize(grouped_allgather_async(tensors, name, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        reduced = synchronize(_grouped_allreduce_async([g.contiguous() for g in grads], None,
                                                       Average, 1.0, 1.0, ctx.process_set,
                                                       False))
        start = _rows_before(ctx.rows, ctx.process_set)
        return (None, None) + tuple(r.narrow(0, s, n)
                                    for r, s, n in zip(reduced, start, ctx.rows))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Every rank's tensors concatenated along dimension 0, member by member; differentiable."""
    tensors = list(tensors)
    if not any(isinstance(t, torch.Tensor) and _needs_grad(t) for t in tensors):
        return synchronize(grouped_allgather_async(tensors, name, process_set))
    return list(_GroupedAllgather.apply(name, process_set, *tensors))


# ---- broadcast ----

def _broadcast_async(tensor, root_rank, name, process_set, inplace):
    """root_rank: a rank of the whole job, also on a process set (Horovod's); the core refuses
    one outside the set."""
    what = "broadcast_async_" if inplace else "broadcast_async"
    with _op("broadcast", name, process_set, what) as o:
        _check_tensor(tensor, what)
        start = _C.broadcast_async_ if inplace else _C.broadcast_async
        h = start(tensor, root_rank, o.name, o.process_set)
        return _register([h], (lambda outs: tensor) if inplace else (lambda outs: outs[0]))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's tensor (root_rank: a rank of the whole job, as in Horovod, also on a process
    set) on every rank of the set; returns a handle."""
    return _broadcast_async(tensor, root_rank, name, process_set, False)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    return _broadcast_async(tensor, root_rank, name, process_set, True)


class _Broadcast(torch.autograd.Function):
    # Horovod's gradient: averaged over the ranks on the root, zero elsewhere.
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root, ctx.process_set = root_rank, process_set
        return synchronize(_broadcast_async(tensor, root_rank, name, process_set, False))

    @staticmethod
    def backward(ctx, grad):
        reduced = synchronize(_allreduce_async(grad.contiguous(), None, Average, 1.0, 1.0,
                                               ctx.process_set, False))
        if _C.rank() != ctx.root:  # the root is a rank of the whole job
            reduced = torch.zeros_like(reduced)
        return reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's tensor on every rank; differentiable."""
    with _op("broadcast", name, process_set, "broadcast") as o:
        _check_tensor(tensor, "broadcast")
    if not _needs_grad(tensor):
        return synchronize(_broadcast_async(tensor, root_rank, o.name, process_set, False))
    return _Broadcast.apply(tensor, root_rank, o.name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In place; returns `tensor`."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---- alltoall ----

def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends rows splits[j] of `tensor` to rank j of the set; synchronize() returns (received
    tensor, received splits), as Horovod's. The core exchanges the splits first (one small
    allgather, synchronous) and pads uneven blocks."""
    with _op("alltoall", name, process_set, "alltoall") as o:
        try:
            _check_tensor(tensor, "alltoall")
            mine = [] if splits is None else [
                int(s) for s in (splits.tolist() if isinstance(splits, torch.Tensor) else splits)]
        except Exception:
            if splits is not None:  # the others exchange splits: take part with bad ones (the
                with contextlib.suppress(Exception):  # core refuses the name), so all raise
                    _C.alltoall_async(torch.zeros(0), o.name, o.process_set,
                                      [-1] * process_set.size())
            raise
    h = _C.alltoall_async(tensor, o.name, o.process_set, mine)
    # Horovod: the received splits in the dtype of the splits passed, else int32.
    dtype = splits.dtype if isinstance(splits, torch.Tensor) else torch.int32
    return _register([h], lambda outs: (outs[0], torch.tensor(h.received_splits, dtype=dtype)))


class _Alltoall(torch.autograd.Function):
    # The gradient goes back the way the data came: an alltoall with the received splits.
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.received, ctx.process_set = received, process_set
        if splits is None:
            return out
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, *_):
        back, _ = synchronize(alltoall_async(grad.contiguous(), ctx.received, None,
                                             ctx.process_set))
        return back, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Horovod's return: the received tensor without `splits`; (received tensor, received
    splits) with them. Differentiable."""
    if not (isinstance(tensor, torch.Tensor) and _needs_grad(tensor)):
        out, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        return out if splits is None else (out, received)
    return _Alltoall.apply(tensor, splits, name, process_set)


# ---- reducescatter ----

def _reducescatter_check(tensor, op, what):
    _check_tensor(tensor, what)
    if op not in (Average, Sum):
        raise ValueError(f"{what}: accepted ops are Average and Sum, got {_OP_NAMES.get(op, op)}")


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Reduces over the ranks and leaves rank r its block of rows (the first rows % size ranks
    one row more); returns a handle. Integer tensors scale as in allreduce."""
    with _op("reducescatter", name, process_set, "reducescatter") as o:
        _reducescatter_check(tensor, op, "reducescatter")
        h = _C.reducescatter_async(tensor, o.name, op, o.process_set, float(prescale_factor),
                                   float(postscale_factor))
        return _register([h], lambda outs: outs[0])


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    what = "grouped_reducescatter"
    tensors = _members(tensors, what)
    with _op("grouped_reducescatter", name, process_set, what, len(tensors)) as o:
        for t in tensors:
            _reducescatter_check(t, op, what)
        hs = _C.grouped_reducescatter_async(tensors, o.name, op, o.process_set,
                                            float(prescale_factor), float(postscale_factor))
        return _register(hs, lambda outs: list(outs))


def _reducescatter_grad_scale(op, process_set, prescale, postscale):
    # Horovod's gradient: the allgather of the blocks' gradients, times the size for Sum (not
    # divided by it for Average) and times both scale factors.
    return (process_set.size() if op == Sum else 1) * prescale * postscale


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale, postscale):
        ctx.process_set = process_set
        ctx.scale = _reducescatter_grad_scale(op, process_set, prescale, postscale)
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale, postscale))

    @staticmethod
    def backward(ctx, grad):
        full = synchronize(allgather_async(grad.contiguous(), None, ctx.process_set))
        return full * ctx.scale if ctx.scale != 1 else full, None, None, None, None, None


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale, postscale, *tensors):
        ctx.process_set = process_set
        ctx.scale = _reducescatter_grad_scale(op, process_set, prescale, postscale)
        return tuple(synchronize(grouped_reducescatter_async(tensors, name, op, process_set,
                                                             prescale, postscale)))

    @staticmethod
    def backward(ctx, *grads):
        full = synchronize(grouped_allgather_async([g.contiguous() for g in grads], None,
                                                   ctx.process_set))
        return (None,) * 5 + tuple(f * ctx.scale if ctx.scale != 1 else f for f in full)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    pairs = [compression.compress(t) for t in tensors]
    wires = [p[0] for p in pairs]
    if any(isinstance(w, torch.Tensor) and _needs_grad(w) for w in wires):
        outs = _GroupedReducescatter.apply(name, op, process_set, prescale_factor,
                                           postscale_factor, *wires)
    else:
        outs = synchronize(grouped_reducescatter_async(wires, name, op, process_set,
                                                       prescale_factor, postscale_factor))
    return [compression.decompress(out, p[1]) for out, p in zip(outs, pairs)]


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces over the ranks; rank r keeps its block of rows. Differentiable."""
    compressed, ctx = compression.compress(tensor)
    if isinstance(compressed, torch.Tensor) and _needs_grad(compressed):
        out = _Reducescatter.apply(compressed, name, op, process_set, prescale_factor,
                                   postscale_factor)
    else:
        out = synchronize(reducescatter_async(compressed, name, op, process_set, prescale_factor,
                                              postscale_factor))
    return compression.decompress(out, ctx)


# ---- barrier and join ----

def barrier(process_set=global_process_set):
    """Returns once every rank of the set has called it."""
    # One counter per set: ranks outside a set do not count its barriers.
    with _op("tessera.barrier", None, process_set, "barrier") as o:
        pass
    synchronize(_allreduce_async(torch.zeros(1, dtype=torch.int32), o.name, Sum, 1.0, 1.0,
                                 process_set, True))


def join(device=-1):
    """This rank has no more data: it takes part in the other ranks' allreduces with zeros until
    every rank has joined. Returns the last rank to join. (`device` is Horovod's; unused.)"""
    _set_id(global_process_set, "join")
    return _C.join(0)
