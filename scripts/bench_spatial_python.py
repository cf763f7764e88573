"""One training step of torchvision's ResNet-50 on one image, the step of `tessera bench spatial`
(SGD with momentum through the DistributedOptimizer, cross-entropy on 2 classes, one thread per
rank), either partitioned by tessera.torch.spatial over a grid or, with --grid 1x1, the ordinary
model on the whole image. Prints one JSON line on rank 0: the median step (the slowest rank's) and rank 0's time in halos and group sums,
the peak of CPU memory torch's allocator held during a step (the largest rank's; the counting
allocator of tessera._tessera) and the peak resident memory. scripts/bench_spatial_python.sh
runs it beside `tessera bench spatial`.

    mpirun -np 4 python3 scripts/bench_spatial_python.py --grid 2x2 --image-size 2048
"""
import argparse
import json
import resource
import statistics
import time

import torch
import torch.nn.functional as F
import torchvision

import tessera.torch as hvd
from tessera import _tessera
from tessera.torch import spatial


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--grid", default="2x2")
    p.add_argument("--image-size", type=int, default=2048)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--iters", type=int, default=3)
    args = p.parse_args()
    _tessera.track_cpu_memory()
    torch.set_num_threads(1)
    hvd.init()
    torch.manual_seed(1)
    grid = tuple(int(v) for v in args.grid.split("x"))
    net = torchvision.models.resnet50(num_classes=2).train()
    whole = grid == (1, 1)
    model = net if whole else spatial.partition(net, grid)
    hvd.broadcast_parameters(net.state_dict(), root_rank=0)
    sgd = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    opt = hvd.DistributedOptimizer(sgd, named_parameters=model.named_parameters())
    n = args.image_size
    if whole:
        tile = torch.randn(1, 3, n, n)
    else:  # pixel values do not change the cost; each rank makes its own tile
        (r0, r1), (c0, c1) = model.grid.rows(n), model.grid.cols(n)
        tile = torch.randn(1, 3, r1 - r0, c1 - c0)
    labels = torch.zeros(1, dtype=torch.long)
    steps, peaks, forwards, befores, moves = [], [], [], [], []
    for i in range(args.warmup + args.iters):
        _tessera.reset_cpu_memory_peak()
        moved0 = sum(_tessera.spatial_seconds())
        t0 = time.perf_counter()
        opt.zero_grad()
        before = float(_tessera.cpu_memory_stats()["held_bytes"])
        loss = F.cross_entropy(model(tile), labels)
        after_forward = float(_tessera.cpu_memory_stats()["held_bytes"])
        loss.backward()
        opt.step()
        s = time.perf_counter() - t0
        if i >= args.warmup:
            moves.append(sum(_tessera.spatial_seconds()) - moved0)
            steps.append(hvd.allreduce(torch.tensor([s]), op=hvd.Max, name=f"step.{i}").item())
            peak = float(_tessera.cpu_memory_stats()["peak_bytes"])
            peaks.append(hvd.allreduce(torch.tensor([peak]), op=hvd.Max, name=f"peak.{i}").item())
            forwards.append(hvd.allreduce(torch.tensor([after_forward]), op=hvd.Max,
                                          name=f"fwd.{i}").item())
            befores.append(hvd.allreduce(torch.tensor([before]), op=hvd.Max, name=f"pre.{i}").item())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    rss = hvd.allreduce(torch.tensor([rss]), op=hvd.Max, name="rss").item()
    if hvd.rank() == 0:
        print(json.dumps({"grid": args.grid, "image_size": n, "ranks": hvd.size(),
                          "step_s": statistics.median(steps), "steps_s": steps,
                          "halo_and_group_s_rank0": statistics.median(moves),
                          "peak_allocator_gib": max(peaks) / 2**30,
                          "held_before_step_gib": max(befores) / 2**30,
                          "held_after_forward_gib": max(forwards) / 2**30, "peak_rss_gib": rss}),
              flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
