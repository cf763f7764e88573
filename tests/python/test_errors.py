"""Ranks that disagree on a collective: an exception on every rank, within 5 s, naming the
tensor, what differs and the ranks on each side. (A name that differs: test_stall.py.)"""
import time

import pytest
import torch

import tessera.torch as hvd


def expect_on_every_rank(call, *fragments):
    start = time.monotonic()
    with pytest.raises(hvd.HorovodInternalError) as e:
        call()
    assert time.monotonic() - start < 5.0
    for f in fragments:
        assert f in str(e.value), str(e.value)
    # Every rank raised: they all reach the next collective, which works.
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name=f"after.{fragments[0]}").item() == \
        hvd.size()


@pytest.mark.skipif("hvd.size() < 2")
def test_shape_mismatch():
    me = hvd.rank()
    shape = (3,) if me == 0 else (4,)
    expect_on_every_rank(lambda: hvd.allreduce(torch.ones(shape), name="mm.shape"),
                         "mm.shape", "shape", "ranks 0 vs ranks 1")


@pytest.mark.skipif("hvd.size() < 2")
def test_dtype_mismatch():
    dtype = torch.float32 if hvd.rank() == 0 else torch.float64
    expect_on_every_rank(lambda: hvd.allreduce(torch.ones(3, dtype=dtype), name="mm.dtype"),
                         "mm.dtype", "dtype")


@pytest.mark.skipif("hvd.size() < 2")
def test_op_mismatch():
    op = hvd.Sum if hvd.rank() == 0 else hvd.Max
    expect_on_every_rank(lambda: hvd.allreduce(torch.ones(3), op=op, name="mm.op"), "mm.op")


@pytest.mark.skipif("hvd.size() < 2")
def test_collective_kind_mismatch():
    def call():
        if hvd.rank() == 0:
            return hvd.allreduce(torch.ones(2), name="mm.kind")
        return hvd.broadcast(torch.ones(2), 0, name="mm.kind")
    expect_on_every_rank(call, "mm.kind")


def test_error_type_is_catchable_as_horovod_and_as_runtime_error():
    assert issubclass(hvd.HorovodInternalError, RuntimeError)
    assert issubclass(hvd.InvalidArgumentError, ValueError)
    assert issubclass(hvd.InvalidArgumentError, hvd.HorovodInternalError)
