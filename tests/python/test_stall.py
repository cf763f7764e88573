"""Run on its own (the engine shuts down): ranks that name one tensor differently. Each waits
for the other's; the stall inspector names the tensors and who is missing, and every rank
raises within the stall time (TESSERA_STALL_SHUTDOWN_TIME, set to 3 s by this job)."""
import time

import pytest
import torch

import tessera.torch as hvd


def test_name_mismatch_raises_on_every_rank_naming_the_tensor_and_ranks():
    if hvd.size() < 2:
        pytest.skip("needs 2 ranks")
    name = "mm.name.rank0" if hvd.rank() == 0 else "mm.name.other"
    start = time.monotonic()
    with pytest.raises(hvd.HorovodInternalError) as e:
        hvd.allreduce(torch.ones(2), name=name)
    elapsed = time.monotonic() - start
    assert elapsed < 5.0, elapsed
    msg = str(e.value)
    assert "mm.name.rank0" in msg and "mm.name.other" in msg, msg
    assert "missing" in msg or "ranks" in msg, msg
