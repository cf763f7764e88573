"""Every rank runs the same tests in the same order (collectives pair up by name), under
mpirun: mpirun -np N /usr/bin/python3 -m pytest tests/python (PYTHONPATH=build/python)."""
import pytest
import torch

import tessera.torch as hvd


@pytest.fixture(scope="session", autouse=True)
def tessera_session():
    torch.manual_seed(0)
    hvd.init()
    yield
    hvd.shutdown()


# Every dtype Horovod's allreduce accepts, and the floating ones.
ALL_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
              torch.bfloat16, torch.float32, torch.float64]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def rank_tensor(rank, shape, dtype, salt=0):
    """A tensor of small integers that depends on the rank, exact in every dtype (values
    0..9 so that sums over 3 ranks and products stay exact in uint8, int8 and float16)."""
    n = 1
    for s in shape:
        n *= s
    base = (torch.arange(n, dtype=torch.int64) * 7 + rank * 3 + salt) % 4
    return base.view(shape).to(dtype)
