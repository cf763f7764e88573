"""The rows each tile reads, per layer and axis (pure functions; tests/python/test_spatial_maps.py).

An axis of n rows over P tiles: tile p owns rows [p*n//P, (p+1)*n//P) (`part_range`, the C++
`spatial::part_range`), for the image and for every layer's output alike. A layer's map lists, per
tile, the image row each row of that tile's local input copies, or -1 for the fill value (zero
padding; -inf for max pooling). The C++ take (src/spatial/take.h) moves those rows between the
tiles; the layer then runs on the local input as torch runs it on the whole image.
"""

import functools
import math

# The maps are pure and asked again every forward: kept (callers never change what they get).
cached = functools.lru_cache(maxsize=4096)


def part_range(n, parts, p):
    return n * p // parts, n * (p + 1) // parts


def window_output_size(n, kernel, stride, dilation, padding, ceil_mode=False):
    """torch's output size of a sliding window (convolution, pooling) on an axis of n."""
    span = n + 2 * padding - dilation * (kernel - 1) - 1
    if span < 0:
        return 0
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    # torch: the last window must start inside the input or its left padding.
    if (out - 1) * stride >= n + padding:
        out -= 1
    return out


def _padded_source(i, n, mode):
    """The image row that row i of the padded axis (row 0 = image row 0) copies, or -1."""
    if 0 <= i < n:
        return i
    if mode == "zeros":
        return -1
    if mode == "reflect":
        return -i if i < 0 else 2 * (n - 1) - i
    if mode == "replicate":
        return min(max(i, 0), n - 1)
    if mode == "circular":
        return i % n
    raise ValueError(f"padding mode {mode!r} (accepted: zeros, reflect, replicate, circular)")


@cached
def window_map(n, parts, kernel, stride, dilation, padding, mode="zeros", out=None):
    """Per tile, the padded rows its outputs' windows read, as image rows: a convolution or pooling
    run with padding 0 on them gives exactly the tile's outputs. `out`: the output size (default
    torch's, without ceil mode)."""
    m = window_output_size(n, kernel, stride, dilation, padding) if out is None else out
    reach = dilation * (kernel - 1)
    maps = []
    for p in range(parts):
        lo, hi = part_range(m, parts, p)
        if hi <= lo:
            maps.append([])
            continue
        first = lo * stride - padding
        last = (hi - 1) * stride - padding + reach
        maps.append([_padded_source(i, n, mode) for i in range(first, last + 1)])
    return maps


@cached
def pad_map(n, parts, before, after, mode="zeros"):
    """F.pad on one axis (negative amounts crop): output row j copies image row j - before."""
    m = n + before + after
    return [[_padded_source(j - before, n, mode) for j in range(*part_range(m, parts, p))]
            for p in range(parts)]


@cached
def transposed_map(n, parts, kernel, stride, dilation, padding, out):
    """Per tile of a transposed convolution's `out` outputs: the input rows [a, b] that reach
    them (output j = i*stride - padding + t*dilation), and the offset of the tile's first output in
    the unpadded transposed output of rows a..b."""
    reach = dilation * (kernel - 1)
    maps, offsets = [], []
    for p in range(parts):
        lo, hi = part_range(out, parts, p)
        a = max(0, -(-(lo + padding - reach) // stride)) if hi > lo else 0
        b = min(n - 1, (hi - 1 + padding) // stride) if hi > lo else -1
        maps.append(list(range(a, b + 1)))
        offsets.append(lo + padding - a * stride)
    return maps, offsets


@cached
def adaptive_windows(n, out):
    """torch's adaptive pooling windows: output i reads [floor(i*n/out), ceil((i+1)*n/out))."""
    return [(i * n // out, -(-((i + 1) * n) // out)) for i in range(out)]


def interpolate_size(n, size, scale, recompute):
    """F.interpolate's output size on one axis, and the scale its index formula uses (None:
    n / out)."""
    if size is not None:
        return int(size), None
    out = int(math.floor(float(n * scale)))
    return out, (None if recompute else scale)


@cached
def nearest_sources(n, out, scale, exact=False):
    """nearest / nearest-exact: the input row of each output row, as torch 1.13 computes it (in
    float32, as its CPU kernel does)."""
    import numpy as np
    if out == n and not exact:
        return list(range(n))
    if out == 2 * n and not exact:  # torch's shortcut, whatever the scale factor says
        return [j >> 1 for j in range(out)]
    s = np.float32(1.0 / scale) if scale is not None else np.float32(n) / np.float32(out)
    src = []
    for j in range(out):
        x = (np.float32(j) + np.float32(0.5)) * s if exact else np.float32(j) * s
        src.append(min(int(np.floor(x)), n - 1))
    return src


@cached
def linear_sources(n, out, scale, align_corners):
    """bilinear, per output row: (row0, row1, weight0, weight1) as torch 1.13's
    area_pixel_compute_source_index and compute_indices_weights_linear give them (double)."""
    if align_corners:
        s = (n - 1) / (out - 1) if out > 1 else 0.0
    else:
        s = 1.0 / scale if scale is not None and scale > 0 else n / out
    rows = []
    for j in range(out):
        x = s * j if align_corners else max(s * (j + 0.5) - 0.5, 0.0)
        i0 = int(x)
        i1 = i0 + (1 if i0 < n - 1 else 0)
        l1 = x - i0
        rows.append((i0, i1, 1.0 - l1, l1))
    return rows
