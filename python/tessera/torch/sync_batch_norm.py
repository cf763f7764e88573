"""SyncBatchNorm: batch normalisation with the statistics of the batch concatenated over the
ranks (local batches may differ in size), and the matching reductions in backward."""
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from tessera.torch.basics import global_process_set
from tessera.torch.mpi_ops import Sum, _allreduce_async, synchronize


def _sum_over_ranks(t, process_set):
    return synchronize(_allreduce_async(t.contiguous(), None, Sum, 1.0, 1.0, process_set, False))


def _per_channel(t):
    """[N, C, ...] -> the dimensions to reduce over (all but C), and C's broadcast shape."""
    dims = [0] + list(range(2, t.dim()))
    shape = [1, t.shape[1]] + [1] * (t.dim() - 2)
    return dims, shape


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps, process_set):
        dims, shape = _per_channel(x)
        count = torch.tensor([x.numel() / x.shape[1]], dtype=x.dtype)
        stats = torch.cat([count, x.sum(dims), (x * x).sum(dims)])
        stats = _sum_over_ranks(stats, process_set)
        c = x.shape[1]
        n, total, squares = stats[0], stats[1:1 + c], stats[1 + c:]
        mean = total / n
        var = (squares / n - mean * mean).clamp_min(0)  # biased: normalisation uses it
        invstd = torch.rsqrt(var + eps)
        xhat = (x - mean.view(shape)) * invstd.view(shape)
        y = xhat * weight.view(shape) + bias.view(shape) if weight is not None else xhat
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.n = n
        ctx.process_set = process_set
        ctx.mark_non_differentiable(mean, var)
        return y, mean, var, n

    @staticmethod
    def backward(ctx, dy, _mean, _var, _n):
        xhat, invstd, weight = ctx.saved_tensors
        dims, shape = _per_channel(dy)
        sum_dy = dy.sum(dims)
        sum_dy_xhat = (dy * xhat).sum(dims)
        dweight = sum_dy_xhat if weight is not None else None
        dbias = sum_dy if weight is not None else None
        # The mean and the variance depend on every rank's inputs: their terms of dx need the
        # sums over every rank.
        both = _sum_over_ranks(torch.cat([sum_dy, sum_dy_xhat]), ctx.process_set)
        c = dy.shape[1]
        g_sum, g_xhat = both[:c] / ctx.n, both[c:] / ctx.n
        scale = invstd * (weight if weight is not None else 1.0)
        dx = (dy - g_sum.view(shape) - xhat * g_xhat.view(shape)) * scale.view(shape)
        return dx, dweight, dbias, None, None


class SyncBatchNorm(_BatchNorm):
    """Drop-in for torch.nn.BatchNorm{1,2,3}d (same parameters, buffers and state_dict names);
    in training, the statistics are those of the batch over every rank of `process_set`."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, x):
        if x.dim() < 2:
            raise ValueError(f"SyncBatchNorm expects [N, C, ...] input, got {x.dim()}D")

    def forward(self, x):
        self._check_input_dim(x)
        if not self.training and self.track_running_stats:
            return torch.nn.functional.batch_norm(x, self.running_mean, self.running_var,
                                                  self.weight, self.bias, False, 0.0, self.eps)
        y, mean, var, n = _SyncBatchNormFunction.apply(x, self.weight, self.bias, self.eps,
                                                       self.process_set)
        if self.training and self.track_running_stats:
            self._update_running(mean, var, n)
        return y

    @torch.no_grad()
    def _update_running(self, mean, var, n):
        self.num_batches_tracked += 1
        momentum = (1.0 / float(self.num_batches_tracked) if self.momentum is None
                    else self.momentum)
        unbiased = var * (n / (n - 1)) if n > 1 else var
        self.running_mean.mul_(1 - momentum).add_(mean.to(self.running_mean.dtype), alpha=momentum)
        self.running_var.mul_(1 - momentum).add_(unbiased.to(self.running_var.dtype),
                                                 alpha=momentum)
