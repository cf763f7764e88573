"""Horovod's elastic API over tessera's restarts: `import tessera.torch as hvd`, then

    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)
    state.register_reset_callbacks([on_reset])      # e.g. scale the learning rate by size()

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch, (x, y) in enumerate(loader, start=state.batch): ...
                state.sampler.record_batch(state.batch, batch_size)
                state.commit()                        # every few batches
            state.batch = 0
            state.sampler.set_epoch(state.epoch + 1)
    train(state)

run under `tessera run --min-np N --max-np M --host-discovery-script FILE python3 train.py`.

Horovod resets in the same processes; tessera's MPI cannot survive a lost rank, so its
supervisor starts the job again (docs/reliability.md, "Elastic training"). What carries the
state across is a *snapshot*: commit() keeps the state in memory and rank 0 writes it, every
TESSERA_ELASTIC_SNAPSHOT_EVERY commits (1 by default) and when the job leaves for more hosts,
atomically, into the supervisor's folder; the survivors of a lost rank write their last
commit on the way out. `run` restores the newest snapshot on start (rank 0 reads it and
broadcasts it, as `tessera train --resume` does), calls the reset callbacks when the number of
ranks changed, and the ElasticSampler re-shards what is left of the epoch. Outside an elastic
job, `run` calls the function once and a lost rank ends the job as before.
"""
import copy
import functools
import math
import os
import random
import re
import tempfile

import torch
import torch.utils.data

from tessera.torch import basics
from tessera.torch.basics import HorovodInternalError, rank, size
from tessera.torch.functions import (broadcast_object, broadcast_optimizer_state,
                                     broadcast_parameters)

_C = basics._C
SNAPSHOT_FORMAT = "tessera-elastic-snapshot-1"
SNAPSHOT_NAME = re.compile(r"snapshot\.c(\d+)\.pt")
KEEP_SNAPSHOTS = 2  # the newest and the one before it (should the newest be cut short)
EXIT_LOST = 75  # runtime/liveness.h's kExitPeerLost: this rank ended because another was lost


class HostsUpdatedInterrupt(RuntimeError):
    """Raised by commit()/check_host_updates() on every rank when the supervisor found more
    hosts: `run` saves the state and the job restarts on the larger set. `skip_sync` is
    Horovod's field (whether the state needs no broadcast after the reset); a restart always
    restores from the snapshot."""

    def __init__(self, skip_sync=False):
        super().__init__("the supervisor found more hosts; restarting on them after this commit")
        self.skip_sync = skip_sync


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's ElasticSampler, without repeats: each epoch's shuffled order (seed + epoch),
    less the samples already processed, is dealt to the ranks in turn, so each rank's share
    differs from another's by at most one sample and every sample of the epoch is processed once,
    however often the number of ranks changes (Horovod pads the shares with repeats). Uneven
    shares can leave one rank with a batch more than another at the end of the epoch: commit
    only within common_batches(batch_size), and end the epoch with hvd.join()
    (docs/python.md)."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts `epoch`: nothing of it is processed yet. Call it at the end of an epoch."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Every rank has processed one more batch of `batch_size` (the last batch may be
        shorter: the count stops at the epoch's size)."""
        self.processed_num = min(len(self.dataset),
                                 self.processed_num + batch_size * self.num_replicas)

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state):
        self.epoch = state["epoch"]
        self.processed_num = state["processed_num"]
        self.reset()

    def reset(self):
        """Re-deals what is left of the epoch to the current ranks."""
        self.num_replicas = size()
        self.rank = rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]
        self.indices = self.remaining_indices[self.rank::self.num_replicas]

    def common_batches(self, batch_size):
        """How many batches of `batch_size` every rank has this epoch (the smallest share's)."""
        return math.ceil((len(self.remaining_indices) // self.num_replicas) / batch_size)

    def __iter__(self):
        return iter(list(self.indices))

    def __len__(self):
        return len(self.indices)


class State:
    """Horovod's elastic State: commit(), restore(), check_host_updates(), sync(),
    register_reset_callbacks(). TorchState holds what there is to keep."""

    def __init__(self):
        self._reset_callbacks = []
        self._commits = 0

    def register_reset_callbacks(self, callbacks):
        """Called (without arguments) after a restart on a different number of ranks, once the
        state is restored: e.g. to scale the learning rate by hvd.size()."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Keeps the state in memory (what a restart returns to), writes the snapshot every
        TESSERA_ELASTIC_SNAPSHOT_EVERY commits, then checks for new hosts. Collective."""
        self._commits += 1
        self.save()
        _C.set_progress_step(self._commits)
        every = _C.elastic_snapshot_every()
        if _C.elastic_job() and self._commits % every == 0 and rank() == 0:
            self._write_snapshot()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when the supervisor found more hosts.
        Collective."""
        if _C.check_host_updates():
            raise HostsUpdatedInterrupt(skip_sync=False)


class TorchState(State):
    """The model, the optimizer, ElasticSamplers and any other attributes (`epoch=0`, ...):
    the state a restart returns to, as Horovod's TorchState."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        object.__setattr__(self, "_names", [])
        super().__init__()
        self.model = model
        self.optimizer = optimizer
        for name, value in kwargs.items():
            setattr(self, name, value)
        self._saved = None
        self.save()

    def __setattr__(self, name, value):
        if not name.startswith("_") and name not in self._names:
            self._names.append(name)
        object.__setattr__(self, name, value)

    def _capture(self):
        out = {}
        for name in self._names:
            value = getattr(self, name)
            if value is None:
                out[name] = None
            elif hasattr(value, "state_dict") and hasattr(value, "load_state_dict"):
                out[name] = copy.deepcopy(value.state_dict())
            else:
                out[name] = copy.deepcopy(value)
        return out

    def _apply(self, captured):
        for name, value in captured.items():
            current = getattr(self, name, None)
            if current is not None and hasattr(current, "load_state_dict"):
                current.load_state_dict(copy.deepcopy(value))
            else:
                object.__setattr__(self, name, copy.deepcopy(value))

    def save(self):
        """The state in memory: what restore() returns to."""
        self._saved = self._capture()

    def restore(self):
        """Back to the last commit."""
        self._apply(self._saved)

    def sync(self):
        """Every rank takes rank 0's state. Collective."""
        if self.model is not None:
            broadcast_parameters(self.model.state_dict(), root_rank=0)
        if self.optimizer is not None:
            broadcast_optimizer_state(self.optimizer, root_rank=0)
        rest = {n: v for n, v in self._capture().items() if n not in ("model", "optimizer")}
        self._apply(broadcast_object(rest, root_rank=0, name="tessera.elastic.state"))
        self.save()

    # -- snapshots: what carries the state from one generation to the next ------------------

    def _write_snapshot(self, commits=None):
        """The last commit, as rank 0 (or a survivor) holds it, into the supervisor's folder:
        a temporary file, flushed and renamed, named by its commit count."""
        folder = _C.elastic_dir()
        commits = self._commits if commits is None else commits
        path = os.path.join(folder, f"snapshot.c{commits}.pt")
        payload = {"format": SNAPSHOT_FORMAT, "commits": commits, "size": size(),
                   "state": self._saved}
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".snapshot.")
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(payload, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        for old in _snapshots(folder)[:-KEEP_SNAPSHOTS]:
            try:
                os.unlink(os.path.join(folder, old[1]))
            except OSError:
                pass

    def _start(self):
        """On entering `run`: the newest snapshot when there is one (rank 0 reads it, every rank
        takes it), else rank 0's state; the reset callbacks when the number of ranks changed."""
        found = None
        if _C.elastic_job():
            found = broadcast_object(_read_newest_snapshot() if rank() == 0 else None,
                                     root_rank=0, name="tessera.elastic.snapshot")
        if found is None:
            self.sync()
            return
        self._apply(found["state"])
        self._commits = found["commits"]
        _C.set_progress_step(self._commits)
        self.save()
        if rank() == 0:
            print(f"tessera elastic: restored commit {found['commits']} (written at "
                  f"{found['size']} ranks) at {size()} ranks", flush=True)
        for name in self._names:
            value = getattr(self, name)
            if isinstance(value, ElasticSampler):
                value.reset()
        if found["size"] != size():
            self.on_reset()


def _snapshots(folder):
    """[(commits, file name)] of the snapshots in `folder`, oldest first."""
    found = []
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        m = SNAPSHOT_NAME.fullmatch(name)
        if m:
            found.append((int(m.group(1)), name))
    return sorted(found)


def _read_newest_snapshot():
    """Rank 0: the newest readable snapshot's payload, or None."""
    folder = _C.elastic_dir()
    for _, name in reversed(_snapshots(folder)):
        try:
            payload = torch.load(os.path.join(folder, name), map_location="cpu")
        except Exception as e:  # noqa: BLE001 (a cut-short file: the one before it)
            print(f"tessera elastic: skipping {name}: {e}", flush=True)
            continue
        if isinstance(payload, dict) and payload.get("format") == SNAPSHOT_FORMAT:
            return payload
    return None


def run(func):
    """Horovod's decorator: `func(state, ...)` runs from the restored state; HostsUpdatedInterrupt
    writes the snapshot and ends this generation for the supervisor to start the next on more
    hosts; a lost rank (HorovodInternalError) writes the last commit on the way out and ends the
    process, for the supervisor to start again on the hosts left."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        state._start()
        try:
            return func(state, *args, **kwargs)
        except HostsUpdatedInterrupt:
            if rank() == 0:
                state._write_snapshot()
                _C.mark_restart_for_hosts()
                print(f"tessera elastic: leaving at commit {state._commits} to restart on more "
                      "hosts", flush=True)
            basics.shutdown()
            raise SystemExit(0)
        except HorovodInternalError as e:
            if not _C.elastic_job():
                raise
            print(f"tessera elastic: rank {rank()} leaves after the loss: {e}", flush=True)
            try:
                if not os.path.exists(os.path.join(_C.elastic_dir(),
                                                   f"snapshot.c{state._commits}.pt")):
                    state._write_snapshot()
            finally:
                os._exit(EXIT_LOST)  # other threads are inside MPI: no normal exit
    return wrapper
