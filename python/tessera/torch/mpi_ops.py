"""Horovod's collectives on tensors over tessera's engine: each op enqueues on the extension
(asynchronous, named) and returns a handle; synchronize() waits with the GIL released.

Semantics follow Horovod's documentation; where tessera decides, it says so here:
  - Average on integer tensors is refused (ValueError): use Sum and divide as you need.
  - bool tensors travel as bytes; their reductions are logical: Sum and Max are "or", Min and
    Product are "and".
  - alltoall with uneven splits and reducescatter with a first dimension that does not divide
    by the ranks pad each block to the largest one (zeros) and cut the padding off after.
"""
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
Adasum = -1  # accepted as a name, refused when used (see _resolve_op)

_OP_NAMES = {Average: "Average", Sum: "Sum", Min: "Min", Max: "Max", Product: "Product"}
_ACCEPTED = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
             torch.bfloat16, torch.float32, torch.float64, torch.bool)
_ACCEPTED_TEXT = ("uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, bool")

# Handles: Horovod's are integers. Each maps to the extension's handles and a function that
# turns their tensors into the result. The lock guards the map only, never a wait.
_handles = {}
_handles_lock = threading.Lock()
_next_handle = itertools.count(1)
_noname = {}


def _auto_name(kind, ps_id):
    """The next name of an unnamed `kind` on set `ps_id`. One counter per (kind, set): ranks
    outside a set do not count its calls, so the names still agree on every member."""
    key = f"{kind}.set{ps_id}"
    with _handles_lock:
        n = _noname.get(key, 0)
        _noname[key] = n + 1
    return f"{key}.noname.{n}"


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
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{what}: expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dtype not in _ACCEPTED:
        raise ValueError(f"{what}: tensors of dtype {tensor.dtype} are not supported; accepted: "
                         f"{_ACCEPTED_TEXT}")
    if tensor.is_sparse:
        raise ValueError(f"{what}: sparse tensors are not supported; pass tensor.to_dense()")
    if tensor.device.type == "cuda" and not _C.cuda_built:
        raise ValueError(f"{what}: the tensor is on {tensor.device}, but this build of tessera "
                         "takes CPU tensors only (cuda_built() is False: built without CUDA or "
                         "against a torch without it): move it with .cpu()")
    if tensor.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{what}: the tensor is on {tensor.device}; tessera takes CPU and CUDA "
                         "tensors")


def _resolve_op(average, op, what):
    if average is not None and op is not None:
        raise ValueError(f"{what}: pass op or the deprecated average, not both")
    if op is None:
        op = Sum if average is False else Average
    if op == Adasum:
        raise ValueError(f"{what}: tessera does not provide Adasum; accepted ops: "
                         "Average, Sum, Min, Max, Product")
    if op not in _OP_NAMES:
        raise ValueError(f"{what}: unknown op {op!r}; accepted: Average, Sum, Min, Max, Product")
    return op


def _needs_grad(tensor):
    # Autograd's Function costs microseconds per call: only tensors that need it go through it.
    return tensor.requires_grad and torch.is_grad_enabled()


def _name(name, kind, ps_id):
    return _auto_name(kind, ps_id) if name is None else str(name)


def _wire(tensor, op):
    """bool tensors travel as uint8 with the logical op; others as they are."""
    if tensor.dtype != torch.bool:
        return tensor, op
    if op == Average:
        raise ValueError("Average is not defined on bool tensors; use Sum (logical or) or Min "
                         "(logical and)")
    return tensor.view(torch.uint8), (Max if op in (Sum, Max) else Min)


def _unwire(tensor, dtype):
    return tensor.view(torch.bool) if dtype == torch.bool else tensor


def _root(root_rank, ps_id, process_set, what):
    n = _C.process_set_size(ps_id)
    if not isinstance(root_rank, int) or not 0 <= root_rank < n:
        raise ValueError(f"{what}: root_rank {root_rank!r} is not a rank of {process_set!r}; "
                         f"accepted: 0 to {n - 1}")
    return root_rank


# ---- allreduce ----

def _allreduce_async(tensor, name, op, prescale_factor, postscale_factor, process_set, inplace):
    what = "allreduce_async_" if inplace else "allreduce_async"
    _check_tensor(tensor, what)
    ps_id = _set_id(process_set, what)
    wire, wire_op = _wire(tensor, op)
    dtype = tensor.dtype
    if inplace:
        h = _C.allreduce_async_(wire, _name(name, "allreduce", ps_id), wire_op,
                                float(prescale_factor), float(postscale_factor), ps_id)
        return _register([h], lambda outs: tensor)
    h = _C.allreduce_async(wire, _name(name, "allreduce", ps_id), wire_op,
                           float(prescale_factor), float(postscale_factor), ps_id)
    return _register([h], lambda outs: _unwire(outs[0], dtype))


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over the ranks of `process_set` into a new tensor; returns a handle."""
    op = _resolve_op(average, op, "allreduce_async")
    return _allreduce_async(tensor, name, op, prescale_factor, postscale_factor, process_set,
                            False)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """In place: synchronize() leaves the result in `tensor` and returns it."""
    op = _resolve_op(average, op, "allreduce_async_")
    return _allreduce_async(tensor, name, op, prescale_factor, postscale_factor, process_set,
                            True)


def _reduce_grad(grad, op, prescale, postscale, process_set):
    if op not in (Average, Sum):
        raise ValueError(f"allreduce with op {_OP_NAMES[op]} has no gradient; only Average "
                         "and Sum are differentiable")
    return synchronize(_allreduce_async(grad.contiguous(), None, op, prescale, postscale,
                                        process_set, False))


class _Allreduce(torch.autograd.Function):
    # The gradient of an allreduce is the same allreduce of the gradients (Horovod's).
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set):
        ctx.args = (op, prescale, postscale, process_set)
        return synchronize(_allreduce_async(tensor, name, op, prescale, postscale, process_set,
                                            False))

    @staticmethod
    def backward(ctx, grad):
        return (_reduce_grad(grad, *ctx.args),) + (None,) * 5


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Returns `tensor` reduced over the ranks (Average by default); differentiable."""
    op = _resolve_op(average, op, "allreduce")
    _check_tensor(tensor, "allreduce")
    compressed, ctx = compression.compress(tensor)
    if _needs_grad(compressed):
        out = _Allreduce.apply(compressed, name, op, prescale_factor, postscale_factor,
                               process_set)
    else:
        out = synchronize(_allreduce_async(compressed, name, op, prescale_factor,
                                           postscale_factor, process_set, False))
    return compression.decompress(out, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """In place; returns `tensor`."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


# ---- grouped allreduce: released together and fused ----

def _grouped_allreduce_async(tensors, name, op, prescale, postscale, process_set, inplace):
    what = "grouped_allreduce_async_" if inplace else "grouped_allreduce_async"
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{what}: needs at least one tensor")
    for t in tensors:
        _check_tensor(t, what)
    if len({t.dtype for t in tensors}) > 1:
        raise ValueError(f"{what}: every tensor of a group must have one dtype, got "
                         f"{sorted({str(t.dtype) for t in tensors})}")
    ps_id = _set_id(process_set, what)
    base = _name(name, "grouped_allreduce", ps_id)
    targets = tensors if inplace else [t.detach().clone() for t in tensors]
    wires = [_wire(t, op) for t in targets]
    names = [f"{base}.{i}" for i in range(len(targets))]
    hs = _C.grouped_allreduce_async_([w for w, _ in wires], names, wires[0][1], float(prescale),
                                     float(postscale), ps_id)
    return _register(hs, lambda outs: targets)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    op = _resolve_op(average, op, "grouped_allreduce_async")
    return _grouped_allreduce_async(tensors, name, op, prescale_factor, postscale_factor,
                                    process_set, False)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    op = _resolve_op(average, op, "grouped_allreduce_async_")
    return _grouped_allreduce_async(tensors, name, op, prescale_factor, postscale_factor,
                                    process_set, True)


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale, postscale, process_set, *tensors):
        ctx.args = (op, prescale, postscale, process_set)
        return tuple(synchronize(_grouped_allreduce_async(tensors, name, op, prescale, postscale,
                                                          process_set, False)))

    @staticmethod
    def backward(ctx, *grads):
        op, prescale, postscale, process_set = ctx.args
        if op not in (Average, Sum):
            raise ValueError("grouped_allreduce has a gradient only for Average and Sum")
        reduced = synchronize(_grouped_allreduce_async([g.contiguous() for g in grads], None, op,
                                                       prescale, postscale, process_set, False))
        return (None,) * 5 + tuple(reduced)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    op = _resolve_op(average, op, "grouped_allreduce")
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, process_set,
                                   *[p[0] for p in pairs])
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


# ---- allgather ----

def _allgather_c(tensor, name, process_set):
    """The extension's handle of one allgather, and how to turn its tensor into the result."""
    _check_tensor(tensor, "allgather")
    if tensor.dim() == 0:
        raise ValueError("allgather: the tensor needs at least one dimension (ranks "
                         "concatenate along the first); use tensor.view(1)")
    ps_id = _set_id(process_set, "allgather")
    dtype = tensor.dtype
    wire = tensor.view(torch.uint8) if dtype == torch.bool else tensor
    h = _C.allgather_async(wire, _name(name, "allgather", ps_id), ps_id)
    return h, lambda out: _unwire(out, dtype)


def _allgather_async(tensor, name, process_set):
    h, finish = _allgather_c(tensor, name, process_set)
    return _register([h], lambda outs: finish(outs[0]))


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's tensor along dimension 0 (sizes may differ); returns a handle."""
    return _allgather_async(tensor, name, process_set)


def _first_dims(rows, process_set):
    """Every rank's first dimension, in rank order."""
    t = torch.tensor([rows], dtype=torch.int64)
    return synchronize(_allgather_async(t, None, process_set)).tolist()


class _Allgather(torch.autograd.Function):
    # Horovod's gradient: the gradients averaged over the ranks, this rank's rows of them.
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows = tensor.shape[0]
        ctx.process_set = process_set
        return synchronize(_allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        reduced = _reduce_grad(grad, Average, 1.0, 1.0, ctx.process_set)
        rows = _first_dims(ctx.rows, ctx.process_set)
        start = sum(rows[:ctx.process_set.rank()])
        return reduced.narrow(0, start, ctx.rows), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's tensor concatenated along dimension 0; differentiable."""
    _check_tensor(tensor, "allgather")
    if not _needs_grad(tensor):
        return synchronize(_allgather_async(tensor, name, process_set))
    return _Allgather.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    base = _name(name, "grouped_allgather", _set_id(process_set, "grouped_allgather"))
    pairs = [_allgather_c(t, f"{base}.{i}", process_set) for i, t in enumerate(tensors)]
    return _register([h for h, _ in pairs], lambda outs: [f(o) for o, (_, f) in zip(outs, pairs)])


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    return synchronize(grouped_allgather_async(tensors, name, process_set))


# ---- broadcast ----

def _broadcast_async(tensor, root_rank, name, process_set, inplace):
    what = "broadcast_async_" if inplace else "broadcast_async"
    _check_tensor(tensor, what)
    ps_id = _set_id(process_set, what)
    root = _root(root_rank, ps_id, process_set, what)
    dtype = tensor.dtype
    wire = tensor.view(torch.uint8) if dtype == torch.bool else tensor
    if inplace:
        h = _C.broadcast_async_(wire, root, _name(name, "broadcast", ps_id), ps_id)
        return _register([h], lambda outs: tensor)
    h = _C.broadcast_async(wire, root, _name(name, "broadcast", ps_id), ps_id)
    return _register([h], lambda outs: _unwire(outs[0], dtype))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    return _broadcast_async(tensor, root_rank, name, process_set, False)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    return _broadcast_async(tensor, root_rank, name, process_set, True)


class _Broadcast(torch.autograd.Function):
    # Horovod's gradient: averaged over the ranks on the root, zero elsewhere.
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root = root_rank
        ctx.process_set = process_set
        return synchronize(_broadcast_async(tensor, root_rank, name, process_set, False))

    @staticmethod
    def backward(ctx, grad):
        reduced = _reduce_grad(grad, Average, 1.0, 1.0, ctx.process_set)
        if ctx.process_set.rank() != ctx.root:
            reduced = torch.zeros_like(reduced)
        return reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's tensor on every rank; differentiable."""
    _check_tensor(tensor, "broadcast")
    if not _needs_grad(tensor):
        return synchronize(_broadcast_async(tensor, root_rank, name, process_set, False))
    return _Broadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In place; returns `tensor`."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---- alltoall ----

def _splits_matrix(splits, rows, process_set):
    """Every rank's splits, as rows of a [size, size] list (row k: what rank k sends)."""
    n = process_set.size()
    if splits is None:
        if rows % n:
            raise ValueError(f"alltoall: without splits the first dimension ({rows}) must divide "
                             f"by the {n} ranks; pass splits for uneven blocks")
        mine = [rows // n] * n
    else:
        mine = [int(s) for s in (splits.tolist() if isinstance(splits, torch.Tensor) else splits)]
        if len(mine) != n or any(s < 0 for s in mine) or sum(mine) != rows:
            raise ValueError(f"alltoall: splits {mine} must be {n} non-negative counts (one per "
                             f"rank of the set) adding up to the first dimension, {rows}")
    t = torch.tensor([mine], dtype=torch.int64)
    return synchronize(_allgather_async(t, None, process_set)).tolist()


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends rows splits[j] of `tensor` to rank j; synchronize() returns (received tensor,
    received splits). The splits are exchanged first (one small allgather, synchronous)."""
    _check_tensor(tensor, "alltoall")
    if tensor.dim() == 0:
        raise ValueError("alltoall: the tensor needs at least one dimension")
    ps_id = _set_id(process_set, "alltoall")
    matrix = _splits_matrix(splits, tensor.shape[0], process_set)
    me = process_set.rank()
    received = [row[me] for row in matrix]
    block = max(max(row) for row in matrix)
    dtype = tensor.dtype
    wire = tensor.view(torch.uint8) if dtype == torch.bool else tensor
    even = all(s == block for row in matrix for s in row)
    if not even:  # pad every block to the largest
        padded = wire.new_zeros((block * len(matrix),) + tuple(wire.shape[1:]))
        offset = 0
        for j, s in enumerate(matrix[me]):
            padded[j * block:j * block + s] = wire[offset:offset + s]
            offset += s
        wire = padded
    h = _C.alltoall_async(wire, _name(name, "alltoall", ps_id), ps_id)

    def finish(outs):
        out = outs[0]
        if not even:
            out = torch.cat([out[j * block:j * block + s] for j, s in enumerate(received)])
        return _unwire(out, dtype), torch.tensor(received, dtype=torch.int32)
    return _register([h], finish)


class _Alltoall(torch.autograd.Function):
    # The gradient goes back the way the data came: an alltoall with the received splits.
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.received = received
        ctx.process_set = process_set
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, _):
        back, _ = synchronize(alltoall_async(grad.contiguous(), ctx.received, None,
                                             ctx.process_set))
        return back, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Returns (received tensor, received splits); differentiable."""
    _check_tensor(tensor, "alltoall")
    return _Alltoall.apply(tensor, splits, name, process_set)


# ---- reducescatter ----

def _scatter_rows(rows, n):
    """Rows of each rank: the first rows % n ranks get one more (Horovod's split)."""
    return [rows // n + (1 if r < rows % n else 0) for r in range(n)]


def _reducescatter_prepare(tensor, op, prescale, process_set, what):
    _check_tensor(tensor, what)
    if op not in (Average, Sum):
        raise ValueError(f"{what}: accepted ops are Average and Sum, got {_OP_NAMES.get(op, op)}")
    if tensor.dim() == 0:
        raise ValueError(f"{what}: the tensor needs at least one dimension")
    if tensor.dtype == torch.bool:
        raise ValueError(f"{what}: bool tensors cannot be reduce-scattered; accepted: "
                         f"{_ACCEPTED_TEXT[:-6]}")
    n = process_set.size()
    rows = _scatter_rows(tensor.shape[0], n)
    wire = tensor * prescale if prescale != 1.0 else tensor
    if rows[0] != rows[-1]:  # pad each rank's block to rows[0] rows
        padded = wire.new_zeros((rows[0] * n,) + tuple(wire.shape[1:]))
        offset = 0
        for r, k in enumerate(rows):
            padded[r * rows[0]:r * rows[0] + k] = wire[offset:offset + k]
            offset += k
        wire = padded
    return wire, rows[process_set.rank()]


def _reducescatter_finish(out, mine, postscale):
    out = out[:mine]
    return out * postscale if postscale != 1.0 else out


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Reduces over the ranks and leaves rank r its block of rows (the first rows % size ranks
    one row more); returns a handle."""
    ps_id = _set_id(process_set, "reducescatter")
    wire, mine = _reducescatter_prepare(tensor, op, prescale_factor, process_set, "reducescatter")
    h = _C.reducescatter_async(wire, _name(name, "reducescatter", ps_id), op, ps_id)
    return _register([h], lambda outs: _reducescatter_finish(outs[0], mine, postscale_factor))


class _Reducescatter(torch.autograd.Function):
    # d(block r)/d(input) is the identity on block r's rows (divided by size for Average): the
    # gradient is the allgather of the blocks' gradients.
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale, postscale):
        ctx.args = (op, process_set, prescale * postscale)
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale, postscale))

    @staticmethod
    def backward(ctx, grad):
        op, process_set, scale = ctx.args
        full = synchronize(_allgather_async(grad.contiguous(), None, process_set))
        if op == Average:
            scale /= process_set.size()
        return full * scale, None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    compressed, ctx = compression.compress(tensor)
    out = _Reducescatter.apply(compressed, name, op, process_set, prescale_factor,
                               postscale_factor)
    return compression.decompress(out, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    ps_id = _set_id(process_set, "grouped_reducescatter")
    prepared = [_reducescatter_prepare(t, op, prescale_factor, process_set,
                                       "grouped_reducescatter") for t in tensors]
    if not prepared:
        raise ValueError("grouped_reducescatter: needs at least one tensor")
    base = _name(name, "grouped_reducescatter", ps_id)
    hs = _C.grouped_reducescatter_async([w for w, _ in prepared], base, op, ps_id)
    return _register(hs, lambda outs: [_reducescatter_finish(o, m, postscale_factor)
                                       for o, (_, m) in zip(outs, prepared)])


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    pairs = [compression.compress(t) for t in tensors]
    outs = synchronize(grouped_reducescatter_async([p[0] for p in pairs], name, op, process_set,
                                                   prescale_factor, postscale_factor))
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


# ---- barrier and join ----

def barrier(process_set=global_process_set):
    """Returns once every rank of the set has called it."""
    # One counter per set: ranks outside a set do not count its barriers.
    name = _auto_name("tessera.barrier", _set_id(process_set, "barrier"))
    synchronize(_allreduce_async(torch.zeros(1, dtype=torch.int32), name, Sum, 1.0, 1.0,
                                 process_set, True))


def join(device=-1):
    """This rank has no more data: it takes part in the other ranks' allreduces with zeros until
    every rank has joined. Returns the last rank to join. (`device` is Horovod's; unused.)"""
    _set_id(global_process_set, "join")
    return _C.join(0)
