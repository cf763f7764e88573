"""One scenario per run (argv[1]), under mpirun with 3 ranks; tests/python_liveness.sh checks
that the whole job ends, quickly, with the message that names the cause.
  interrupt: rank 0 gets SIGINT while it waits in an allreduce the others never join; the
             KeyboardInterrupt leaves its wait, the process exits and the others, waiting in
             their own collective, are told and end.
  kill:      rank 1 is killed (SIGKILL) while the others wait for it in an allreduce.
  caught:    the same, but the survivors' training loop catches HorovodInternalError (what an
             elastic wrapper does) and says so; the process still ends after the window."""
import os
import signal
import sys
import threading
import time

import torch

import tessera.torch as hvd

hvd.init()
scenario = sys.argv[1]
rank = hvd.rank()
hvd.barrier()
if scenario == "interrupt":
    if rank == 0:
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
        hvd.allreduce(torch.ones(1), name="never.joined.by.others")
    else:
        hvd.allreduce(torch.ones(1), name="waits.for.rank0")
elif scenario == "kill":
    if rank == 1:
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)
    hvd.allreduce(torch.ones(1), name="waits.for.rank1")
elif scenario == "caught":
    if rank == 1:
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        for step in range(100000):
            hvd.allreduce(torch.ones(1), name=f"step.{step}")
    except hvd.HorovodInternalError as e:
        print(f"rank {rank} caught HorovodInternalError after "
              f"{time.monotonic() - start:.1f} s: {e}", flush=True)
        time.sleep(30)  # the liveness window ends the process, caught or not
print(f"rank {rank}: returned normally, which it must not", flush=True)
