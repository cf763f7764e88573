"""The process: init and shutdown, ranks, process sets, the timeline (Horovod's basics)."""
import atexit
import ctypes
import ctypes.util
import os
import sys
import threading

import torch  # noqa: F401  (the extension needs torch's libraries loaded first)


def _check_torch_version():
    from tessera import _build_info
    if torch.__version__ != _build_info.torch_version:
        raise ImportError(
            f"tessera was built against torch {_build_info.torch_version} "
            f"({_build_info.torch_dir}) but this interpreter has torch {torch.__version__} "
            f"({os.path.dirname(torch.__file__)}): rebuild it for this one with "
            f"cmake -DTESSERA_PYTHON={sys.executable} (or pip install . from this interpreter)")


def _load_extension():
    _check_torch_version()
    # Open MPI loads its components with dlopen and they resolve symbols of libmpi, which Python
    # would load privately (RTLD_LOCAL) as a dependency of the extension: load it globally first.
    name = ctypes.util.find_library("mpi")
    if name:
        ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
    from tessera import _tessera
    return _tessera


_C = _load_extension()

# Every error of the engine (ranks that disagree, a timeout, a dead rank, a shutdown); Horovod
# users catch HorovodInternalError. Bad arguments are also ValueError (InvalidArgumentError is
# both).
TesseraError = _C.TesseraError
HorovodInternalError = _C.TesseraError
InvalidArgumentError = _C.InvalidArgumentError

_lock = threading.Lock()
_first_error = []  # the exception that ends this process, if any, for the other ranks


def _check_initialized(what="this call"):
    if not _C.is_initialized():
        raise ValueError(f"tessera is not initialised: call tessera.torch.init() before {what}")


class ProcessSet:
    """A subset of the ranks whose collectives are negotiated on their own (Horovod's
    ProcessSet). Made from a list of world ranks; registered by init(process_sets=...) or
    add_process_set()."""

    def __init__(self, ranks):
        self.ranks = sorted(int(r) for r in ranks)
        self.process_set_id = None

    def _id(self):
        if self.process_set_id is None:
            raise ValueError(f"process set {self.ranks} is not registered: pass it to "
                             "init(process_sets=...) or add_process_set()")
        return self.process_set_id

    def included(self):
        """Whether this rank belongs to the set."""
        _check_initialized("ProcessSet.included()")
        return _C.in_process_set(self._id())

    def size(self):
        self._id()
        return len(self.ranks)

    def rank(self):
        """This rank's rank within the set (ValueError if it is no member)."""
        _check_initialized("ProcessSet.rank()")
        me = _C.rank()
        if me not in self.ranks:
            raise ValueError(f"rank {me} is not in {self!r}")
        return self.ranks.index(me)

    def __repr__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


# Every rank; its ranks are filled in by init().
global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


def _set_id(process_set, what):
    """The id of `process_set` for a collective, checking this rank belongs to it."""
    _check_initialized(what)
    ps_id = process_set._id()
    if not _C.in_process_set(ps_id):
        raise ValueError(f"{what}: this rank ({_C.rank()}) is not in {process_set!r}; a rank "
                         "may only call collectives of the process sets it belongs to")
    return ps_id


def _record_uncaught(exc_type, exc, tb):
    _first_error.append(f"{exc_type.__name__}: {exc}")
    _previous_excepthook(exc_type, exc, tb)


_previous_excepthook = sys.excepthook


def init(comm=None, process_sets=None, settings=None, config_file=""):
    """Starts MPI and tessera's engine (collective over every rank). `comm`: None or the list of
    every world rank (tessera runs over MPI_COMM_WORLD). `process_sets`: ProcessSet objects to
    register. `settings`: {"TESSERA_FUSION_THRESHOLD": "64MiB", ...}, which take precedence over
    the environment, which takes precedence over `config_file` (docs/knobs.md)."""
    global _previous_excepthook
    if process_sets == "dynamic":
        process_sets = None  # tessera's sets can always be added and removed later
    with _lock:
        if not _C.is_initialized():
            _C.init({str(k): str(v) for k, v in (settings or {}).items()}, config_file or "")
            atexit.register(_shutdown_at_exit)
            if sys.excepthook is not _record_uncaught:
                _previous_excepthook = sys.excepthook
                sys.excepthook = _record_uncaught
    if comm is not None:
        ranks = sorted(int(r) for r in comm)
        if ranks != list(range(_C.size())):
            raise ValueError(f"init(comm={list(comm)}): tessera runs over every rank of "
                             f"MPI_COMM_WORLD ({_C.size()}); use a process set for a subset")
    global_process_set.ranks = list(range(_C.size()))
    for ps in process_sets or []:
        add_process_set(ps)


def _shutdown_at_exit():
    _C.shutdown(_first_error[0] if _first_error else "")


def shutdown():
    """Stops the engine (agreed with the other ranks) and finalises MPI."""
    _C.shutdown("")


def is_initialized():
    return _C.is_initialized()


def _query(fn, name):
    _check_initialized(f"{name}()")
    return fn()


def rank():
    return _query(_C.rank, "rank")


def size():
    return _query(_C.size, "size")


def local_rank():
    return _query(_C.local_rank, "local_rank")


def local_size():
    return _query(_C.local_size, "local_size")


def cross_rank():
    return _query(_C.cross_rank, "cross_rank")


def cross_size():
    return _query(_C.cross_size, "cross_size")


def is_homogeneous():
    return _query(_C.is_homogeneous, "is_homogeneous")


def mpi_threads_supported():
    # tessera::init requires MPI_THREAD_MULTIPLE and fails naming it otherwise.
    return _query(lambda: True, "mpi_threads_supported")


def mpi_enabled():
    return True


def mpi_built():
    return True


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    """Whether GPU tensors' collectives can go through NCCL: tessera was built with NCCL and
    takes CUDA tensors (cuda_built())."""
    return bool(_C.nccl_built)


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return bool(_C.cuda_built)


def rocm_built():
    return False


def start_timeline(file_path, mark_cycles=False):
    """Writes the engine's Chrome trace of this rank to `file_path` (`mark_cycles` is
    accepted for Horovod's signature; tessera's trace always shows its cycles)."""
    _check_initialized("start_timeline()")
    _C.start_timeline(file_path)


def stop_timeline():
    _check_initialized("stop_timeline()")
    _C.stop_timeline()


def add_process_set(process_set):
    """Registers a ProcessSet (or a list of ranks): collective over every rank, which must all
    pass the same ranks. Returns the ProcessSet."""
    _check_initialized("add_process_set()")
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ValueError(f"{process_set!r} is registered already")
    bad = [r for r in process_set.ranks if r < 0 or r >= _C.size()]
    if bad or not process_set.ranks:
        raise ValueError(f"process set ranks {process_set.ranks}: each must be a rank in 0.."
                         f"{_C.size() - 1}, and there must be at least one")
    process_set.process_set_id = _C.add_process_set(process_set.ranks)
    return process_set


def remove_process_set(process_set):
    """Unregisters a ProcessSet (collective over every rank). Returns whether it was one."""
    _check_initialized("remove_process_set()")
    if process_set.process_set_id in (None, 0):
        return False
    _C.remove_process_set(process_set.process_set_id)
    process_set.process_set_id = None
    return True
