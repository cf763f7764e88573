"""Semantic segmentation on a Pascal VOC layout (JPEGImages/, SegmentationClass/ palette PNGs,
ImageSets/Segmentation/{train,val}.txt), data parallel through tessera.torch: torchvision's
DeepLab-v3 (ResNet-50 backbone) with every BatchNorm replaced by tessera's SyncBatchNorm, the
poly learning-rate schedule, and the mean IoU from a confusion matrix summed over the ranks.

    tessera make-dataset shapes --out /tmp/shapes --size 200 --image-size 96
    tessera run -np 2 python3 examples/segmentation_voc.py --data /tmp/shapes --epochs 2
"""
import argparse
import os

import numpy as np
import torch
import torch.nn.functional as F
import torch.utils.data
import torch.utils.data.distributed
import torchvision
from PIL import Image

import tessera.torch as hvd

p = argparse.ArgumentParser(description="DeepLab-v3 on a VOC-layout data set")
p.add_argument("--data", required=True, help="the data set's folder (VOC layout)")
p.add_argument("--backbone", default="resnet50", choices=["resnet50", "resnet101"])
p.add_argument("--image-size", type=int, default=96, help="images are resized to this square")
p.add_argument("--batch-size", type=int, default=4, help="per rank")
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--lr", type=float, default=0.01, help="per rank; scaled by the ranks")
p.add_argument("--ignore-index", type=int, default=255)
args = p.parse_args()

hvd.init()
torch.manual_seed(0)
classes = open(os.path.join(args.data, "classes.txt")).read().split()


class VocSegmentation(torch.utils.data.Dataset):
    def __init__(self, root, split, size):
        ids = open(os.path.join(root, "ImageSets", "Segmentation", split + ".txt")).read()
        self.ids, self.root, self.size = ids.split(), root, size

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        image = Image.open(os.path.join(self.root, "JPEGImages", self.ids[i] + ".jpg"))
        mask = Image.open(os.path.join(self.root, "SegmentationClass", self.ids[i] + ".png"))
        image = image.convert("RGB").resize((self.size, self.size), Image.BILINEAR)
        mask = mask.resize((self.size, self.size), Image.NEAREST)  # palette indices = classes
        x = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1)
        x = (x - 0.45) / 0.225
        return x, torch.from_numpy(np.asarray(mask, dtype=np.int64))


def loader(split, shuffle):
    data = VocSegmentation(args.data, split, args.image_size)
    sampler = torch.utils.data.distributed.DistributedSampler(
        data, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=shuffle)
    return torch.utils.data.DataLoader(data, batch_size=args.batch_size, sampler=sampler,
                                       drop_last=shuffle), sampler


def sync_batch_norm(module):
    """The same module with every BatchNorm2d a SyncBatchNorm holding its parameters."""
    if isinstance(module, torch.nn.BatchNorm2d):
        sync = hvd.SyncBatchNorm(module.num_features, module.eps, module.momentum,
                                 module.affine, module.track_running_stats)
        sync.load_state_dict(module.state_dict())
        return sync
    for name, child in module.named_children():
        setattr(module, name, sync_batch_norm(child))
    return module


train_loader, train_sampler = loader("train", True)
val_loader, _ = loader("val", False)
builder = getattr(torchvision.models.segmentation, f"deeplabv3_{args.backbone}")
model = sync_batch_norm(builder(weights=None, weights_backbone=None, num_classes=len(classes),
                                aux_loss=False))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9,
                            weight_decay=1e-4)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
total_steps = args.epochs * len(train_loader)


def evaluate():
    """Mean IoU over the classes, from the confusion matrix summed over every rank."""
    model.eval()
    n = len(classes)
    confusion = torch.zeros(n * n, dtype=torch.int64)
    with torch.no_grad():
        for x, y in val_loader:
            pred = model(x)["out"].argmax(1)
            keep = y != args.ignore_index
            confusion += torch.bincount(y[keep] * n + pred[keep], minlength=n * n)
    confusion = hvd.allreduce(confusion, op=hvd.Sum, name="confusion").view(n, n).double()
    inter = confusion.diag()
    union = confusion.sum(0) + confusion.sum(1) - inter
    return (inter[union > 0] / union[union > 0]).mean().item()


step = 0
for epoch in range(args.epochs):
    model.train()
    train_sampler.set_epoch(epoch)
    for x, y in train_loader:
        for group in optimizer.param_groups:  # poly schedule
            group["lr"] = args.lr * hvd.size() * (1 - step / total_steps) ** 0.9
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x)["out"], y, ignore_index=args.ignore_index)
        loss.backward()
        optimizer.step()
        step += 1
    loss = hvd.allreduce(loss.detach(), name="epoch_loss").item()
    miou = evaluate()
    if hvd.rank() == 0:
        print(f"epoch {epoch + 1}: train loss {loss:.4f} val mIoU {miou:.4f} "
              f"({len(classes)} classes)", flush=True)
