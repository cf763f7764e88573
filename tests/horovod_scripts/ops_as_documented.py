# The collectives of Horovod's PyTorch API used as its API documentation describes them.
# tests/python_examples.sh runs it with its import line changed to `import tessera.torch as hvd`.
import torch
import horovod.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()

# allreduce averages by default; op=hvd.Sum sums.
assert hvd.allreduce(torch.tensor([float(rank)])).item() == sum(range(size)) / size
assert hvd.allreduce(torch.tensor([rank]), op=hvd.Sum).item() == sum(range(size))
t = torch.tensor([1.0, 2.0])
hvd.allreduce_(t, op=hvd.Sum)
assert t.tolist() == [size, 2.0 * size]
handle = hvd.allreduce_async(torch.ones(3), name="async.ones", op=hvd.Sum)
while not hvd.poll(handle):
    pass
assert hvd.synchronize(handle).tolist() == [size] * 3
# grouped_allreduce returns one tensor per input.
a, b = hvd.grouped_allreduce([torch.ones(2), torch.full((3,), 2.0)], op=hvd.Sum)
assert a.tolist() == [size] * 2 and b.tolist() == [2.0 * size] * 3
# allgather concatenates along the first dimension; ranks may give different lengths.
g = hvd.allgather(torch.full((rank + 1, 2), rank))
assert g.shape == (size * (size + 1) // 2, 2)
# broadcast and broadcast_ send root_rank's tensor.
assert hvd.broadcast(torch.tensor([rank]), root_rank=0).item() == 0
t = torch.tensor([rank])
hvd.broadcast_(t, root_rank=size - 1)
assert t.item() == size - 1
# alltoall returns the received tensor; with splits given, the received splits too.
out = hvd.alltoall(torch.arange(size) + 10 * rank)
assert out.tolist() == [10 * r + rank for r in range(size)]
out, splits = hvd.alltoall(torch.arange(size) + 10 * rank, splits=torch.ones(size, dtype=torch.int32))
assert out.tolist() == [10 * r + rank for r in range(size)] and splits.tolist() == [1] * size
# reducescatter: each rank gets its block of the reduced tensor.
rs = hvd.reducescatter(torch.ones(2 * size, 1), op=hvd.Sum)
assert rs.shape == (2, 1) and rs.sum().item() == 2 * size
# Objects.
assert hvd.broadcast_object({"seed": 7} if rank == 0 else None, root_rank=0) == {"seed": 7}
assert hvd.allgather_object(rank) == list(range(size))
# Process sets: registered at init or later; collectives among their ranks only.
evens = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
if evens.included():
    s = hvd.allreduce(torch.tensor([1]), op=hvd.Sum, process_set=evens)
    assert s.item() == len(evens.ranks)
hvd.remove_process_set(evens)
hvd.barrier()
# join: a rank without more data joins; the return value is the last rank to join.
last = hvd.join()
assert 0 <= last < size
# Errors are HorovodInternalError.
try:
    hvd.allreduce(torch.ones(rank + 1), name="shape.differs")
    assert size == 1
except hvd.HorovodInternalError as e:
    assert "shape.differs" in str(e)
hvd.shutdown()
if rank == 0:
    print(f"every documented call behaved as documented on {size} ranks")
