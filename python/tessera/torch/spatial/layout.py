"""How a value of a partitioned model is held: `Tiled` (this rank's tile of an [N, C, H, W] image
of full size (H, W), cut by maps.part_range) or replicated (a plain tensor, the same on every rank
of the spatial group: a classifier's features after global pooling). The grid's group operations
are here too.
"""

import torch

from tessera import _tessera
from tessera.torch.spatial.maps import part_range


class SpatialError(ValueError):
    """An op the partitioner cannot run exactly on tiles; the message names the module."""


class Tiled:
    __slots__ = ("local", "hw")

    def __init__(self, local, hw):
        self.local = local
        self.hw = (int(hw[0]), int(hw[1]))

    @property
    def shape(self):
        """The whole image's shape, as the model's code reads it."""
        return torch.Size(list(self.local.shape[:2]) + list(self.hw))


class Grid:
    """The P_h x P_w tiles of an image and the data-parallel ranks beside them, over a process set's
    ranks (consecutive ranks share an image: rank = d * P_h * P_w + h * P_w + w)."""

    def __init__(self, grid, ranks):
        self.ph, self.pw = int(grid[0]), int(grid[1])
        try:
            self.native = _tessera.SpatialGrid(f"{self.ph}x{self.pw}", list(ranks))
        except ValueError as e:  # the C++ grid's words are tessera train's (--spatial HxW)
            raise SpatialError(f"partition(grid=({self.ph}, {self.pw})) over {len(ranks)} "
                               f"ranks: {e}") from e
        self.member = self.native.member
        if self.member:
            self.data, _, _ = self.native.shape
            self.d, self.h, self.w = self.native.coord
        self.size = self.ph * self.pw

    def rows(self, n):
        return part_range(n, self.ph, self.h)

    def cols(self, n):
        return part_range(n, self.pw, self.w)

    def tile_of(self, image):
        """This rank's tile of a whole [..., H, W] tensor."""
        r0, r1 = self.rows(image.shape[-2])
        c0, c1 = self.cols(image.shape[-1])
        return image[..., r0:r1, c0:c1]

    def take(self, value, row_maps, col_maps, fill=0.0):
        """The local input the maps name (take_plan.h), from the tiles or, for a replicated
        value, from this rank's copy."""
        if isinstance(value, Tiled):
            return _tessera.spatial_take(self.native, value.local, value.hw[0], row_maps,
                                         value.hw[1], col_maps, float(fill))
        return local_take(value, row_maps[self.h], col_maps[self.w], fill)

    def group_sum(self, x, over="spatial"):
        return _tessera.spatial_group_sum(self.native, x, over)

    def image_size(self, tile):
        """The whole image's (H, W) from every tile's size (one small group sum), checked against
        the cut the partitioner uses."""
        sizes = torch.zeros(self.ph + self.pw, dtype=torch.float64)
        if self.w == 0:
            sizes[self.h] = tile.shape[-2]
        if self.h == 0:
            sizes[self.ph + self.w] = tile.shape[-1]
        sizes = self.group_sum(sizes)
        rows = [int(v) for v in sizes[:self.ph].tolist()]
        cols = [int(v) for v in sizes[self.ph:].tolist()]
        hw = (sum(rows), sum(cols))
        want = ([part_range(hw[0], self.ph, p)[1] - part_range(hw[0], self.ph, p)[0]
                 for p in range(self.ph)],
                [part_range(hw[1], self.pw, p)[1] - part_range(hw[1], self.pw, p)[0]
                 for p in range(self.pw)])
        if (rows, cols) != want:
            raise SpatialError(
                f"the input tiles are {rows} rows x {cols} columns for a {hw[0]}x{hw[1]} image; "
                f"accepted: the cut of tessera.torch.spatial.scatter / read_tile, {want[0]} x "
                f"{want[1]}")
        return hw


def local_take(x, rows, cols, fill):
    """The take on a tensor this rank holds whole: index rows and columns, -1 is `fill`."""
    def one(t, dim, idx):
        if any(i < 0 for i in idx):
            pad = [0, 0, 0, 0]
            pad[1 if dim == 3 else 3] = 1
            t = torch.nn.functional.pad(t, pad, value=fill)
            idx = [t.shape[dim] - 1 if i < 0 else i for i in idx]
        return t.index_select(dim, torch.tensor(idx, dtype=torch.long, device=t.device))
    return one(one(x, 2, rows), 3, cols)
