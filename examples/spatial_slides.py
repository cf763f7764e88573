"""Training on slides too large for one rank, tiled over a grid of ranks with
tessera.torch.spatial: torchvision's ResNet-50 (a label per slide) or the small U-Net below (a
label per pixel), each rank reading only its tile of each slide, combined with data parallelism
(grid x data ranks) and tessera's DistributedOptimizer.

    tessera run -np 4 python3 examples/spatial_slides.py --model resnet50 --size 8192 --grid 2x2
    tessera run -np 8 python3 examples/spatial_slides.py --model unet --grid 2x2   # 2 data ranks

The slides are synthetic tiled TIFFs written once by rank 0 (stripes whose direction is the
class; the U-Net's pixel label is whether a pixel is in a bright stripe), so the label of a tile's
pixels comes from the tile itself and no rank ever holds a whole slide.
"""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

import tessera.torch as hvd
from tessera import _tessera
from tessera.torch import spatial


class UNet(nn.Module):
    """A small U-Net: two poolings, transposed convolutions back up, skip concatenations; odd
    sizes are met by padding the upsampled map to its skip's size."""

    def __init__(self, in_channels=3, classes=2, width=8):
        super().__init__()
        w = width
        self.down1, self.down2 = self.block(in_channels, w), self.block(w, 2 * w)
        self.bottom = self.block(2 * w, 4 * w)
        self.pool = nn.MaxPool2d(2)
        self.up2, self.dec2 = nn.ConvTranspose2d(4 * w, 2 * w, 2, stride=2), self.block(4 * w, 2 * w)
        self.up1, self.dec1 = nn.ConvTranspose2d(2 * w, w, 2, stride=2), self.block(2 * w, w)
        self.head = nn.Conv2d(w, classes, 1)

    @staticmethod
    def block(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o),
                             nn.ReLU(inplace=True), nn.Conv2d(o, o, 3, padding=1, bias=False),
                             nn.BatchNorm2d(o), nn.ReLU(inplace=True))

    @staticmethod
    def match(x, skip):
        dy, dx = skip.size(2) - x.size(2), skip.size(3) - x.size(3)
        return F.pad(x, [dx // 2, dx - dx // 2, dy // 2, dy - dy // 2])

    def forward(self, x):
        d1 = self.down1(x)
        d2 = self.down2(self.pool(d1))
        b = self.bottom(self.pool(d2))
        x = self.dec2(torch.cat([d2, self.match(self.up2(b), d2)], 1))
        x = self.dec1(torch.cat([d1, self.match(self.up1(x), d1)], 1))
        return self.head(x)


def write_slides(folder, count, size):
    """Synthetic slides: slide i has stripes, horizontal when i is even (class 0), else vertical."""
    os.makedirs(folder, exist_ok=True)
    for i in range(count):
        path = os.path.join(folder, f"slide{i}.tif")
        if os.path.exists(path):
            continue

        def fill(y, x, h, w, i=i):
            rows = torch.arange(y, y + h).view(-1, 1).expand(h, w)
            cols = torch.arange(x, x + w).view(1, -1).expand(h, w)
            bright = ((rows if i % 2 == 0 else cols) // 16) % 2 == 0
            base = torch.where(bright, 200, 40).to(torch.uint8)
            noise = torch.randint(0, 30, (h, w, 3), dtype=torch.uint8,
                                  generator=torch.Generator().manual_seed(y * 7919 + x + i))
            return (base.unsqueeze(-1) + noise).contiguous()
        _tessera.write_tiled_tiff(path + ".part", size, size, 256 if size >= 1024 else 64, fill)
        os.replace(path + ".part", path)  # whole slides only: a crash leaves no half file


def parse_args():
    p = argparse.ArgumentParser(description="ResNet-50 or a U-Net on tiled slides")
    p.add_argument("--model", default="resnet50", choices=["resnet50", "unet"])
    p.add_argument("--size", type=int, default=8192, help="slide height and width, pixels")
    p.add_argument("--grid", default="2x2", help="tiles down x across (P x Q)")
    p.add_argument("--slides", default="spatial-slides", help="folder of the synthetic slides")
    p.add_argument("--count", type=int, default=4, help="slides to write and cycle through")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--lr", type=float, default=0.001, help="SGD, momentum 0.9 (one image per step)")
    p.add_argument("--checkpoint", default="", help="rank 0 saves the model's state_dict here")
    return p.parse_args()


def main():
    args = parse_args()
    hvd.init()
    torch.manual_seed(0)
    if hvd.rank() == 0:
        write_slides(args.slides, args.count, args.size)
    hvd.barrier()
    grid = tuple(int(v) for v in args.grid.lower().split("x"))
    net = torchvision.models.resnet50(num_classes=2) if args.model == "resnet50" else UNet()
    model = spatial.partition(net, grid=grid)
    data_rank, data_size = model.grid.d, model.grid.data
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(net.state_dict(), root_rank=0)
    for step in range(args.steps):
        index = (step * data_size + data_rank) % args.count  # each data rank its own slide
        tile = spatial.read_tile(os.path.join(args.slides, f"slide{index}.tif"), model)
        opt.zero_grad()
        out = model(tile)
        if args.model == "resnet50":  # whole logits on every rank of the grid: the loss itself
            loss = F.cross_entropy(out, torch.tensor([index % 2]))
        else:  # a tile of the logits: this tile's share of the mean, times the grid's size
            target = (tile.mean(dim=1) > 0.5).long()
            h, w = out.shape[-2:]
            pixels = model.grid.group_sum(torch.tensor([float(h * w)], dtype=torch.float64))
            loss = F.cross_entropy(out, target, reduction="sum") * model.loss_scale / pixels.item()
        loss.backward()
        opt.step()
        shown = hvd.allreduce(loss.detach(), name="loss") / (1 if args.model == "resnet50"
                                                             else model.loss_scale)
        if hvd.rank() == 0:
            print(f"step {step}: loss {shown.item():.4f} (tile {tuple(tile.shape[-2:])} of "
                  f"{args.size}x{args.size}, grid {grid[0]}x{grid[1]} x {data_size} data)",
                  flush=True)
    if hvd.rank() == 0:
        print(model.format_plan() if args.model == "unet" else "\n".join(
            model.format_plan().splitlines()[:6]))
        if args.checkpoint:
            torch.save(model.state_dict(), args.checkpoint + ".part")
            os.replace(args.checkpoint + ".part", args.checkpoint)
            whole = torchvision.models.resnet50(num_classes=2) if args.model == "resnet50" \
                else UNet()
            whole.load_state_dict(torch.load(args.checkpoint))
            print(f"checkpoint {args.checkpoint} loaded into the unpartitioned {args.model}")


if __name__ == "__main__":
    main()
