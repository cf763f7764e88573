"""How the partitioner finds a model's ops: torch.fx traces `forward` once into a graph of calls
(modules, functions, tensor methods), each node tagged with the module whose forward made it; the
runner walks the graph with real values. A call whose arguments hold no tile runs as written (a
classifier after global pooling, shape arithmetic); a call on a tile goes to its spatial layer in
DISPATCH below, or raises SpatialError naming the module, the op and why. docs/spatial.md argues
the choice against module swapping and tensor subclasses.
"""

import operator

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

from tessera.torch.spatial import layers
from tessera.torch.spatial.layout import SpatialError, Tiled

# Functions whose arguments fx cannot trace through (sizes read from proxies): recorded as calls.
AUTOWRAP = (F.interpolate, F.adaptive_avg_pool2d, F.adaptive_max_pool2d)


class Tracer(fx.Tracer):
    """fx's tracer, remembering for each node the module (path, type) whose forward made it."""

    def __init__(self):
        super().__init__(autowrap_functions=AUTOWRAP)
        self.stack = []
        self.failed_in = None  # the innermost module whose forward could not be traced

    def is_leaf_module(self, m, qualname):
        # Every BatchNorm (tessera's SyncBatchNorm included) is one call: its own forward
        # branches on the mode and never runs on tiles.
        return isinstance(m, nn.modules.batchnorm._BatchNorm) or super().is_leaf_module(m, qualname)

    def call_module(self, m, forward, args, kwargs):
        self.stack.append((self.path_of_module(m), type(m).__name__))
        try:
            return super().call_module(m, forward, args, kwargs)
        except Exception:
            self.failed_in = self.failed_in or self.stack[-1]
            raise
        finally:
            self.stack.pop()

    def trace(self, root, concrete_args=None):
        # F.pad is a builtin whose argument parser refuses traced sizes in its list (a U-Net's
        # padding to its skip's size): while tracing, a Python stand-in records it as a call.
        pad = F.pad

        def traced_pad(x, amounts, *args, **kwargs):
            proxies = [a for a in [x, *amounts] if isinstance(a, fx.Proxy)]
            if not proxies:
                return pad(x, amounts, *args, **kwargs)
            return proxies[0].tracer.create_proxy("call_function", pad, (x, list(amounts)) + args,
                                                  kwargs)
        F.pad = traced_pad
        try:
            return super().trace(root, concrete_args)
        finally:
            F.pad = pad

    def create_node(self, *args, **kwargs):
        node = super().create_node(*args, **kwargs)
        node.meta["module"] = self.stack[-1] if self.stack else ("", "the model")
        return node


def trace(model):
    tracer = Tracer()
    try:
        return tracer.trace(model)
    except Exception as e:  # fx's own errors name the Python line it could not trace
        path, kind = tracer.failed_in or ("", type(model).__name__)
        where = f"{kind}.forward" + (f" (module '{path}')" if path else "")
        raise SpatialError(
            f"tessera.torch.spatial could not trace {where} with torch.fx "
            f"({type(e).__name__}: {e}); accepted: models whose forward does not branch on "
            "tensor values") from e


ELEMENTWISE_MODULES = (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Sigmoid,
                       nn.Tanh, nn.Hardswish, nn.Hardsigmoid, nn.Hardtanh, nn.Mish, nn.Softplus,
                       nn.PReLU, nn.Identity, nn.Dropout, nn.Dropout2d)
ELEMENTWISE_FUNCTIONS = {operator.add, operator.sub, operator.mul, operator.truediv,
                         operator.neg, operator.iadd, operator.imul, torch.add, torch.sub,
                         torch.mul, torch.div, torch.relu, torch.sigmoid, torch.tanh, torch.clamp,
                         F.relu, F.relu6, F.leaky_relu, F.gelu, F.silu, F.hardswish,
                         F.hardsigmoid, F.hardtanh, F.elu, F.dropout, F.dropout2d, F.sigmoid,
                         F.tanh}
ELEMENTWISE_METHODS = {"relu", "relu_", "sigmoid", "tanh", "add", "add_", "mul", "mul_", "sub",
                       "div", "clamp", "contiguous", "float", "double", "half", "bfloat16"}
CHANNEL_FUNCTIONS = {torch.softmax, torch.log_softmax, F.softmax, F.log_softmax}


def has_tiled(value):
    if isinstance(value, Tiled):
        return True
    if isinstance(value, (list, tuple)):
        return any(has_tiled(v) for v in value)
    if isinstance(value, dict):
        return any(has_tiled(v) for v in value.values())
    return False


def unwrap(value):
    if isinstance(value, Tiled):
        return value.local
    if isinstance(value, (list, tuple)):
        return type(value)(unwrap(v) for v in value)
    if isinstance(value, dict):
        return {k: unwrap(v) for k, v in value.items()}
    return value


class Context:
    """What a spatial layer sees of the run: the grid, the node being run (for errors), the plan
    being recorded."""

    def __init__(self, grid):
        self.grid = grid
        self.node = None
        self.plan = []

    def where(self):
        path, kind = self.node.meta.get("module", ("", "the model"))
        return f"module '{path}' ({kind})" if path else f"{kind}"

    def error(self, what, why=""):
        return SpatialError(f"tessera.torch.spatial cannot partition {what} in {self.where()}"
                            + (f": {why}" if why else ""))

    def note(self, op, in_hw, out_hw, row_map, col_map, own_rows, own_cols):
        self.plan.append({
            "node": self.node.name, "module": self.node.meta.get("module", ("", ""))[0], "op": op,
            "in": tuple(in_hw), "out": tuple(out_hw),
            "halo_rows": layers._halo(row_map, *own_rows),
            "halo_cols": layers._halo(col_map, *own_cols)})


def elementwise(ctx, fn, args, kwargs):
    """A per-pixel op on tiles: replicated operands the image's size are cut to this tile, smaller
    ones ([N, C, 1, 1], scalars) broadcast as they are."""
    sizes = {v.hw for v in _flat(args, kwargs) if isinstance(v, Tiled)}
    if len(sizes) != 1:
        raise ctx.error("an element-wise op on tiles of different sizes " + str(sorted(sizes)),
                        "accepted: operands of one image size")
    hw = sizes.pop()

    def local(v):
        if isinstance(v, Tiled):
            return v.local
        if torch.is_tensor(v) and v.dim() >= 2 and tuple(v.shape[-2:]) == hw and hw != (1, 1):
            return ctx.grid.tile_of(v)
        return v
    out = fn(*[local(a) for a in args], **{k: local(v) for k, v in kwargs.items()})
    return Tiled(out, hw)


def _flat(args, kwargs):
    for v in list(args) + list(kwargs.values()):
        if isinstance(v, (list, tuple)):
            yield from _flat(v, {})
        else:
            yield v


def cat(ctx, tensors, dim=0):
    if int(dim) % 4 != 1:
        raise ctx.error(f"concatenation along dimension {dim}",
                        "accepted: tiles of one image size along the channels (dimension 1)")
    return elementwise(ctx, lambda *ts: torch.cat(ts, 1), list(tensors), {})


def channel_op(ctx, fn, args, kwargs):
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    if dim is None or int(dim) % 4 != 1:
        raise ctx.error(f"{getattr(fn, '__name__', fn)} along dimension {dim}",
                        "accepted: along the channels (dimension 1)")
    return elementwise(ctx, fn, args, kwargs)


def _sync_bn_types():
    from tessera.torch.sync_batch_norm import SyncBatchNorm
    return (nn.SyncBatchNorm, SyncBatchNorm)


def run_module(ctx, m, args, kwargs):
    x = args[0]
    if not isinstance(x, Tiled) or has_tiled(args[1:]) or has_tiled(kwargs):
        raise ctx.error(f"{type(m).__name__} on these arguments", "accepted: one tiled input")
    if isinstance(m, nn.Conv2d):
        return layers.conv2d(ctx, m, x)
    if isinstance(m, nn.ConvTranspose2d):
        return layers.conv_transpose2d(ctx, m, x, *args[1:], **kwargs)
    if isinstance(m, nn.BatchNorm2d) or isinstance(m, _sync_bn_types()):
        return layers.batch_norm(ctx, m, x, "all" if isinstance(m, _sync_bn_types()) else "spatial")
    if isinstance(m, nn.MaxPool2d):
        return layers.max_pool2d(ctx, x, m.kernel_size, m.stride, m.padding, m.dilation,
                                 m.ceil_mode, m.return_indices)
    if isinstance(m, nn.AvgPool2d):
        return layers.avg_pool2d(ctx, x, m.kernel_size, m.stride, m.padding, m.ceil_mode,
                                 m.count_include_pad, m.divisor_override)
    if isinstance(m, nn.AdaptiveAvgPool2d):
        return layers.adaptive_avg_pool2d(ctx, x, m.output_size)
    if isinstance(m, nn.AdaptiveMaxPool2d):
        return layers.adaptive_max_pool2d(ctx, x, m.output_size, m.return_indices)
    if isinstance(m, nn.Upsample):
        return upsample(ctx, m, x)
    if isinstance(m, (nn.Softmax, nn.LogSoftmax)):
        return channel_op(ctx, lambda t, dim: m(t), [x, m.dim], {})
    if isinstance(m, ELEMENTWISE_MODULES):
        return elementwise(ctx, m, args, kwargs)
    raise ctx.error(f"{type(m).__name__} on a tiled image",
                    "it is not one of the layers tessera.torch.spatial runs on tiles "
                    "(docs/spatial.md lists them)")


def upsample(ctx, m, x):
    # UpsamplingBilinear2d's forward passes align_corners=True whatever its attribute says.
    align = True if isinstance(m, nn.UpsamplingBilinear2d) else m.align_corners
    return layers.interpolate(ctx, x, m.size, m.scale_factor, m.mode, align,
                              getattr(m, "recompute_scale_factor", None))


def _function_table():
    t = {torch.cat: cat, F.conv2d: layers.conv2d_function, torch.conv2d: layers.conv2d_function, F.interpolate: layers.interpolate, F.pad: layers.pad,
         torch._C._nn.pad: layers.pad, F.max_pool2d: layers.max_pool2d,
         torch.max_pool2d: layers.max_pool2d, F.avg_pool2d: layers.avg_pool2d,
         F.adaptive_avg_pool2d: layers.adaptive_avg_pool2d,
         F.adaptive_max_pool2d: layers.adaptive_max_pool2d, torch.mean: layers.spatial_mean}
    return t


FUNCTIONS = _function_table()
TENSOR_ATTRIBUTES = ("dtype", "device", "requires_grad", "is_cuda")


def getitem(ctx, x, index):
    """Indexing a tile's samples or channels; the image's rows and columns are not cut."""
    index = index if isinstance(index, tuple) else (index,)
    whole = slice(None)
    if Ellipsis in index or len(index) > 4 or any(
            not (isinstance(i, slice) and i == whole) for i in index[2:]):
        raise ctx.error("indexing a tile's rows or columns",
                        "accepted: indexing samples and channels (x[:, :6]), whole rows and columns")
    return Tiled(x.local[index], x.hw)


def run_function(ctx, fn, args, kwargs):
    if fn is operator.getitem and isinstance(args[0], Tiled):
        return getitem(ctx, *args)
    if fn in ELEMENTWISE_FUNCTIONS:
        return elementwise(ctx, fn, args, kwargs)
    if fn in CHANNEL_FUNCTIONS:
        return channel_op(ctx, fn, args, kwargs)
    if fn is getattr and isinstance(args[0], Tiled):
        if args[1] == "shape":
            return args[0].shape
        if args[1] in TENSOR_ATTRIBUTES:
            return getattr(args[0].local, args[1])
    elif fn in FUNCTIONS:
        return FUNCTIONS[fn](ctx, *args, **kwargs)
    name = getattr(fn, "__name__", str(fn))
    raise ctx.error(f"{name} on a tiled image",
                    "it is not one of the ops tessera.torch.spatial runs on tiles "
                    "(docs/spatial.md lists them)")


def run_method(ctx, name, args, kwargs):
    x = args[0]
    if isinstance(x, Tiled) and name == "size":
        return x.shape if len(args) == 1 and not kwargs else x.shape[args[1] if len(args) > 1
                                                                     else kwargs["dim"]]
    if isinstance(x, Tiled) and name == "dim":
        return 4
    if isinstance(x, Tiled) and name == "mean":
        return layers.spatial_mean(ctx, x, *args[1:], **kwargs)
    if name in ("softmax", "log_softmax"):
        return channel_op(ctx, lambda t, dim: getattr(t, name)(dim), args, kwargs)
    if name in ELEMENTWISE_METHODS:
        return elementwise(ctx, lambda t, *a, **k: getattr(t, name)(*a, **k), args, kwargs)
    raise ctx.error(f"the tensor method .{name}() on a tiled image",
                    "it is not one of the ops tessera.torch.spatial runs on tiles "
                    "(docs/spatial.md lists them)")


def last_uses(graph):
    """For each node, the values no node after it reads: the runner drops them there, so an
    intermediate autograd does not keep lives no longer than in the model's own forward."""
    seen, drop = set(), {}
    for node in reversed(list(graph.nodes)):
        for used in node.all_input_nodes:
            if used not in seen:
                seen.add(used)
                drop.setdefault(node, []).append(used)
    return drop


def run_graph(model, graph, ctx, args, kwargs, drop):
    """One forward: the graph's nodes in order, tiles where the image is cut."""
    env, positional = {}, list(args)
    ctx.plan = []
    for node in graph.nodes:
        ctx.node = node
        if node.op == "placeholder":
            value = kwargs[node.target] if node.target in kwargs else (
                positional.pop(0) if positional else node.args[0])
            if torch.is_tensor(value) and value.dim() == 4:
                value = Tiled(value, ctx.grid.image_size(value))
        elif node.op == "get_attr":
            value = model
            for part in node.target.split("."):
                value = getattr(value, part)
        elif node.op == "output":
            return unwrap(fx.node.map_arg(node.args[0], lambda n: env[n]))
        else:
            a = fx.node.map_arg(node.args, lambda n: env[n])
            k = fx.node.map_arg(node.kwargs, lambda n: env[n])
            value = call(ctx, model, node, a, k)
            del a, k
        env[node] = value
        for used in drop.get(node, ()):
            env.pop(used, None)
    return None


def _upsamples_replicated(model, node, args):
    """An interpolation of a whole (replicated) [N, C, h, w] tensor, such as DeepLab's pooled
    features brought back to the image's size: computed tile by tile, so no rank holds the whole
    upsampled map."""
    if not (args and torch.is_tensor(args[0]) and args[0].dim() == 4):
        return False
    if node.op == "call_function":
        return node.target is F.interpolate
    return node.op == "call_module" and isinstance(model.get_submodule(node.target), nn.Upsample)


def call(ctx, model, node, args, kwargs):
    tiled = has_tiled(args) or has_tiled(kwargs)
    if not tiled and ctx.grid.size > 1 and _upsamples_replicated(model, node, args):
        if node.op == "call_function":
            return layers.interpolate(ctx, *args, **kwargs)
        return upsample(ctx, model.get_submodule(node.target), args[0])
    if node.op == "call_module":
        m = model.get_submodule(node.target)
        return run_module(ctx, m, args, kwargs) if tiled else m(*args, **kwargs)
    if node.op == "call_function":
        return run_function(ctx, node.target, args, kwargs) if tiled else node.target(
            *args, **kwargs)
    if tiled:
        return run_method(ctx, node.target, args, kwargs)
    return getattr(args[0], node.target)(*args[1:], **kwargs)
