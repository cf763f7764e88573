"""A small elastic training job for tests/elastic_hosts.sh, written as a Horovod user writes
one (hvd.elastic.run, TorchState, ElasticSampler), in f64 so that runs compare bit for bit.

    elastic_train.py OUT_MODEL [--epochs 2] [--kill-rank R --kill-at-commit C]
                     [--kill-every-generation] [--stop-at-commit N] [--step-delay S]

  --kill-rank/--kill-at-commit: in generation 0 (every generation with --kill-every-generation;
      R = -1: the last rank), rank R kills itself (SIGKILL) a second after the generation's
      C-th commit;
  --raise-rank R --raise-at-commit C: in generation 0, rank R raises ValueError after commit C
      (a bug in one rank, not a lost one);
  --stop-at-commit N: leave after commit N as if for more hosts (the reference runs of the
      test: a job that changes size at a chosen commit);
  rank 0 prints "commit K step-time T" per commit, and per epoch whether every sample was
      processed exactly once (the committed counts, kept in the state).
"""
import argparse
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F

import tessera.torch as hvd

SAMPLES, BATCH, CLASSES = 90, 4, 3

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--kill-rank", type=int, default=None)
p.add_argument("--kill-at-commit", type=int, default=0)
p.add_argument("--kill-every-generation", action="store_true")
p.add_argument("--raise-rank", type=int, default=None)
p.add_argument("--raise-at-commit", type=int, default=0)
p.add_argument("--stop-at-commit", type=int, default=0)
p.add_argument("--step-delay", type=float, default=0.0)
args = p.parse_args()

hvd.init()
torch.manual_seed(0)
torch.set_num_threads(1)
X = torch.randn(SAMPLES, 1, 8, 8, dtype=torch.float64)
Y = torch.randint(0, CLASSES, (SAMPLES,))
model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(),
                            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                            torch.nn.Linear(4, CLASSES)).double()
BASE_LR = 0.05
optimizer = torch.optim.SGD(model.parameters(), lr=BASE_LR * hvd.size(), momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(range(SAMPLES), shuffle=True, seed=5)
state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0,
                               seen=torch.zeros(args.epochs, SAMPLES, dtype=torch.int64))


def on_reset():
    # Horovod's usual callback: the learning rate follows the number of ranks.
    for group in optimizer.param_groups:
        group["lr"] = BASE_LR * hvd.size()


state.register_reset_callbacks([on_reset])
generation = int(os.environ.get("TESSERA_ELASTIC_GENERATION", "0"))
kill_rank = None
if args.kill_rank is not None and (generation == 0 or args.kill_every_generation):
    kill_rank = args.kill_rank % hvd.size()


commits_here = 0  # this generation's


def after_commit(commits):
    global commits_here
    commits_here += 1
    if hvd.rank() == 0:
        print(f"commit {commits} step-time {time.time():.3f} ranks {hvd.size()}", flush=True)
    if kill_rank == hvd.rank() and commits_here == args.kill_at_commit:
        time.sleep(1.0)  # the others wait for it in the next step
        print(f"rank {hvd.rank()} kills itself at {time.time():.3f}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    if generation == 0 and args.raise_rank == hvd.rank() and commits == args.raise_at_commit:
        raise ValueError(f"rank {hvd.rank()}: a planted bug at commit {commits}")
    if commits == args.stop_at_commit:
        raise hvd.elastic.HostsUpdatedInterrupt()


def train_batch(indices, epoch):
    x, y = X[indices], Y[indices]
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
    counts = torch.zeros(SAMPLES, dtype=torch.int64)
    counts[indices] += 1
    state.seen[epoch] += hvd.allreduce(counts, op=hvd.Sum, name="seen")
    time.sleep(args.step_delay)


@hvd.elastic.run
def train(state):
    while state.epoch < args.epochs:
        mine = list(state.sampler)
        common = state.sampler.common_batches(BATCH)
        for b in range(0, (len(mine) + BATCH - 1) // BATCH):
            train_batch(mine[b * BATCH:(b + 1) * BATCH], state.epoch)
            if b < common:  # every rank has this batch: a commit is collective
                state.sampler.record_batch(b, BATCH)
                state.commit()
                after_commit(state._commits)
        hvd.join()  # a rank with one batch more than the others (shares differ by one sample)
        # The ranks that joined early missed that batch's counts: the largest count is right.
        state.seen[state.epoch] = hvd.allreduce(state.seen[state.epoch], op=hvd.Max,
                                                name="seen.epoch")
        if hvd.rank() == 0:
            counts = state.seen[state.epoch]
            if bool((counts == 1).all()):
                print(f"epoch {state.epoch}: every one of {SAMPLES} samples processed exactly "
                      "once", flush=True)
            else:
                print(f"epoch {state.epoch}: FAIL: samples processed "
                      f"{sorted(set(counts.tolist()))} times", flush=True)
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)


train(state)
if hvd.rank() == 0:
    torch.save(model.state_dict(), args.out)
    print(f"done at {hvd.size()} ranks: {args.out}", flush=True)
sys.exit(0)
