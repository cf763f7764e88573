"""tessera.torch.spatial at the pytest job's size (1, 2 or 3 ranks, grids 1xN and Nx1): every layer it
runs on tiles against the whole image (f64), each unsupported op's error naming its module, the
tile movement helpers (scatter, gather, read_tile), checkpoints, mixed precision and the printed
halo plan. tests/spatial_models.py checks the torchvision models at 4 ranks."""
import copy
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tessera.torch as hvd
from tessera import _tessera
from tessera.torch import spatial

# Largest differences measured at 1-3 ranks (2026-12-07, /tmp script over both cuts): forward
# 5.0e-16, gradients (relative to the model's largest) 1.16e-15; tolerances about 100x.
FORWARD_TOL, GRAD_TOL = 5e-14, 1.2e-13


def grids():
    n = hvd.size()
    return [(1, n)] if n == 1 else [(1, n), (n, 1)]


def grid_of(cut):
    """Tiles across (1 x N) or down (N x 1), N the job's size."""
    return (1, hvd.size()) if cut == "across" else (hvd.size(), 1)


class Zoo(nn.Module):
    """One of every layer the partitioner runs on tiles, with a tiled and a whole output."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 6, (3, 2), stride=(2, 1), padding=(1, 2), padding_mode="reflect")
        self.bn = nn.BatchNorm2d(6)
        self.grouped = nn.Conv2d(6, 6, 3, padding=2, dilation=2, groups=3, padding_mode="circular")
        self.same = nn.Conv2d(6, 6, 4, padding="same", padding_mode="replicate", bias=False)
        self.sync = hvd.SyncBatchNorm(6)
        self.pool = nn.MaxPool2d(3, 2, 1, ceil_mode=True)
        self.avg = nn.AvgPool2d(3, 1, 1, count_include_pad=False)
        self.up = nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1, dilation=1)
        self.bilinear = nn.Upsample(scale_factor=1.7, mode="bilinear", align_corners=False)
        self.head = nn.Conv2d(10, 3, 1)
        self.fc = nn.Linear(6 * 3 * 2 + 6 + 6, 5)

    def forward(self, x):
        x = F.relu(self.bn(self.stem(x)))
        x = x + torch.sigmoid(self.grouped(x))
        x = self.sync(self.same(x)).relu()
        y = self.avg(self.pool(x))
        up = self.up(y)
        near = F.interpolate(y, size=(up.size(2), up.size(3)), mode="nearest-exact")[:, :6]
        a = F.interpolate(self.bilinear(near), size=up.shape[-2:], mode="bilinear",
                          align_corners=True)
        z = torch.cat([up, F.pad(a, [1, -1, -1, 1], mode="constant")], 1)
        seg = F.softmax(self.head(z), dim=1)
        pooled = torch.cat([torch.flatten(F.adaptive_avg_pool2d(x, (3, 2)), 1),
                            torch.flatten(F.adaptive_max_pool2d(x, 1), 1), x.mean((2, 3))], 1)
        return seg, self.fc(pooled)


def one_process(model):
    """The model as one process runs it: SyncBatchNorm as BatchNorm2d over its own batch."""
    ref = copy.deepcopy(model)
    plain = nn.BatchNorm2d(ref.sync.num_features).double()
    plain.load_state_dict(ref.sync.state_dict())
    ref.sync = plain
    return ref


def whole_and_tiled(model, x, grid):
    ref = one_process(model)
    part = spatial.partition(copy.deepcopy(model), grid)
    seg, cls = ref(x)
    gen = torch.Generator().manual_seed(8)
    weights = (torch.randn(seg.shape, dtype=torch.float64, generator=gen),
               torch.randn(cls.shape, dtype=torch.float64, generator=gen))
    ((seg * weights[0]).sum() + (cls * weights[1]).sum()).backward()
    pseg, pcls = part(spatial.scatter(x, part))
    ((pseg * part.grid.tile_of(weights[0])).sum() * part.loss_scale +
     (pcls * weights[1]).sum()).backward()
    return ref, (seg, cls), part, (pseg, pcls)



@pytest.mark.parametrize("cut", ["across", "down"])
def test_every_layer_on_tiles_equals_the_whole_image(cut):
    grid = grid_of(cut)
    torch.manual_seed(3)
    model = Zoo().double()
    x = torch.randn(2, 3, 23, 19, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    ref, (seg, cls), part, (pseg, pcls) = whole_and_tiled(model, x, grid)
    assert (spatial.gather(pseg, part) - seg).abs().max().item() <= FORWARD_TOL
    assert (pcls - cls).abs().max().item() <= FORWARD_TOL
    scale = max(p.grad.abs().max().item() for p in ref.parameters())
    for (name, p), q in zip(part.module.named_parameters(), ref.parameters()):
        g = hvd.allreduce(p.grad, name=f"zoo.{grid}.{name}")
        assert (g - q.grad).abs().max().item() <= GRAD_TOL * scale, name
    for a, b in zip(part.module.buffers(), ref.buffers()):
        assert torch.allclose(a.double(), b.double(), rtol=0, atol=1e-14)


def test_eval_mode_uses_the_running_statistics():
    torch.manual_seed(6)  # the same model on every rank
    model = Zoo().double().eval()
    x = torch.randn(1, 3, 17, 21, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    part = spatial.partition(copy.deepcopy(model), grids()[-1])
    with torch.no_grad():
        seg, cls = one_process(model).eval()(x)
        pseg, pcls = part(spatial.scatter(x, part))
    assert (spatial.gather(pseg, part) - seg).abs().max().item() <= FORWARD_TOL
    assert (pcls - cls).abs().max().item() <= FORWARD_TOL


class One(nn.Module):
    """A convolution, then `op` inside the submodule `body.inner`."""

    def __init__(self, op):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.body = nn.Sequential()
        self.body.add_module("inner", op)

    def forward(self, x):
        return self.body(self.conv(x))


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


UNSUPPORTED = {
    "GroupNorm": (nn.GroupNorm(2, 4), "GroupNorm"),
    "LayerNorm": (nn.LayerNorm([4, 9, 8]), "LayerNorm"),
    "Linear on a tile": (nn.Linear(8, 3), "Linear"),
    "flatten of a tile": (Fn(lambda x: torch.flatten(x, 1)), "flatten"),
    "view of a tile": (Fn(lambda x: x.view(x.shape[0], -1)), ".view()"),
    "slicing a tile": (Fn(lambda x: x[:, :, 1:]), "rows or columns"),
    "cat along rows": (Fn(lambda x: torch.cat([x, x], 2)), "dimension 2"),
    "bicubic": (Fn(lambda x: F.interpolate(x, scale_factor=2, mode="bicubic")), "bicubic"),
    "avg pool ceil mode": (nn.AvgPool2d(2, ceil_mode=True), "ceil_mode"),
    "max pool indices": (nn.MaxPool2d(2, return_indices=True), "return_indices"),
    "momentum None": (nn.BatchNorm2d(4, momentum=None), "momentum=None"),
    "mean over channels": (Fn(lambda x: x.mean(1)), "mean over dimensions [1]"),
    "roll": (Fn(lambda x: torch.roll(x, 1, 2)), "roll"),
    "softmax over rows": (nn.Softmax(dim=2), "dimension 2"),
}


@pytest.mark.parametrize("kind", sorted(UNSUPPORTED))
def test_each_unsupported_op_raises_naming_the_module(kind):
    op, what = UNSUPPORTED[kind]
    part = spatial.partition(One(op), grids()[-1])
    x = torch.randn(1, 3, 9, 8)
    with pytest.raises(spatial.SpatialError) as e:
        part(spatial.scatter(x, part))
    assert "body.inner" in str(e.value) and what in str(e.value), str(e.value)


def test_an_untraceable_forward_is_refused_with_fxs_reason():
    class Branchy(nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x
    with pytest.raises(spatial.SpatialError, match="could not trace Branchy.forward"):
        spatial.partition(Branchy(), grids()[-1])


def test_a_bad_grid_names_the_grids_that_fit():
    with pytest.raises(spatial.SpatialError, match=r"accepted: \(P, Q\)"):
        spatial.partition(One(nn.ReLU()), (0, 2))
    if hvd.size() > 1:
        with pytest.raises(ValueError, match="grid"):
            spatial.partition(One(nn.ReLU()), (hvd.size() + 1, 1))


def test_scatter_from_one_tile_and_gather_back_keep_the_dtype():
    part = spatial.partition(One(nn.ReLU()), grids()[-1])
    image = torch.arange(2 * 11 * 7).view(2, 1, 11, 7)  # int64 labels
    me = part.grid.h * part.grid.pw + part.grid.w
    tile = spatial.scatter(image if me == 0 else None, part)
    assert tile.dtype == torch.int64 and torch.equal(tile, part.grid.tile_of(image))
    assert torch.equal(spatial.gather(tile, part), image)
    if hvd.size() > 1:  # held by tile 1 alone: refused on every tile alike
        with pytest.raises(spatial.SpatialError, match=r"tiles \[1\] of .* tile 0 alone"):
            spatial.scatter(image if me == 1 else None, part)


def test_read_tile_reads_this_ranks_tile_of_a_slide(tmp_path):
    path = str(tmp_path).replace(str(hvd.rank()), "") + "-slide.tif"
    path = hvd.broadcast_object(os.path.join("/tmp", f"tessera-spatial-{os.getppid()}.tif"), 0)
    if hvd.rank() == 0:
        def fill(y, x, h, w):
            rows = torch.arange(y, y + h).view(-1, 1, 1) % 251
            cols = torch.arange(x, x + w).view(1, -1, 1) % 241
            return (rows + cols + torch.tensor([0, 1, 2])).remainder(256).to(torch.uint8)
        _tessera.write_tiled_tiff(path, 100, 90, 32, fill)
    hvd.barrier()
    part = spatial.partition(One(nn.ReLU()), grids()[-1])
    tile = spatial.read_tile(path, part)
    whole = _tessera.SlideReader(path).read_region(0, 0, 100, 90)
    assert torch.equal(tile, part.grid.tile_of(whole.permute(2, 0, 1).unsqueeze(0).float() / 255))
    hvd.barrier()
    if hvd.rank() == 0:
        os.remove(path)


def test_checkpoints_are_the_unpartitioned_models():
    torch.manual_seed(7)
    model = Zoo()
    part = spatial.partition(model, grids()[-1])
    state = {k: v.clone() for k, v in part.state_dict().items()}
    assert list(state) == list(Zoo().state_dict())
    fresh = Zoo()
    fresh.load_state_dict(state)  # into the unpartitioned model
    assert all(torch.equal(a, state[k]) for k, a in fresh.state_dict().items())
    other = Zoo()
    part.load_state_dict(other.state_dict())  # and back
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                other.state_dict().values()))


def test_mixed_precision_runs_in_bfloat16_close_to_the_whole_image():
    torch.manual_seed(5)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 4, 3, padding=1))
    x = torch.randn(2, 3, 16, 14)
    part = spatial.partition(copy.deepcopy(model), grids()[-1])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = model(x)
        got = part(spatial.scatter(x, part))
    assert got.dtype == want.dtype == torch.bfloat16
    diff = (spatial.gather(got.float(), part) - want.float()).abs().max().item()
    assert diff <= 0.05 * want.float().abs().max().item()


def test_the_plan_names_each_layer_and_its_halo():
    part = spatial.partition(One(nn.MaxPool2d(3, 1, 1)), grids()[-1])
    part(spatial.scatter(torch.randn(1, 3, 12, 10), part))
    text = part.format_plan()
    assert "conv" in text and "max pool 3x3" in text and "12x10 -> 12x10" in text
    first = part.plan[0]
    g = part.grid
    expect_rows = (1 if g.h > 0 else 0, 1 if g.h < g.ph - 1 else 0)
    expect_cols = (1 if g.w > 0 else 0, 1 if g.w < g.pw - 1 else 0)
    assert (first["halo_rows"], first["halo_cols"]) == (expect_rows, expect_cols), first


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_tiles_equal_the_whole_image_on_the_cpu():
    """The GPU path (staged through host memory, as the C++ layers): every layer's tiles on CUDA
    against the whole image on the CPU (f64). Run by scripts/gpu_check.sh."""
    torch.manual_seed(3)
    model = Zoo().double()
    x = torch.randn(2, 3, 23, 19, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    ref = one_process(model)
    seg, cls = ref(x)
    part = spatial.partition(copy.deepcopy(model).cuda(), grids()[-1])
    pseg, pcls = part(spatial.scatter(x.cuda(), part))
    assert pseg.is_cuda and pcls.is_cuda
    assert (spatial.gather(pseg, part).cpu() - seg).abs().max().item() <= 1e-10
    assert (pcls.cpu() - cls).abs().max().item() <= 1e-10


def test_a_process_sets_ranks_form_the_grid_and_the_others_refuse_to_run():
    if hvd.size() < 2:
        pytest.skip("needs 2 ranks")
    torch.manual_seed(11)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()).double()
    x = torch.randn(1, 3, 9, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(12))
    part = spatial.partition(copy.deepcopy(model), (1, 2), process_set=hvd.ProcessSet([0, 1]))
    if hvd.rank() >= 2:
        with pytest.raises(spatial.SpatialError, match="not in the partitioned model's process set"):
            part(x)
        return
    y = spatial.gather(part(spatial.scatter(x, part)), part)
    assert (y - model(x)).abs().max().item() <= FORWARD_TOL
