"""State and objects across ranks: broadcast_parameters, broadcast_optimizer_state,
broadcast_object, allgather_object."""
import pickle

import torch

from tessera.torch.basics import _C, _set_id, global_process_set
from tessera.torch.mpi_ops import broadcast_async_, synchronize
from tessera.torch.optimizer import _DistributedMixin


def _named_tensors(params):
    if isinstance(params, dict):
        return list(params.items())
    items = list(params)
    if items and not isinstance(items[0], tuple):
        raise ValueError("broadcast_parameters expects a state_dict or (name, tensor) pairs "
                         "(model.named_parameters()), got a list of "
                         f"{type(items[0]).__name__}")
    return items


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Every rank's tensors take root_rank's values, in place. `params`: a state_dict or
    model.named_parameters(). Collective; names must be the same on every rank."""
    handles = []
    with torch.no_grad():
        for name, tensor in _named_tensors(params):
            if tensor is None:
                continue
            handles.append(broadcast_async_(tensor, root_rank, f"broadcast_parameters.{name}",
                                            process_set))
        for h in handles:
            synchronize(h)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """root_rank's object (pickled; root_rank a rank of the whole job, as for broadcast) on every
    rank of the set. Without a name, the next automatic one: every rank of the set must then
    make its unnamed calls in the same order."""
    ps_id = _set_id(process_set, "broadcast_object")
    name = _C.take_name("broadcast_object", "" if name is None else str(name), ps_id)
    data = pickle.dumps(obj) if _C.rank() == root_rank else b""
    return pickle.loads(_C.broadcast_bytes(data, root_rank, f"broadcast_object.{name}", ps_id))


def allgather_object(obj, name=None, process_set=global_process_set):
    """Every rank's object, in rank order."""
    ps_id = _set_id(process_set, "allgather_object")
    name = _C.take_name("allgather_object", "" if name is None else str(name), ps_id)
    return [pickle.loads(b) for b in
            _C.allgather_bytes(pickle.dumps(obj), f"allgather_object.{name}", ps_id)]


class _TensorSlot:
    """Stands for the i-th tensor of a state_dict while its structure is broadcast."""

    def __init__(self, index, shape, dtype):
        self.index, self.shape, self.dtype = index, shape, dtype


def _split_tensors(value, tensors):
    """`value` with every tensor replaced by a _TensorSlot (appended to `tensors`)."""
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return _TensorSlot(len(tensors) - 1, tuple(value.shape), value.dtype)
    if isinstance(value, dict):
        return type(value)((k, _split_tensors(v, tensors)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(_split_tensors(v, tensors) for v in value)
    return value


def _fill_tensors(value, tensors):
    if isinstance(value, _TensorSlot):
        return tensors[value.index]
    if isinstance(value, dict):
        return type(value)((k, _fill_tensors(v, tensors)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(_fill_tensors(v, tensors) for v in value)
    return value


def broadcast_optimizer_state(optimizer, root_rank, process_set=global_process_set):
    """Every rank's optimizer takes root_rank's state (momentum buffers, Adam's moments and
    steps) and its param groups' options (learning rate, betas, ...). An optimizer without
    state first takes one step of zero gradients to make it, as Horovod's does. The structure
    travels pickled, the tensors by broadcast. Collective; the optimizers must be over the same
    parameters in the same order."""
    _initialize_state(optimizer)
    tensors = []
    structure = _split_tensors(optimizer.state_dict(), tensors)
    structure = broadcast_object(structure, root_rank, "broadcast_optimizer_state",
                                 process_set)
    root = _C.rank() == root_rank  # a rank of the whole job, as for broadcast
    if not root:
        tensors = []
        _collect_slots(structure, tensors)
    handles = [broadcast_async_(t, root_rank, f"broadcast_optimizer_state.{i}", process_set)
               for i, t in enumerate(tensors)]
    for h in handles:
        synchronize(h)
    if not root:
        optimizer.load_state_dict(_fill_tensors(structure, tensors))


def _initialize_state(optimizer):
    """Horovod's rule: an optimizer without state yet gets it from one step of zero gradients
    (each parameter that requires one gets a zero .grad, sparse for SparseAdam), taken by the
    wrapped optimizer's own step, not the DistributedOptimizer's (no collective). Parameters
    that need no gradient keep .grad None."""
    if len(optimizer.state_dict()["state"]) != 0:
        return
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
                if isinstance(optimizer, torch.optim.SparseAdam):
                    p.grad = p.grad.to_sparse()
    if isinstance(optimizer, _DistributedMixin):  # the wrapped optimizer's own step
        super(_DistributedMixin, optimizer).step()
    else:
        optimizer.step()


def _collect_slots(value, tensors):
    """Allocates, in slot order, one tensor per _TensorSlot of `value`."""
    slots = []

    def walk(v):
        if isinstance(v, _TensorSlot):
            slots.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
    walk(value)
    for slot in sorted(slots, key=lambda s: s.index):
        tensors.append(torch.empty(slot.shape, dtype=slot.dtype))
