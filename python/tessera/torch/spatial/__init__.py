"""tessera.torch.spatial: spatial decomposition for any PyTorch CNN (docs/spatial.md).

    import tessera.torch as hvd
    from tessera.torch import spatial
    hvd.init()
    model = spatial.partition(torchvision.models.resnet50(), grid=(2, 2))
    tile = spatial.read_tile("slide.tif", model)      # this rank's tile only
    logits = model(tile)                               # the whole image's computation, tiled

A partitioned model runs the model's computation on this rank's tile of each image, exactly (to
rounding) as the model runs on the whole image. Each rank's loss must be its share of the whole
image's loss times the grid's size (`model.loss_scale`) where the output is tiled, or the loss
itself where the output is whole on every rank (a classifier's): then the DistributedOptimizer's
average over every rank is the whole-image step, as in `tessera train --spatial`.
"""

import torch
import torch.nn as nn

from tessera import _tessera
from tessera.torch.spatial import graph
from tessera.torch.spatial.layout import Grid, SpatialError
from tessera.torch.spatial.maps import part_range

__all__ = ["partition", "scatter", "gather", "read_tile", "SpatialError", "SpatialModule",
           "part_range"]


class SpatialModule(nn.Module):
    """The partitioned model. Its parameters, state_dict and load_state_dict are the model's own
    (a checkpoint loads into the unpartitioned model, and back)."""

    def __init__(self, module, grid, fx_graph):
        super().__init__()
        self.module = module
        self.grid = grid
        self._graph = fx_graph
        self._drop = graph.last_uses(fx_graph)
        self._ctx = graph.Context(grid)

    @property
    def loss_scale(self):
        """The grid's size: the factor of a tiled output's per-rank loss share."""
        return self.grid.size

    def forward(self, *args, **kwargs):
        if not self.grid.member:
            raise SpatialError("this rank is not in the partitioned model's process set; "
                               "accepted: a rank of the set passed to partition()")
        return graph.run_graph(self.module, self._graph, self._ctx, args, kwargs, self._drop)

    def state_dict(self, *args, **kwargs):
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict=True):
        return self.module.load_state_dict(state_dict, strict)

    @property
    def plan(self):
        """The last forward's layers on this rank's tile: op, sizes, halo rows and columns
        received below/above (planned from each layer's window: its receptive field)."""
        return list(self._ctx.plan)

    def format_plan(self):
        g = self.grid
        lines = [f"tile ({g.h}, {g.w}) of a {g.ph}x{g.pw} grid; halo = rows/columns received "
                 "(before, after)"]
        for e in self._ctx.plan:
            lines.append(f"  {e['module'] or e['node']:<32} {e['op']:<52} "
                         f"{e['in'][0]}x{e['in'][1]} -> {e['out'][0]}x{e['out'][1]}  "
                         f"halo rows {e['halo_rows']} cols {e['halo_cols']}")
        return "\n".join(lines)


def _ranks(process_set):
    from tessera.torch import basics
    if process_set is None:
        return list(range(basics.size()))
    return list(process_set.ranks)


def partition(model, grid=(1, 2), process_set=None):
    """`model` run on P x Q tiles of each image (grid=(P, Q): P tiles down, Q across) by the ranks
    of `process_set` (default: every rank): consecutive P*Q ranks share an image, the rest of the
    set's size is data parallel. Collective over every rank (like add_process_set)."""
    if (not isinstance(grid, (tuple, list)) or len(grid) != 2
            or not all(isinstance(v, int) and v >= 1 for v in grid)):
        raise SpatialError(f"grid {grid!r}: accepted: (P, Q), tiles down and across, each >= 1")
    fx_graph = graph.trace(model)
    return SpatialModule(model, Grid(grid, _ranks(process_set)), fx_graph)


def _grid_of(where):
    return where.grid if isinstance(where, SpatialModule) else where


def _summable(t):
    return t if t.dtype in (torch.float32, torch.float64) else t.to(torch.float64)


# What scatter moves (as f64 sums: exact for these).
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8, torch.int8,
          torch.int16, torch.int32, torch.int64, torch.bool]


def scatter(image, where, root=0):
    """This rank's tile of `image` [..., H, W], held by tile `root` of each spatial group (None on
    the others) or by every rank of it. `where`: the partitioned model."""
    g = _grid_of(where)
    # Which tiles hold it, agreed by every tile, so every tile decides alike.
    have = torch.zeros(g.size, dtype=torch.float64)
    have[g.h * g.pw + g.w] = 1.0 if image is not None else 0.0
    have = g.group_sum(have)
    if int(have.sum().item()) == g.size:
        return g.tile_of(image)
    if int(have.sum().item()) != 1 or have[root].item() != 1.0:
        holders = [i for i, v in enumerate(have.tolist()) if v]
        raise SpatialError(f"scatter: tiles {holders} of {g.size} hold an image; accepted: tile "
                           f"{root} alone, or every tile")
    head = torch.zeros(9, dtype=torch.float64)  # rank, sizes (up to 7), dtype
    if image is not None:
        if image.dim() > 7 or image.dtype not in DTYPES:
            raise SpatialError(f"scatter: a {image.dim()}-d {image.dtype} image; accepted: up to "
                               f"7 dimensions of {', '.join(str(d) for d in DTYPES)}")
        head[0] = image.dim()
        head[1:1 + image.dim()] = torch.tensor(image.shape, dtype=torch.float64)
        head[8] = DTYPES.index(image.dtype)
    head = g.group_sum(head)
    shape = [int(v) for v in head[1:1 + int(head[0])].tolist()]
    full = _summable(image) if image is not None else torch.zeros(shape, dtype=torch.float64)
    whole = g.group_sum(full.contiguous())
    return g.tile_of(whole).to(DTYPES[int(head[8])])


def gather(tile, where):
    """The whole [..., H, W] from every rank's tile, on every rank of the spatial group."""
    g = _grid_of(where)
    H, W = g.image_size(tile)
    full = torch.zeros(tuple(tile.shape[:-2]) + (H, W), dtype=_summable(tile).dtype,
                       device=tile.device)
    r0, r1 = g.rows(H)
    c0, c1 = g.cols(W)
    full[..., r0:r1, c0:c1] = _summable(tile)
    return g.group_sum(full).to(tile.dtype)


def read_tile(path, where, dtype=torch.float32):
    """This rank's tile of an RGB slide (tiled TIFF: only the TIFF tiles under it are decoded;
    PNG/JPEG: decoded whole), as [1, 3, h, w] in [0, 1]."""
    g = _grid_of(where)
    reader = _tessera.SlideReader(str(path))
    r0, r1 = g.rows(reader.height)
    c0, c1 = g.cols(reader.width)
    pixels = reader.read_region(r0, c0, r1 - r0, c1 - c0)
    return pixels.permute(2, 0, 1).unsqueeze(0).to(dtype) / 255.0
