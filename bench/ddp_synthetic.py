#!/usr/bin/env python3
"""PyTorch DDP over gloo on synthetic data: the reference for `tessera bench train`.

The same measurement as Horovod's pytorch_synthetic_benchmark.py and tessera's bench train:
warm-up batches, then --iters iterations of --batches-per-iter batches, img/s per rank and in
total with a 95% interval (1.96 standard deviations), on a line starting with "Total img/sec".
Run with Debian's python3-torch (the same libtorch as tessera): /usr/bin/python3.
"""
import argparse
import json
import os
import resource
import timeit

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
import torchvision


def parse():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="resnet50", help="resnet18 or resnet50")
    p.add_argument("--batch-size", type=int, default=32, help="samples per rank")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--warmup", type=int, default=10, help="batches before timing")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--batches-per-iter", type=int, default=10)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--nprocs", type=int, default=2, help="ranks (processes) on this machine")
    p.add_argument("--port", type=int, default=29512)
    p.add_argument("--json", default="", help="also write the figures here")
    return p.parse_args()


def worker(rank, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=args.nprocs)
    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)(num_classes=1000)
    model = torch.nn.parallel.DistributedDataParallel(model)  # gloo, default buckets
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(1000, (args.batch_size,))

    def one_batch():
        opt.zero_grad()
        F.cross_entropy(model(data), target).backward()
        opt.step()

    for _ in range(args.warmup):
        one_batch()
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    rates = []
    for i in range(args.iters):
        t = timeit.timeit(one_batch, number=args.batches_per_iter)
        rates.append(args.batch_size * args.batches_per_iter / t)
        if rank == 0:
            print(f"Iter #{i}: {rates[-1]:.2f} img/sec per rank", flush=True)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0) / (
        args.iters * args.batches_per_iter)
    if rank == 0:
        mean, ci = np.mean(rates), 1.96 * np.std(rates)
        n = args.nprocs
        print(f"Img/sec per rank: {mean:.2f} +-{ci:.2f}")
        print(f"Total img/sec on {n} rank(s): {mean * n:.2f} +-{ci * n:.2f}")
        print(f"Minor page faults per batch (rank 0): {faults:.0f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"model": args.model, "batch_size": args.batch_size,
                           "image_size": args.image_size, "ranks": n, "threads": args.threads,
                           "per_rank": rates, "per_rank_mean": mean, "total_mean": mean * n,
                           "total_ci": ci * n, "minor_faults_per_batch": faults}, f, indent=1)
    dist.destroy_process_group()


def main():
    args = parse()
    if args.model not in ("resnet18", "resnet50"):
        raise SystemExit(f"--model {args.model!r}: accepted resnet18, resnet50")
    print(f"Model: {args.model}\nBatch size: {args.batch_size}\nImage size: {args.image_size}\n"
          f"Number of ranks: {args.nprocs}\nThreads per rank: {args.threads}\n"
          f"GLIBC_TUNABLES: {os.environ.get('GLIBC_TUNABLES', '(unset)')}", flush=True)
    mp.spawn(worker, args=(args,), nprocs=args.nprocs, join=True)


if __name__ == "__main__":
    main()
