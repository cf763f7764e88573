#!/usr/bin/env python3
"""PyTorch in Python, one process, synthetic data: the reference for `tessera bench train`.

The same measurement as tessera's bench train (and Horovod's pytorch_synthetic_benchmark.py):
warm-up batches, then --iters iterations of --batches-per-iter batches, each iteration ended by
waiting for the device, img/s with a 95% interval on a line starting with "Img/sec per rank".
The models are torchvision's ResNets and a DeepLab-v3+ of the same shape as tessera's
(src/models/deeplab.cc: torchvision's ResNet backbone with layer4 dilated, ASPP of 256 channels
at rates 6/12/18, the decoder's 48-channel skip from layer1); both print their parameter counts.
--compile adds torch.compile, the figure that CUDA graphs and fused kernels give PyTorch.
"""
import argparse
import json
import timeit

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision


def conv_bn_relu(cin, cout, kernel, dilation=1):
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, padding=dilation if kernel == 3 else 0, dilation=dilation,
                  bias=False),
        nn.BatchNorm2d(cout), nn.ReLU())


class DeepLabV3Plus(nn.Module):
    def __init__(self, num_classes, output_stride=16, aspp=256):
        super().__init__()
        r = torchvision.models.resnet50(
            replace_stride_with_dilation=[False, output_stride == 8, True])
        self.stem = nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool)
        self.layers = nn.ModuleList([r.layer1, r.layer2, r.layer3, r.layer4])
        high, low = 2048, 256
        rates = (6, 12, 18) if output_stride == 16 else (12, 24, 36)
        self.aspp = nn.ModuleList([conv_bn_relu(high, aspp, 1)] +
                                  [conv_bn_relu(high, aspp, 3, d) for d in rates])
        self.pool = conv_bn_relu(high, aspp, 1)
        self.project = conv_bn_relu(5 * aspp, aspp, 1)
        self.reduce = conv_bn_relu(low, 48, 1)
        self.fuse = nn.Sequential(conv_bn_relu(aspp + 48, aspp, 3), conv_bn_relu(aspp, aspp, 3))
        self.classifier = nn.Conv2d(aspp, num_classes, 1)

    def forward(self, x):
        low = self.layers[0](self.stem(x))
        high = self.layers[3](self.layers[2](self.layers[1](low)))
        branches = [m(high) for m in self.aspp]
        pooled = self.pool(F.adaptive_avg_pool2d(high, 1))
        branches.append(pooled.expand(-1, -1, high.shape[2], high.shape[3]))
        y = self.project(torch.cat(branches, 1))
        y = F.interpolate(y, size=low.shape[2:], mode="bilinear", align_corners=False)
        y = self.fuse(torch.cat([y, self.reduce(low)], 1))
        return F.interpolate(self.classifier(y), size=x.shape[2:], mode="bilinear",
                             align_corners=False)


def make_model(name, num_classes):
    if name in ("resnet18", "resnet50"):
        return getattr(torchvision.models, name)(num_classes=num_classes)
    if name == "deeplabv3plus_resnet50":  # torchvision's BasicBlock refuses dilation: no 18
        return DeepLabV3Plus(num_classes)
    raise SystemExit(f"--model {name!r}: accepted resnet18, resnet50, deeplabv3plus_resnet50")


def parse():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--num-classes", type=int, default=0, help="0: 1000, or 21 for DeepLab")
    p.add_argument("--device", default="cuda", help="cuda or cpu")
    p.add_argument("--precision", default="f32", choices=["f32", "bf16"],
                   help="bf16: autocast over f32 weights")
    p.add_argument("--memory-format", default="contiguous", choices=["contiguous", "channels-last"])
    p.add_argument("--cudnn-benchmark", action="store_true")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--warmup", type=int, default=10, help="batches before timing")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--batches-per-iter", type=int, default=10)
    p.add_argument("--json", default="", help="also write the figures here")
    return p.parse_args()


def main():
    a = parse()
    torch.backends.cudnn.benchmark = a.cudnn_benchmark
    segmentation = a.model.startswith("deeplab")
    classes = a.num_classes or (21 if segmentation else 1000)
    torch.manual_seed(0)
    device = torch.device(a.device)
    layout = torch.channels_last if a.memory_format == "channels-last" else torch.contiguous_format
    model = make_model(a.model, classes).to(device).to(memory_format=layout).train()
    params = sum(p.numel() for p in model.parameters())
    step_model = torch.compile(model) if a.compile else model
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(a.batch_size, 3, a.image_size, a.image_size, device=device)
    data = data.contiguous(memory_format=layout)
    shape = (a.batch_size, a.image_size, a.image_size) if segmentation else (a.batch_size,)
    target = torch.randint(classes, shape, device=device)

    def one_batch():
        opt.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            out = step_model(data)
        F.cross_entropy(out.float(), target).backward()
        opt.step()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def iteration():  # the device's queued work belongs to the iteration
        for _ in range(a.batches_per_iter):
            one_batch()
        sync()

    print(f"Model: {a.model}\nParameters: {params}\nBatch size: {a.batch_size}\n"
          f"Image size: {a.image_size}\nDevice: {device}\nPrecision: {a.precision}\n"
          f"Memory format: {a.memory_format}\nCompile: {a.compile}", flush=True)
    for _ in range(a.warmup):
        one_batch()
    sync()
    rates = []
    for i in range(a.iters):
        t = timeit.timeit(iteration, number=1)
        rates.append(a.batch_size * a.batches_per_iter / t)
        print(f"Iter #{i}: {rates[-1]:.2f} img/sec per rank", flush=True)
    mean, ci = float(np.mean(rates)), float(1.96 * np.std(rates))
    print(f"Img/sec per rank: {mean:.2f} +-{ci:.2f}")
    if device.type == "cuda":
        print(f"Peak device memory: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "parameters": params, "batch_size": a.batch_size,
                       "image_size": a.image_size, "precision": a.precision,
                       "memory_format": a.memory_format, "compile": a.compile,
                       "per_rank": rates, "per_rank_mean": mean, "per_rank_ci": ci}, f, indent=1)


if __name__ == "__main__":
    main()
