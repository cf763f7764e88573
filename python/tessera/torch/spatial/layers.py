"""The layers of a partitioned model on tiles: each takes its input rows through the grid (maps.py
names them, the C++ take moves them) and runs torch's own layer on them, or sums over the grid
(BatchNorm statistics, global pooling). Each returns a Tiled value, or a replicated tensor where
the result is whole on every rank (global pooling). `note(...)` records the halo plan.
"""

import torch
import torch.nn.functional as F

from tessera import _tessera
from tessera.torch.spatial import maps
from tessera.torch.spatial.layout import Tiled


def _pair(v):
    return (int(v[0]), int(v[1])) if isinstance(v, (tuple, list)) else (int(v), int(v))


def _halo(row_map, lo, hi):
    """Rows a tile reads below and above its own block [lo, hi) (the halo it receives)."""
    rows = [r for r in row_map if r >= 0]
    return (sum(1 for r in set(rows) if r < lo), sum(1 for r in set(rows) if r >= hi))


def _local_out(grid, hw):
    r0, r1 = grid.rows(hw[0])
    c0, c1 = grid.cols(hw[1])
    return r1 - r0, c1 - c0


def _linked_zeros(like, shape, *params):
    """Zeros of `shape` that keep `like` in the graph (an empty tile must still run its take's
    backward, which its neighbours wait for) and give `params` a zero gradient, not none."""
    link = like.sum() * 0
    for p in params:
        if p is not None:
            link = link + p.sum() * 0
    return like.new_zeros(shape) + link


def _windowed(ctx, x, k, s, d, p, mode, out_hw, fill, what):
    """The local input of a sliding window with padding already applied (pad -1 rows = fill)."""
    g, (H, W) = ctx.grid, x.hw
    rows = maps.window_map(H, g.ph, k[0], s[0], d[0], p[0], mode, out_hw[0])
    cols = maps.window_map(W, g.pw, k[1], s[1], d[1], p[1], mode, out_hw[1])
    ctx.note(what, x.hw, out_hw, rows[g.h], cols[g.w], g.rows(H), g.cols(W))
    return g.take(x, rows, cols, fill)


def _padding(padding, kernel, dilation):
    """(rows, cols) of zero-mode padding each side, and whether it is 'same' (stride 1, the extra
    row at the end as torch puts it)."""
    if padding == "valid":
        return (0, 0), False
    if padding == "same":
        return tuple(d * (k - 1) // 2 for k, d in zip(kernel, dilation)), True
    return _pair(padding), False


def conv2d(ctx, m, x):
    return conv2d_function(ctx, x, m.weight, m.bias, m.stride, m.padding, m.dilation, m.groups,
                           m.padding_mode)


def conv2d_function(ctx, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1,
                    padding_mode="zeros"):
    """F.conv2d (and Conv2d, with its padding mode) on tiles."""
    g, (H, W) = ctx.grid, x.hw
    k, s, d = tuple(weight.shape[2:]), _pair(stride), _pair(dilation)
    p, same = _padding(padding, k, d)
    out_hw = (H, W) if same else tuple(
        maps.window_output_size(n, k[i], s[i], d[i], p[i]) for i, n in enumerate((H, W)))
    if min(out_hw) <= 0:
        raise ctx.error(f"a {k[0]}x{k[1]} window does not fit the {H}x{W} input")
    what = f"conv {k[0]}x{k[1]} stride {s} dilation {d} padding {p}"
    regular = (padding_mode == "zeros" and groups == 1 and not same and k[0] == k[1]
               and s[0] == s[1] and d[0] == d[1] and p[0] == p[1] and g.size > 1
               and _tessera.spatial_conv_problem(H, g.ph, k[0], s[0], d[0], p[0]) == ""
               and _tessera.spatial_conv_problem(W, g.pw, k[0], s[0], d[0], p[0]) == "")
    if regular:  # the C++ models' convolution: equal tiles, neighbour halos, lean backward
        rows = maps.window_map(H, g.ph, k[0], s[0], d[0], p[0])
        cols = maps.window_map(W, g.pw, k[1], s[1], d[1], p[1])
        ctx.note(what + " (C++ halo exchange)", x.hw, out_hw, rows[g.h], cols[g.w], g.rows(H),
                 g.cols(W))
        return Tiled(_tessera.spatial_conv2d(g.native, x.local, weight, bias, s[0], p[0], d[0]),
                     out_hw)
    xin = _windowed(ctx, x, k, s, d, p, padding_mode, out_hw, 0.0,
                    f"{what} {padding_mode}" + (f" groups {groups}" if groups > 1 else ""))
    if xin.shape[2] == 0 or xin.shape[3] == 0:
        y = _linked_zeros(xin, (xin.shape[0], weight.shape[0]) + _local_out(g, out_hw), weight)
        return Tiled(y if bias is None else y + bias.view(1, -1, 1, 1), out_hw)
    return Tiled(F.conv2d(xin, weight, bias, s, 0, d, groups), out_hw)


def conv_transpose2d(ctx, m, x, output_size=None):
    g, (H, W) = ctx.grid, x.hw
    k, s, d, p = (_pair(m.kernel_size), _pair(m.stride), _pair(m.dilation), _pair(m.padding))
    op = m._output_padding(x.local, output_size, list(s), list(p), list(k), 2, list(d)) \
        if output_size is not None else _pair(m.output_padding)
    out_hw = tuple((n - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + op[i] + 1
                   for i, n in enumerate((H, W)))
    rows, roff = maps.transposed_map(H, g.ph, k[0], s[0], d[0], p[0], out_hw[0])
    cols, coff = maps.transposed_map(W, g.pw, k[1], s[1], d[1], p[1], out_hw[1])
    ctx.note(f"transposed conv {k[0]}x{k[1]} s{s}", x.hw, out_hw, rows[g.h], cols[g.w],
             g.rows(H), g.cols(W))
    xin = g.take(x, rows, cols)
    oh, ow = _local_out(g, out_hw)
    if xin.shape[2] == 0 or xin.shape[3] == 0 or oh == 0 or ow == 0:
        y = _linked_zeros(xin, (xin.shape[0], m.out_channels, oh, ow), m.weight)
    else:
        z = F.conv_transpose2d(xin, m.weight, None, s, 0, 0, m.groups, d)
        r, c = roff[g.h], coff[g.w]
        # Crop (negative padding) or extend with zeros to the tile's outputs.
        y = F.pad(z, [-c, c + ow - z.shape[3], -r, r + oh - z.shape[2]])
    return Tiled(y if m.bias is None else y + m.bias.view(1, -1, 1, 1), out_hw)


def max_pool2d(ctx, x, kernel, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    if return_indices:
        raise ctx.error("max pooling with return_indices", "the indices would be the tile's, not "
                        "the image's; accepted: return_indices=False")
    k = _pair(kernel)
    s, p, d = _pair(stride if stride not in (None, []) else kernel), _pair(padding), _pair(dilation)
    out_hw = tuple(maps.window_output_size(n, k[i], s[i], d[i], p[i], ceil_mode)
                   for i, n in enumerate(x.hw))
    # torch pads max pooling with -inf: padding never wins.
    xin = _windowed(ctx, x, k, s, d, p, "zeros", out_hw, float("-inf"),
                    f"max pool {k[0]}x{k[1]} s{s} p{p}")
    if xin.shape[2] == 0 or xin.shape[3] == 0:
        return Tiled(_linked_zeros(xin, xin.shape[:2] + _local_out(ctx.grid, out_hw)), out_hw)
    return Tiled(F.max_pool2d(xin, k, s, 0, d), out_hw)


def avg_pool2d(ctx, x, kernel, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    k = _pair(kernel)
    s, p = _pair(stride if stride not in (None, []) else kernel), _pair(padding)
    out_hw = tuple(maps.window_output_size(n, k[i], s[i], 1, p[i], ceil_mode)
                   for i, n in enumerate(x.hw))
    if ceil_mode and out_hw != tuple(maps.window_output_size(n, k[i], s[i], 1, p[i])
                                     for i, n in enumerate(x.hw)):
        raise ctx.error("average pooling with ceil_mode", "its last window's divisor counts "
                        "positions past the padding differently; accepted: ceil_mode=False, or "
                        "sizes where ceil mode adds no window")
    xin = _windowed(ctx, x, k, s, (1, 1), p, "zeros", out_hw, 0.0,
                    f"avg pool {k[0]}x{k[1]} s{s} p{p}")
    if xin.shape[2] == 0 or xin.shape[3] == 0:
        return Tiled(_linked_zeros(xin, xin.shape[:2] + _local_out(ctx.grid, out_hw)), out_hw)
    if count_include_pad or divisor_override or p == (0, 0):
        return Tiled(F.avg_pool2d(xin, k, s, 0, False, True, divisor_override), out_hw)
    # The divisor counts only the image's positions: pool a mask of them alike.
    g = ctx.grid
    rows = maps.window_map(x.hw[0], g.ph, k[0], s[0], 1, p[0], "zeros", out_hw[0])[g.h]
    cols = maps.window_map(x.hw[1], g.pw, k[1], s[1], 1, p[1], "zeros", out_hw[1])[g.w]
    mask = (torch.tensor([r >= 0 for r in rows], dtype=xin.dtype).view(-1, 1) *
            torch.tensor([c >= 0 for c in cols], dtype=xin.dtype).view(1, -1)).to(xin.device)
    return Tiled(F.avg_pool2d(xin, k, s, 0) / F.avg_pool2d(mask[None, None], k, s, 0), out_hw)


def adaptive_avg_pool2d(ctx, x, output_size):
    """Replicated: each tile sums its pixels of every window, the grid adds the sums."""
    g, (H, W) = ctx.grid, x.hw
    o = _pair([H if v is None else v for v in output_size]
              if isinstance(output_size, (tuple, list)) else output_size)
    if o == (1, 1):
        return spatial_mean(ctx, x, (2, 3), keepdim=True)
    (r0, r1), (c0, c1) = g.rows(H), g.cols(W)

    def weights(n, out, lo, hi):
        a = torch.zeros(out, hi - lo, dtype=x.local.dtype)
        for i, (u, v) in enumerate(maps.adaptive_windows(n, out)):
            a[i, max(u, lo) - lo:max(min(v, hi) - lo, 0)] = 1.0
        return a.to(x.local.device)
    part = torch.einsum("ir,ncrs,js->ncij", weights(H, o[0], r0, r1), x.local,
                        weights(W, o[1], c0, c1))
    counts = torch.tensor([[(v - u) * (b - a) for a, b in maps.adaptive_windows(W, o[1])]
                           for u, v in maps.adaptive_windows(H, o[0])], dtype=x.local.dtype)
    ctx.note(f"adaptive avg pool to {o[0]}x{o[1]} (sum over the grid)", x.hw, o, [], [],
             (r0, r1), (c0, c1))
    return g.group_sum(part) / counts.to(x.local.device)


def global_max_pool(ctx, x):
    """Adaptive max pooling to 1x1, replicated: every tile's maximum in its own slot, summed over
    the grid, then the maximum of the slots (the gradient reaches the winning tile only)."""
    g = ctx.grid
    n, c = x.local.shape[:2]
    if x.local.shape[2] * x.local.shape[3] == 0:
        mine = _linked_zeros(x.local, (n, c)) - float("inf")
    else:
        mine = x.local.amax(dim=(2, 3))
    slots = torch.zeros((g.size, n, c), dtype=x.local.dtype, device=x.local.device)
    slots = slots.index_copy(0, torch.tensor([g.h * g.pw + g.w], device=slots.device),
                             mine.unsqueeze(0))
    ctx.note("adaptive max pool to 1x1 (maximum over the grid)", x.hw, (1, 1), [], [],
             g.rows(x.hw[0]), g.cols(x.hw[1]))
    return g.group_sum(slots).amax(dim=0).view(n, c, 1, 1)


def adaptive_max_pool2d(ctx, x, output_size, return_indices=False):
    if return_indices:
        raise ctx.error("adaptive max pooling with return_indices",
                        "accepted: return_indices=False")
    H, W = x.hw
    o = _pair([H if v is None else v for v in output_size]
              if isinstance(output_size, (tuple, list)) else output_size)
    if o == (1, 1):
        return global_max_pool(ctx, x)
    g = ctx.grid
    wins = (maps.adaptive_windows(H, o[0]), maps.adaptive_windows(W, o[1]))

    def axis_maps(w, parts):
        out = []
        for p in range(parts):
            lo, hi = maps.part_range(len(w), parts, p)
            out.append(list(range(w[lo][0], w[hi - 1][1])) if hi > lo else [])
        return out
    rows, cols = axis_maps(wins[0], g.ph), axis_maps(wins[1], g.pw)
    ctx.note(f"adaptive max pool to {o[0]}x{o[1]}", x.hw, o, rows[g.h], cols[g.w], g.rows(H),
             g.cols(W))
    xin = g.take(x, rows, cols, 0.0)
    (a0, a1), (b0, b1) = maps.part_range(o[0], g.ph, g.h), maps.part_range(o[1], g.pw, g.w)
    if a1 <= a0 or b1 <= b0:
        return Tiled(_linked_zeros(xin, xin.shape[:2] + (a1 - a0, b1 - b0)), o)
    base_r, base_c = wins[0][a0][0], wins[1][b0][0]
    t = torch.stack([xin[:, :, u - base_r:v - base_r].amax(dim=2) for u, v in wins[0][a0:a1]], 2)
    t = torch.stack([t[..., u - base_c:v - base_c].amax(dim=3) for u, v in wins[1][b0:b1]], 3)
    return Tiled(t, o)


def spatial_mean(ctx, x, dims, keepdim=False):
    """x.mean over the image's rows and columns: replicated."""
    dims = sorted(int(d) % 4 for d in (dims if isinstance(dims, (tuple, list)) else [dims]))
    if dims != [2, 3]:
        raise ctx.error(f"mean over dimensions {dims} of a tiled tensor",
                        "accepted: the mean over both image dimensions (2, 3)")
    ctx.note("mean over the image (sum over the grid)", x.hw, (1, 1), [], [],
             ctx.grid.rows(x.hw[0]), ctx.grid.cols(x.hw[1]))
    y = ctx.grid.group_sum(x.local.sum(dim=(2, 3))) / float(x.hw[0] * x.hw[1])
    return y.view(y.shape[0], y.shape[1], 1, 1) if keepdim else y


def batch_norm(ctx, m, x, over):
    """BatchNorm2d with the statistics of the whole image (`over`: 'spatial', or 'all' for
    SyncBatchNorm: every image of the grid's data-parallel ranks too), the C++ models' function."""
    training = m.training or m.running_mean is None
    if not training:
        return Tiled(F.batch_norm(x.local, m.running_mean, m.running_var, m.weight, m.bias, False,
                                  0.0, m.eps), x.hw)
    if m.momentum is None and m.track_running_stats:
        raise ctx.error("BatchNorm with momentum=None (a cumulative average)",
                        "accepted: a float momentum")
    if m.training and m.track_running_stats and m.num_batches_tracked is not None:
        m.num_batches_tracked.add_(1)
    empty = x.local.new_empty(0, dtype=m.weight.dtype if m.weight is not None else None)
    def given(t):
        return t if t is not None else empty
    ctx.note(f"batch norm (statistics over the {over} group)", x.hw, x.hw, [], [],
             ctx.grid.rows(x.hw[0]), ctx.grid.cols(x.hw[1]))
    # Mixed precision: the statistics in the parameters' dtype (torch's CPU BatchNorm does the
    # same with a bfloat16 input), the output in the input's.
    dtype = m.weight.dtype if m.weight is not None else x.local.dtype
    y = _tessera.spatial_batch_norm(
        ctx.grid.native, x.local.to(dtype), given(m.weight), given(m.bias),
        given(m.running_mean if m.training else None), given(m.running_var if m.training else None),
        float(m.momentum or 0.0), float(m.eps), over)
    return Tiled(y.to(x.local.dtype), x.hw)


INTERPOLATE_MODES = ("nearest", "nearest-exact", "bilinear")


def interpolate(ctx, x, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    if mode not in INTERPOLATE_MODES or antialias:
        raise ctx.error(f"interpolation mode {mode!r}" + (" with antialias" if antialias else ""),
                        f"accepted: {', '.join(INTERPOLATE_MODES)} without antialias")
    g = ctx.grid
    H, W = x.hw if isinstance(x, Tiled) else x.shape[-2:]
    sizes = size if isinstance(size, (tuple, list)) else (size, size)
    scales = scale_factor if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * 2
    (oh, sh), (ow, sw) = (maps.interpolate_size(H, sizes[0], scales[0], recompute_scale_factor),
                          maps.interpolate_size(W, sizes[1], scales[1], recompute_scale_factor))
    hw = (H, W)
    if mode != "bilinear":
        src = (maps.nearest_sources(H, oh, sh, mode == "nearest-exact"),
               maps.nearest_sources(W, ow, sw, mode == "nearest-exact"))
        rows = [src[0][slice(*maps.part_range(oh, g.ph, p))] for p in range(g.ph)]
        cols = [src[1][slice(*maps.part_range(ow, g.pw, p))] for p in range(g.pw)]
        ctx.note(f"interpolate {mode}", hw, (oh, ow), rows[g.h], cols[g.w],
                 g.rows(H), g.cols(W))
        return Tiled(g.take(x, rows, cols), (oh, ow))
    lin = (maps.linear_sources(H, oh, sh, bool(align_corners)),
           maps.linear_sources(W, ow, sw, bool(align_corners)))
    # Columns first, then rows: torch's order, h0 * (w0 * x00 + w1 * x01) + h1 * (...).
    own_rows = [list(range(*maps.part_range(H, g.ph, p))) for p in range(g.ph)]
    cols = [_two_sources(lin[1], maps.part_range(ow, g.pw, p)) for p in range(g.pw)]
    a = g.take(x, own_rows, cols)
    (b0, b1) = maps.part_range(ow, g.pw, g.w)
    w0, w1 = _weights(lin[1][b0:b1], a, 3)
    t = Tiled(a[..., :b1 - b0] * w0 + a[..., b1 - b0:] * w1, (H, ow))
    own_cols = [list(range(*maps.part_range(ow, g.pw, p))) for p in range(g.pw)]
    rows = [_two_sources(lin[0], maps.part_range(oh, g.ph, p)) for p in range(g.ph)]
    ctx.note(f"interpolate bilinear align_corners={bool(align_corners)}", hw, (oh, ow),
             rows[g.h], cols[g.w], g.rows(H), g.cols(W))
    b = g.take(t, rows, own_cols)
    (a0, a1) = maps.part_range(oh, g.ph, g.h)
    h0, h1 = _weights(lin[0][a0:a1], b, 2)
    return Tiled(b[:, :, :a1 - a0] * h0 + b[:, :, a1 - a0:] * h1, (oh, ow))


def _two_sources(lin, span):
    part = lin[span[0]:span[1]]
    return [r[0] for r in part] + [r[1] for r in part]


def _weights(part, like, dim):
    shape = [1, 1, 1, 1]
    shape[dim] = len(part)
    w0 = torch.tensor([r[2] for r in part], dtype=like.dtype, device=like.device).view(shape)
    w1 = torch.tensor([r[3] for r in part], dtype=like.dtype, device=like.device).view(shape)
    return w0, w1


PAD_MODES = {"constant": "zeros", "reflect": "reflect", "replicate": "replicate",
             "circular": "circular"}


def pad(ctx, x, amounts, mode="constant", value=None):
    """F.pad on the image's rows and columns (negative amounts crop)."""
    amounts = [int(a) for a in amounts]
    if len(amounts) not in (2, 4) or mode not in PAD_MODES:
        raise ctx.error(f"F.pad with {amounts} mode {mode!r}", "accepted: the last two "
                        f"dimensions (2 or 4 amounts), modes {', '.join(PAD_MODES)}")
    left, right = amounts[0], amounts[1]
    top, bottom = (amounts[2], amounts[3]) if len(amounts) == 4 else (0, 0)
    g, (H, W) = ctx.grid, x.hw
    rows = maps.pad_map(H, g.ph, top, bottom, PAD_MODES[mode])
    cols = maps.pad_map(W, g.pw, left, right, PAD_MODES[mode])
    out_hw = (H + top + bottom, W + left + right)
    ctx.note(f"pad {amounts} {mode}", x.hw, out_hw, rows[g.h], cols[g.w], g.rows(H), g.cols(W))
    return Tiled(g.take(x, rows, cols, float(value or 0.0)), out_hw)
