# A training script written for Horovod's PyTorch API, following the steps of Horovod's
# documentation ("Horovod with PyTorch"). tests/python_examples.sh runs it with its import line
# changed to `import tessera.torch as hvd` and nothing else.
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data
import torch.utils.data.distributed
import horovod.torch as hvd

# 1. Initialize Horovod.
hvd.init()
# 2. Pin each process to one GPU when there are GPUs; threads otherwise.
if torch.cuda.is_available():
    torch.cuda.set_device(hvd.local_rank())
torch.set_num_threads(1)
torch.manual_seed(1234)

# A data set every rank can build the same way; each rank reads its part through the sampler.
gen = torch.Generator().manual_seed(0)
x = torch.randn(256, 1, 8, 8, generator=gen)
y = (x.mean(dim=(1, 2, 3)) > 0).long()
train_dataset = torch.utils.data.TensorDataset(x, y)
train_sampler = torch.utils.data.distributed.DistributedSampler(
    train_dataset, num_replicas=hvd.size(), rank=hvd.rank())
train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=16, sampler=train_sampler)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 8 * 8, 2)

    def forward(self, t):
        return F.log_softmax(self.fc(F.relu(self.bn(self.conv(t))).flatten(1)), dim=1)


model = Net()
# 3. Scale the learning rate by the number of workers.
optimizer = optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.9)
# 4. Wrap the optimizer in hvd.DistributedOptimizer.
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=hvd.Compression.none, op=hvd.Average)
# 5. Broadcast the initial variable states from rank 0 to all other processes.
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

first_loss = None
for epoch in range(3):
    train_sampler.set_epoch(epoch)
    for batch_idx, (data, target) in enumerate(train_loader):
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
    avg = hvd.allreduce(loss.detach(), name="avg_loss")
    first_loss = avg.item() if first_loss is None else first_loss
    # 6. Save checkpoints only on worker 0.
    if hvd.rank() == 0:
        print(f"epoch {epoch}: loss {avg.item():.4f}", flush=True)

# The trainable parameters are the same on every rank (BatchNorm's running statistics are
# local, as in Horovod): compare their checksums.
sums = hvd.allgather_object([round(p.double().sum().item(), 12) for p in model.parameters()])
assert all(s == sums[0] for s in sums), sums
assert avg.item() < first_loss, (first_loss, avg.item())
if hvd.rank() == 0:
    print(f"trained as documented on {hvd.size()} ranks: loss {first_loss:.4f} -> "
          f"{avg.item():.4f}, parameters equal on every rank")
