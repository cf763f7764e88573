"""Horovod's PyTorch API over tessera's engine: `import tessera.torch as hvd`.

    hvd.init()
    model = ...; optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    loss.backward(); optimizer.step()      # gradients averaged over every rank
"""
from tessera.torch.basics import (HorovodInternalError, InvalidArgumentError, ProcessSet,
                                  TesseraError, add_process_set, ccl_built, cross_rank,
                                  cross_size, cuda_built, ddl_built, global_process_set,
                                  gloo_built, gloo_enabled, init, is_homogeneous,
                                  is_initialized, local_rank, local_size, mpi_built,
                                  mpi_enabled, mpi_threads_supported, nccl_built, rank,
                                  remove_process_set, rocm_built, shutdown, size,
                                  start_timeline, stop_timeline)
from tessera.torch.compression import Compression
from tessera.torch.functions import (allgather_object, broadcast_object,
                                     broadcast_optimizer_state, broadcast_parameters)
from tessera.torch.mpi_ops import (Adasum, Average, Max, Min, Product, Sum, allgather,
                                   allgather_async, allreduce, allreduce_, allreduce_async,
                                   allreduce_async_, alltoall, alltoall_async, barrier, broadcast,
                                   broadcast_, broadcast_async, broadcast_async_, grouped_allgather,
                                   grouped_allgather_async, grouped_allreduce, grouped_allreduce_,
                                   grouped_allreduce_async, grouped_allreduce_async_,
                                   grouped_reducescatter, grouped_reducescatter_async, join, poll,
                                   reducescatter, reducescatter_async, sparse_allreduce_async,
                                   synchronize)
from tessera.torch.optimizer import DistributedOptimizer
from tessera.torch.sync_batch_norm import SyncBatchNorm
from tessera.torch import elastic  # noqa: E402,F401  (Horovod: hvd.elastic.run, TorchState, ...)
