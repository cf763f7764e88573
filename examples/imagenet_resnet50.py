"""ResNet-50 (torchvision) on an ImageFolder tree (train/<class>/*, val/<class>/*), data
parallel through tessera.torch: each rank reads its share of every epoch (DistributedSampler),
the learning rate scales with the ranks after a linear warm-up, metrics are averaged over the
ranks by allreduce, rank 0 writes a checkpoint each epoch and a rerun resumes from the last.

    tessera make-dataset classes --out /tmp/classes --size 600 --image-size 64
    tessera run -np 2 python3 examples/imagenet_resnet50.py --train-dir /tmp/classes/train \
        --val-dir /tmp/classes/val --image-size 64 --epochs 2
"""
import argparse
import math
import os

import torch
import torch.nn.functional as F
import torch.utils.data
import torch.utils.data.distributed
import torchvision
from torchvision import datasets, transforms

import tessera.torch as hvd

p = argparse.ArgumentParser(description="ResNet-50 on an ImageFolder tree with tessera.torch")
p.add_argument("--train-dir", required=True)
p.add_argument("--val-dir", required=True)
p.add_argument("--checkpoint-format", default="./checkpoint-{epoch}.pth.tar")
p.add_argument("--arch", default="resnet50", help="a torchvision.models name")
p.add_argument("--image-size", type=int, default=224)
p.add_argument("--batch-size", type=int, default=32, help="per rank")
p.add_argument("--val-batch-size", type=int, default=32)
p.add_argument("--epochs", type=int, default=90)
p.add_argument("--base-lr", type=float, default=0.0125, help="per rank; scaled by the ranks")
p.add_argument("--warmup-epochs", type=float, default=5)
p.add_argument("--momentum", type=float, default=0.9)
p.add_argument("--wd", type=float, default=5e-5)
p.add_argument("--batches-per-allreduce", type=int, default=1)
p.add_argument("--fp16-allreduce", action="store_true")
p.add_argument("--workers", type=int, default=2, help="data loader workers per rank")
p.add_argument("--seed", type=int, default=42)
args = p.parse_args()

hvd.init()
torch.manual_seed(args.seed)

# Resume from the last checkpoint rank 0 can see; every rank starts at that epoch.
resume_from_epoch = 0
for epoch in range(args.epochs, 0, -1):
    if os.path.exists(args.checkpoint_format.format(epoch=epoch)):
        resume_from_epoch = epoch
        break
resume_from_epoch = hvd.broadcast(torch.tensor(resume_from_epoch), root_rank=0,
                                  name="resume_from_epoch").item()
verbose = hvd.rank() == 0

allreduce_batch = args.batch_size * args.batches_per_allreduce
normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
train_set = datasets.ImageFolder(args.train_dir, transforms.Compose([
    transforms.RandomResizedCrop(args.image_size), transforms.RandomHorizontalFlip(),
    transforms.ToTensor(), normalize]))
val_set = datasets.ImageFolder(args.val_dir, transforms.Compose([
    transforms.Resize(args.image_size), transforms.CenterCrop(args.image_size),
    transforms.ToTensor(), normalize]))
train_sampler = torch.utils.data.distributed.DistributedSampler(
    train_set, num_replicas=hvd.size(), rank=hvd.rank())
val_sampler = torch.utils.data.distributed.DistributedSampler(
    val_set, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
train_loader = torch.utils.data.DataLoader(train_set, batch_size=allreduce_batch,
                                           sampler=train_sampler, num_workers=args.workers)
val_loader = torch.utils.data.DataLoader(val_set, batch_size=args.val_batch_size,
                                         sampler=val_sampler, num_workers=args.workers)

model = getattr(torchvision.models, args.arch)(num_classes=len(train_set.classes))
optimizer = torch.optim.SGD(model.parameters(), lr=args.base_lr * hvd.size(),
                            momentum=args.momentum, weight_decay=args.wd)
optimizer = hvd.DistributedOptimizer(
    optimizer, named_parameters=model.named_parameters(),
    compression=hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none,
    backward_passes_per_step=args.batches_per_allreduce)

if resume_from_epoch > 0 and hvd.rank() == 0:
    state = torch.load(args.checkpoint_format.format(epoch=resume_from_epoch))
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
# Every rank starts from rank 0's weights and optimizer state (fresh or resumed).
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)


class Metric:
    """A running mean of a value, averaged over the ranks as it is added."""

    def __init__(self, name):
        self.name, self.sum, self.n = name, torch.tensor(0.0), 0

    def update(self, value):
        self.sum += hvd.allreduce(value.detach().cpu(), name=self.name)
        self.n += 1

    @property
    def avg(self):
        return (self.sum / max(self.n, 1)).item()


def accuracy(output, target):
    return output.argmax(dim=1).eq(target).float().mean()


def adjust_learning_rate(epoch, batch_idx):
    """Linear warm-up from base_lr to base_lr * size over warmup_epochs, then steps of 10x
    at epochs 30, 60 and 80 (Goyal et al.)."""
    if epoch < args.warmup_epochs:
        progress = (epoch + (batch_idx + 1) / len(train_loader)) / args.warmup_epochs
        factor = 1.0 / hvd.size() * (progress * (hvd.size() - 1) + 1)
    else:
        factor = 10.0 ** -sum(epoch >= e for e in (30, 60, 80))
    for group in optimizer.param_groups:
        group["lr"] = args.base_lr * hvd.size() * args.batches_per_allreduce * factor


def train(epoch):
    model.train()
    train_sampler.set_epoch(epoch)
    loss_m, acc_m = Metric("train_loss"), Metric("train_accuracy")
    for batch_idx, (data, target) in enumerate(train_loader):
        adjust_learning_rate(epoch, batch_idx)
        optimizer.zero_grad()
        for i in range(0, len(data), args.batch_size):  # local passes, one reduction
            data_b, target_b = data[i:i + args.batch_size], target[i:i + args.batch_size]
            output = model(data_b)
            loss = F.cross_entropy(output, target_b)
            acc_m.update(accuracy(output, target_b))
            loss_m.update(loss)
            (loss / math.ceil(len(data) / args.batch_size)).backward()
        optimizer.step()
    if verbose:
        print(f"epoch {epoch + 1}: train loss {loss_m.avg:.4f} accuracy {acc_m.avg:.4f}",
              flush=True)


def validate(epoch):
    model.eval()
    loss_m, acc_m = Metric("val_loss"), Metric("val_accuracy")
    with torch.no_grad():
        for data, target in val_loader:
            output = model(data)
            loss_m.update(F.cross_entropy(output, target))
            acc_m.update(accuracy(output, target))
    if verbose:
        print(f"epoch {epoch + 1}: val loss {loss_m.avg:.4f} accuracy {acc_m.avg:.4f}",
              flush=True)
    return acc_m.avg


def save_checkpoint(epoch):
    if hvd.rank() != 0:
        return
    path = args.checkpoint_format.format(epoch=epoch + 1)
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, tmp)
    os.replace(tmp, path)  # a crash never leaves a half-written checkpoint


if verbose and resume_from_epoch:
    print(f"resuming from epoch {resume_from_epoch}", flush=True)
for epoch in range(resume_from_epoch, args.epochs):
    train(epoch)
    validate(epoch)
    save_checkpoint(epoch)
