# Seeds of fuzz_state_dict: what Python's torch.save writes for a state_dict (an OrderedDict of
# parameters and buffers, in the zip format of PyTorch >= 1.6), and a checkpoint dict holding
# one under "model", into corpus/state_dict. Run with Debian's python3-torch:
#   /usr/bin/python3 tests/fuzz/make_state_dict_seeds.py
import os

import torch

torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3), torch.nn.Flatten(),
                          torch.nn.Linear(12, 2).half())
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "state_dict")
torch.save(net.state_dict(), os.path.join(out, "python_state_dict.pt"))
torch.save({"epoch": 3, "model": net.state_dict()}, os.path.join(out, "python_checkpoint.pt"))
