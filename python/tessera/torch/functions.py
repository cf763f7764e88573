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
    with _C.Op("broadcast_object", name, _set_id(process_set, "broadcast_object")) as o:
        data = pickle.dumps(obj) if _C.rank() == root_rank else b""
    return pickle.loads(_C.broadcast_bytes(data, root_rank, f"broadcast_object.{o.name}",
                                           o.process_set))


def allgather_object(obj, name=None, process_set=global_process_set):
    """Every rank's object, in rank order."""
    with _C.Op("allgather_object", name, _set_id(process_set, "allgather_object")) as o:
        data = pickle.dumps(obj)
    return [pickle.loads(b) for b in
            _C.allgather_bytes(data, f"allgather_object.{o.name}", o.process_set)]


def broadcast_optimizer_state(optimizer, root_rank, process_set=global_process_set):
    """Every rank's optimizer takes root_rank's state (momentum buffers, Adam's moments and
    steps) and its param groups' options (learning rate, betas, ...). An optimizer without
    state first takes one step of zero gradients to make it, as Horovod's does. The state_dict
    travels pickled, tensors included, in one broadcast (Horovod sends the tensors one by one:
    the result is the same, and this runs once). Collective; the optimizers must be over the
    same parameters in the same order."""
    _initialize_state(optimizer)
    state = broadcast_object(optimizer.state_dict(), root_rank, "broadcast_optimizer_state",
                             process_set)
    if _C.rank() != root_rank:  # a rank of the whole job, as for broadcast
        optimizer.load_state_dict(state)


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
