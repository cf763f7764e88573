"""init, ranks, build flags, process sets."""
import os
import subprocess
import sys

import pytest
import torch

import tessera.torch as hvd


def test_ranks_match_mpirun():
    assert hvd.is_initialized()
    assert hvd.size() == int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    assert hvd.rank() == int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    assert hvd.local_rank() == int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
    assert hvd.local_size() == int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1"))
    # One host: every rank is on node 0 of 1.
    assert hvd.cross_rank() == 0 and hvd.cross_size() == 1
    assert hvd.is_homogeneous()
    assert hvd.mpi_threads_supported() and hvd.mpi_enabled() and hvd.mpi_built()
    assert not hvd.gloo_built()
    # Truthful: NCCL only where tessera has it and takes CUDA tensors (the build says which).
    from tessera import _build_info
    assert hvd.nccl_built() is _build_info.nccl
    assert not hvd.nccl_built() or hvd.cuda_built()
    if torch.version.cuda is None:  # a CPU torch (Debian's): no CUDA tensors to take
        assert hvd.cuda_built() is False
    assert hvd.global_process_set.ranks == list(range(hvd.size()))
    assert hvd.global_process_set.size() == hvd.size()
    assert hvd.global_process_set.rank() == hvd.rank()


def test_init_twice_is_harmless_and_comm_must_be_every_rank():
    hvd.init()
    hvd.init(comm=list(range(hvd.size())))
    if hvd.size() > 1:
        with pytest.raises(ValueError, match="every rank of MPI_COMM_WORLD"):
            hvd.init(comm=[0])


def test_calls_before_init_raise_saying_so():
    code = ("import torch, tessera.torch as hvd\n"
            "for f in (hvd.rank, lambda: hvd.allreduce(torch.ones(1)),\n"
            "          lambda: hvd.broadcast_parameters({'w': torch.ones(1)}, 0)):\n"
            "    try:\n        f()\n    except ValueError as e:\n"
            "        assert 'call tessera.torch.init()' in str(e), e\n"
            "    else:\n        raise SystemExit('no error before init')\n"
            "print('ok')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_process_sets_add_use_and_remove():
    n = hvd.size()
    evens = hvd.add_process_set([r for r in range(n) if r % 2 == 0])
    odds = hvd.add_process_set(hvd.ProcessSet([r for r in range(n) if r % 2 == 1])) if n > 1 \
        else None
    mine = evens if hvd.rank() % 2 == 0 else odds
    assert mine.included()
    assert mine.rank() == hvd.rank() // 2
    x = torch.tensor([float(hvd.rank())])
    got = hvd.allreduce(x, op=hvd.Sum, name="ps.sum", process_set=mine)
    assert got.item() == sum(mine.ranks)
    other = odds if mine is evens else evens
    if other is not None:
        assert not other.included()
        with pytest.raises(ValueError, match="is not in ProcessSet"):
            hvd.allreduce(x, name="ps.wrong", process_set=other)
    assert hvd.remove_process_set(evens)
    if odds is not None:
        assert hvd.remove_process_set(odds)
    assert evens.process_set_id is None
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(x, name="ps.removed", process_set=evens)


def test_process_set_with_ranks_out_of_range_is_refused():
    with pytest.raises(ValueError, match="must be a rank in"):
        hvd.add_process_set([hvd.size()])


def test_init_registers_process_sets():
    # A second init adds the sets it is given (the engine is running already).
    ps = hvd.ProcessSet(list(range(hvd.size())))
    hvd.init(process_sets=[ps])
    assert ps.process_set_id is not None and ps.included()
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum, name="ps.init", process_set=ps)[0] == \
        hvd.size()
    hvd.remove_process_set(ps)


def test_unnamed_calls_on_a_subset_leave_the_other_ranks_names_alone():
    # Only rank 0's set runs unnamed collectives; the next unnamed global ones must still pair.
    solo = hvd.add_process_set([0])
    if hvd.rank() == 0:
        for _ in range(3):
            hvd.allgather(torch.ones(1), process_set=solo)
            hvd.alltoall(torch.ones(1), splits=[1], process_set=solo)
    got = hvd.allgather(torch.tensor([hvd.rank()]))
    assert got.tolist() == list(range(hvd.size()))
    hvd.remove_process_set(solo)
