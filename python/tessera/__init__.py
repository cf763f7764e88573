"""tessera: distributed training of convolutional networks on MPI.

`import tessera.torch as hvd` gives Horovod's PyTorch API over tessera's engine.
"""
__version__ = "0.1.0"
