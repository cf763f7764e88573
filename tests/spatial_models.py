"""tessera.torch.spatial against the whole image, at 4 ranks (CTest python_spatial_np4):

1. torchvision resnet50, deeplabv3_resnet50 (dilated), fcn_resnet50 and the U-Net of
   examples/spatial_slides.py (transposed convolutions, skip concatenations), in f64, on 1x2, 2x1,
   2x2 and 1x4 grids of a 45x37 image (divisible by none of them): the forward output, every
   parameter's gradient and the BatchNorm running statistics against the same model run whole in
   one process. 1x2 and 2x1 run as 2 data ranks x 2 tiles on the same batch.
2. 2 data ranks x 2x1 tiles, each data rank its own image, SyncBatchNorm, one step of the
   DistributedOptimizer: the parameters equal one process's step on the 2-image batch.

    mpirun -np 4 python3 tests/spatial_models.py [model ...]
"""
import copy
import importlib.util
import os
import sys

import torch
import torch.nn as nn
import torchvision

import tessera.torch as hvd
from tessera.torch import spatial

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "spatial_slides", os.path.join(HERE, "..", "examples", "spatial_slides.py"))
slides = importlib.util.module_from_spec(spec)
spec.loader.exec_module(slides)

# Largest differences measured (this machine, 2026-12-07) and the tolerances, about 100x:
# forward, absolute: measured <= 3.6e-13 (deeplab 2x2)      -> 5e-11
# gradients, relative to the model's largest gradient: <= 2.7e-12 (deeplab) -> 3e-10
# running statistics, absolute: measured <= 9.5e-13 (resnet50 1x4) -> 1e-10
FORWARD_TOL, GRAD_TOL, STATS_TOL = 5e-11, 3e-10, 1e-10
GRIDS = [(1, 2), (2, 1), (2, 2), (1, 4)]
SIZE = (45, 37)


def build(name):
    torch.manual_seed(1)
    seg = torchvision.models.segmentation
    make = {"resnet50": lambda: torchvision.models.resnet50(num_classes=5),
            "deeplabv3_resnet50": lambda: seg.deeplabv3_resnet50(
                weights=None, weights_backbone=None, num_classes=3, aux_loss=False),
            "fcn_resnet50": lambda: seg.fcn_resnet50(
                weights=None, weights_backbone=None, num_classes=3, aux_loss=False),
            "unet": lambda: slides.UNet(width=4)}[name]
    model = make().double()
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0  # masks are drawn per tile: not the whole image's draws
    return model


def output(y):
    return y["out"] if isinstance(y, dict) else y


def loss_of(model, y, weights):
    """Each rank's loss under the partitioner's convention: a tiled output's share times the
    grid's size; a whole (replicated) output's loss itself."""
    if y.dim() == 4:
        return (y * model.grid.tile_of(weights)).sum() * model.loss_scale
    return (y * weights).sum()


def compare(name, grid, ref, ref_out, part, out):
    full = spatial.gather(out, part) if out.dim() == 4 else out
    fwd = (full - ref_out).abs().max().item()
    scale = max(p.grad.abs().max().item() for p in ref.parameters())
    grad = 0.0
    for (pname, p), q in zip(part.module.named_parameters(), ref.parameters()):
        g = hvd.allreduce(p.grad, name=f"{name}.{grid}.{pname}")  # DistributedOptimizer's average
        grad = max(grad, (g - q.grad).abs().max().item() / scale)
    stats = max([(a - b).abs().max().item() for a, b in zip(part.module.buffers(), ref.buffers())
                 if a.is_floating_point()] + [0.0])
    if hvd.rank() == 0:
        print(f"{name:20s} grid {grid[0]}x{grid[1]}: forward {fwd:.1e} (tol {FORWARD_TOL:.0e}), "
              f"gradients {grad:.1e} (tol {GRAD_TOL:.0e}), running stats {stats:.1e}", flush=True)
    assert fwd <= FORWARD_TOL and grad <= GRAD_TOL and stats <= STATS_TOL, (name, grid)


def exactness(name):
    model = build(name)
    x = torch.randn((2, 3) + SIZE, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    ref = copy.deepcopy(model)
    ref_out = output(ref(x))
    weights = torch.randn(ref_out.shape, dtype=torch.float64,
                          generator=torch.Generator().manual_seed(6))
    (ref_out * weights).sum().backward()
    for grid in GRIDS:
        part = spatial.partition(copy.deepcopy(model), grid)
        out = output(part(spatial.scatter(x, part)))
        loss_of(part, out, weights).backward()
        compare(name, grid, ref, ref_out.detach(), part, out)


def data_times_tiles():
    """2 data ranks x 2x1 tiles with SyncBatchNorm and a DistributedOptimizer step equal one
    process's step on the 2-image batch."""
    model = slides.UNet(width=4).double()
    x = torch.randn((2, 3) + SIZE, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    ref = copy.deepcopy(model)
    y = ref(x)
    weights = torch.randn(y.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    ((y * weights).sum() / 2).backward()  # the mean over the batch of each image's loss
    torch.optim.SGD(ref.parameters(), lr=0.1).step()
    part = spatial.partition(nn.SyncBatchNorm.convert_sync_batchnorm(copy.deepcopy(model)), (2, 1))
    d = part.grid.d
    opt = hvd.DistributedOptimizer(torch.optim.SGD(part.parameters(), lr=0.1),
                                   named_parameters=part.named_parameters())
    out = part(spatial.scatter(x[d:d + 1], part))
    loss_of(part, out, weights[d:d + 1]).backward()
    opt.step()
    worst = max((a - b).abs().max().item() for a, b in zip(part.module.parameters(),
                                                           ref.parameters()))
    if hvd.rank() == 0:
        print(f"2 data x 2x1 tiles, SyncBatchNorm, one SGD step: parameters differ by {worst:.1e} "
              f"from one process on the 2-image batch (tol {FORWARD_TOL:.0e})", flush=True)
    assert worst <= FORWARD_TOL
    loaded = slides.UNet(width=4).double()
    loaded.load_state_dict(part.state_dict())  # a checkpoint loads into the unpartitioned model


def main():
    hvd.init()
    assert hvd.size() == 4, "run at 4 ranks"
    names = sys.argv[1:] or ["resnet50", "deeplabv3_resnet50", "fcn_resnet50", "unet"]
    for name in names:
        exactness(name)
    data_times_tiles()
    if hvd.rank() == 0:
        print("spatial models: all exact", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
