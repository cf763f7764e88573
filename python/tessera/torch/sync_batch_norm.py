"""SyncBatchNorm: batch normalisation with the statistics of the batch concatenated over the
ranks (local batches may differ in size), and the matching reductions in backward: the module
here, its math in the core (tessera::sync_batch_norm, an autograd function of its own)."""
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from tessera.torch.basics import _C, _set_id, global_process_set


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
        # The statistics' math, its backward and the running statistics are the core's
        # (src/torch/batch_norm_math.h), the same as C++'s BatchNorm2d with sync: f64 sums over
        # the ranks, on x's device.
        with _C.Op("sync_batch_norm", None, _set_id(self.process_set, "SyncBatchNorm")) as o:
            pass  # the core refuses its own failures
        update = self.training and self.track_running_stats
        momentum = 0.0
        if update:
            with torch.no_grad():
                self.num_batches_tracked += 1
            momentum = (1.0 / float(self.num_batches_tracked) if self.momentum is None
                        else self.momentum)
        return _C.sync_batch_norm(x, self.weight, self.bias, self.eps, o.name, o.process_set,
                                  self.running_mean if update else None,
                                  self.running_var if update else None, momentum)
