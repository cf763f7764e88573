"""Gradient compression on the wire (Horovod's Compression.none / .fp16, and .bf16)."""
import torch


class Compressor:
    """compress(tensor) -> (tensor to send, context); decompress(received, context) -> tensor."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


def _cast_compressor(wire_dtype):
    class Cast(Compressor):
        @staticmethod
        def compress(tensor):
            # Only floating tensors travel narrower; integers are sent as they are.
            if tensor.dtype.is_floating_point and tensor.dtype != wire_dtype:
                return tensor.to(wire_dtype), tensor.dtype
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor if ctx is None else tensor.to(ctx)

    Cast.__name__ = f"{wire_dtype}Compressor"
    return Cast


FP16Compressor = _cast_compressor(torch.float16)
BF16Compressor = _cast_compressor(torch.bfloat16)


class Compression:
    """The compressors DistributedOptimizer and allreduce accept."""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
