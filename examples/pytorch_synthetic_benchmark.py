"""Synthetic-data training throughput of a torchvision model through tessera.torch, measured as
Horovod's synthetic benchmark measures it: warm-up batches, then --num-iters timings of
--num-batches-per-iter training steps each, reported per rank (mean +- 1.96 standard deviations)
and in total.

    tessera run -np 2 python3 examples/pytorch_synthetic_benchmark.py --model resnet50
"""
import argparse
import timeit

import numpy as np
import torch
import torch.nn.functional as F
import torchvision.models

import tessera.torch as hvd

parser = argparse.ArgumentParser(description="tessera.torch synthetic benchmark")
parser.add_argument("--fp16-allreduce", action="store_true", help="gradients travel in f16")
parser.add_argument("--model", default="resnet50", help="a torchvision.models name")
parser.add_argument("--batch-size", type=int, default=32, help="per-rank batch")
parser.add_argument("--image-size", type=int, default=224)
parser.add_argument("--num-warmup-batches", type=int, default=10)
parser.add_argument("--num-batches-per-iter", type=int, default=10)
parser.add_argument("--num-iters", type=int, default=10)
parser.add_argument("--no-cuda", action="store_true", help="train on the CPU")
parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: keep)")
args = parser.parse_args()
args.cuda = not args.no_cuda and torch.cuda.is_available() and hvd.cuda_built()

hvd.init()
if args.threads:
    torch.set_num_threads(args.threads)
if args.cuda:
    torch.cuda.set_device(hvd.local_rank())

model = getattr(torchvision.models, args.model)()
if args.cuda:
    model.cuda()
lr_scaler = hvd.size()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * lr_scaler)
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=compression)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
target = torch.LongTensor(args.batch_size).random_() % 1000
if args.cuda:
    data, target = data.cuda(), target.cuda()


def benchmark_step():
    optimizer.zero_grad()
    output = model(data)
    loss = F.cross_entropy(output, target)
    loss.backward()
    optimizer.step()


def log(s, nl=True):
    if hvd.rank() != 0:
        return
    print(s, end="\n" if nl else "", flush=True)


device = "GPU" if args.cuda else "CPU"
log(f"Model: {args.model}")
log(f"Batch size: {args.batch_size}")
log(f"Number of {device}s: {hvd.size()}")
log("Running warmup...")
timeit.timeit(benchmark_step, number=args.num_warmup_batches)
log("Running benchmark...")
img_secs = []
for x in range(args.num_iters):
    t = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
    img_sec = args.batch_size * args.num_batches_per_iter / t
    log(f"Iter #{x}: {img_sec:.1f} img/sec per {device}")
    img_secs.append(img_sec)

img_sec_mean = np.mean(img_secs)
img_sec_conf = 1.96 * np.std(img_secs)
log(f"Img/sec per {device}: {img_sec_mean:.1f} +-{img_sec_conf:.1f}")
log(f"Total img/sec on {hvd.size()} {device}(s): {hvd.size() * img_sec_mean:.1f} "
    f"+-{hvd.size() * img_sec_conf:.1f}")
