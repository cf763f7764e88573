"""The maps of tessera.torch.spatial (pure): for every small axis, tile count and layer, the rows each
tile reads give, run through torch's own layer, exactly that tile's share of torch's output on the
whole axis. One process; the same on every rank of the pytest job."""
import itertools

import pytest
import torch
import torch.nn.functional as F

from tessera.torch.spatial import maps
from tessera.torch.spatial.layout import local_take


def axis(n, seed=0):
    """A random [1, 1, n, 1] column: one image axis."""
    return torch.randn(1, 1, n, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(n + seed))


def tiles_of(x, row_maps, fill=0.0):
    return [local_take(x, m, [0], fill) for m in row_maps]


def test_part_range_cuts_every_axis_exactly_once():
    for n, parts in itertools.product(range(0, 40), range(1, 9)):
        ranges = [maps.part_range(n, parts, p) for p in range(parts)]
        assert ranges[0][0] == 0 and ranges[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        assert max(hi - lo for lo, hi in ranges) - min(hi - lo for lo, hi in ranges) <= 1


def padded(x, p, mode):
    if p == 0 or mode == "zeros":
        return x
    return F.pad(x, [0, 0, p, p], mode=mode)


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
def test_window_maps_give_each_tile_its_share_of_the_convolution(mode):
    checked = 0
    for n, parts, k, s, d, p in itertools.product(range(1, 12), range(1, 5), range(1, 4),
                                                  range(1, 4), range(1, 3), range(0, 3)):
        if (mode == "reflect" and p >= n) or (mode == "circular" and p > n):
            continue  # torch refuses these paddings too
        if maps.window_output_size(n, k, s, d, p) <= 0:
            continue
        x = axis(n)
        w = torch.randn(1, 1, k, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(k))
        whole = F.conv2d(padded(x, p, mode), w, None, (s, 1), (p if mode == "zeros" else 0, 0),
                         (d, 1)).flatten()
        parts_out = []
        for t in tiles_of(x, maps.window_map(n, parts, k, s, d, p, mode)):
            parts_out.append(F.conv2d(t, w, None, (s, 1), 0, (d, 1)).flatten() if t.shape[2]
                             else torch.zeros(0, dtype=torch.float64))
        assert torch.equal(torch.cat(parts_out), whole), (n, parts, k, s, d, p, mode)
        checked += 1
    assert checked > 1000


def test_max_pool_windows_with_ceil_mode_and_minus_infinity_padding():
    for n, parts, k, s, p, ceil in itertools.product(range(1, 14), range(1, 5), range(1, 5),
                                                     range(1, 4), range(0, 3), (False, True)):
        if p > k // 2:
            continue  # torch: padding at most half the kernel
        out = maps.window_output_size(n, k, s, 1, p, ceil)
        if out <= 0:
            continue
        x = axis(n)
        whole = F.max_pool2d(x, (k, 1), (s, 1), (p, 0), ceil_mode=ceil)
        assert whole.shape[2] == out, (n, k, s, p, ceil)
        got = [F.max_pool2d(t, (k, 1), (s, 1)) for t in
               tiles_of(x, maps.window_map(n, parts, k, s, 1, p, "zeros", out), float("-inf"))
               if t.shape[2]]
        assert torch.equal(torch.cat(got, 2), whole), (n, parts, k, s, p, ceil)


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
def test_pad_maps_are_torch_pad_including_negative_amounts(mode):
    for n, parts, before, after in itertools.product(range(1, 10), range(1, 4), range(-2, 4),
                                                     range(-2, 4)):
        if n + before + after <= 0 or (mode == "reflect" and max(before, after) >= n) or \
                (mode == "circular" and max(before, after) > n):
            continue
        if mode != "zeros" and min(before, after) < 0:
            continue  # torch crops with negative amounts only in constant mode
        if n + min(before, 0) + min(after, 0) <= 0:
            continue  # the crop takes the whole axis: torch refuses
        x = axis(n)
        whole = F.pad(x, [0, 0, before, after], mode="constant" if mode == "zeros" else mode)
        got = torch.cat(tiles_of(x, maps.pad_map(n, parts, before, after, mode)), 2)
        assert torch.equal(got, whole), (n, parts, before, after, mode)


def test_nearest_sources_are_torchs_for_sizes_and_scale_factors():
    for n, out in itertools.product(range(1, 16), range(1, 40)):
        x = torch.arange(n, dtype=torch.float64).view(1, 1, n, 1)
        for mode in ("nearest", "nearest-exact"):
            want = F.interpolate(x, size=(out, 1), mode=mode).flatten().long().tolist()
            assert maps.nearest_sources(n, out, None, mode == "nearest-exact") == want
    for n, sf in itertools.product(range(1, 20), (0.3, 0.5, 1.5, 2.0, 2.5, 3.0, 7.0 / 3)):
        x = torch.arange(n, dtype=torch.float64).view(1, 1, n, 1)
        out, scale = maps.interpolate_size(n, None, sf, None)
        if out == 0:
            continue
        want = F.interpolate(x, scale_factor=(sf, 1.0), mode="nearest").flatten().long().tolist()
        assert maps.nearest_sources(n, out, scale) == want, (n, sf)


def test_linear_sources_are_torchs_bilinear_to_rounding():
    for n, out, align in itertools.product(range(1, 14), range(1, 30), (False, True)):
        x = axis(n)
        want = F.interpolate(x, size=(out, 1), mode="bilinear", align_corners=align).flatten()
        v = x.flatten()
        got = torch.stack([w0 * v[a] + w1 * v[b]
                           for a, b, w0, w1 in maps.linear_sources(n, out, None, align)])
        # torch's kernel rounds in another order: a few units in the last place (f64).
        assert (got - want).abs().max().item() <= 1e-15 * max(1.0, v.abs().max().item())


def test_adaptive_windows_are_torchs():
    for n, out in itertools.product(range(1, 20), range(1, 12)):
        x = axis(n)
        want = F.adaptive_avg_pool2d(x, (out, 1)).flatten()
        got = torch.stack([x.flatten()[a:b].mean() for a, b in maps.adaptive_windows(n, out)])
        assert torch.allclose(got, want, rtol=0, atol=1e-15), (n, out)


def test_transposed_maps_give_each_tile_its_share_of_the_transposed_convolution():
    """The rows a tile reads, transposed-convolved with padding 0, then cropped (or extended with
    zeros) from its offset, as tessera.torch.spatial.layers does: the tile's share of torch's."""
    checked = 0
    for n, parts, k, s, d, p, op in itertools.product(range(1, 9), range(1, 5), range(1, 4),
                                                      range(1, 4), range(1, 3), range(0, 2),
                                                      range(0, 2)):
        out = (n - 1) * s - 2 * p + d * (k - 1) + op + 1
        if out <= 0 or op >= max(s, d):
            continue
        x = axis(n)
        w = torch.randn(1, 1, k, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(k))
        whole = F.conv_transpose2d(x, w, None, (s, 1), (p, 0), (op, 0), 1, (d, 1))
        rows, offsets = maps.transposed_map(n, parts, k, s, d, p, out)
        got = []
        for q in range(parts):
            lo, hi = maps.part_range(out, parts, q)
            if not rows[q]:
                got.append(torch.zeros(1, 1, hi - lo, 1, dtype=torch.float64))
                continue
            z = F.conv_transpose2d(local_take(x, rows[q], [0], 0.0), w, None, (s, 1), 0, 0, 1,
                                   (d, 1))
            got.append(F.pad(z, [0, 0, -offsets[q], offsets[q] + hi - lo - z.shape[2]]))
        assert torch.equal(torch.cat(got, 2), whole), (n, parts, k, s, d, p, op)
        checked += 1
    assert checked > 500
