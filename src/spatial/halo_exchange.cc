#include "spatial/halo_exchange.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <memory>

#include "comm/collectives.h"
#include "common/error.h"

namespace tessera {
namespace spatial {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

std::atomic<int64_t> halo_ns{0};

torch::Tensor region(const torch::Tensor& t, const Rect& r) {
  return t.narrow(2, r.r0, r.rows()).narrow(3, r.c0, r.cols());
}

// Moves `send(region)` to each neighbour and receives into `recv(region)` buffers; then calls
// `land(region, received)` for each, `received` on `from`'s device. `backward` swaps the roles
// of the two rectangles. MPI reads and writes host memory (Open MPI as Debian builds it is not
// CUDA-aware), so a GPU tile's halos are staged through the CPU: a halo is a thin strip, and
// the copies are a small share of the convolution around it.
void move(const HaloPlan& plan, comm::Communicator& comm, const torch::Tensor& from,
          const std::function<void(const HaloRegion&, const torch::Tensor&)>& land, bool backward) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<torch::Tensor> keep;  // the send buffers live until the exchange is done
  std::vector<torch::Tensor> got(8);
  std::vector<comm::PeerBuffer> sends, recvs;
  const int64_t n = from.size(0), c = from.size(1);
  const int tag_base = backward ? 8 : 0;
  for (size_t k = 0; k < plan.regions.size(); ++k) {
    const HaloRegion& r = plan.regions[k];
    if (r.peer < 0) continue;
    const Rect& out = backward ? r.recv : r.send;
    const Rect& in = backward ? r.send : r.recv;
    if (!out.empty()) {
      keep.push_back(region(from, out).to(torch::kCPU).contiguous());
      sends.push_back({r.peer, tag_base + r.send_tag, keep.back().data_ptr(),
                       static_cast<size_t>(keep.back().nbytes())});
    }
    if (!in.empty()) {
      got[k] = torch::empty({n, c, in.rows(), in.cols()}, from.options().device(torch::kCPU));
      recvs.push_back(
          {r.peer, tag_base + r.recv_tag, got[k].data_ptr(), static_cast<size_t>(got[k].nbytes())});
    }
  }
  comm::exchange(comm, sends, recvs);
  for (size_t k = 0; k < plan.regions.size(); ++k) {
    if (got[k].defined()) land(plan.regions[k], got[k].to(from.device()));
  }
  halo_ns +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
}

// The plan's rectangles and peers as integers, for the backward pass (which runs after the
// caller's plan is gone): ext rows, ext cols, own rect, then per region peer, tags, send, recv.
std::vector<int64_t> encode(const HaloPlan& p) {
  std::vector<int64_t> v = {p.ext_rows, p.ext_cols, p.own.r0, p.own.r1, p.own.c0, p.own.c1};
  for (const HaloRegion& r : p.regions) {
    v.insert(v.end(), {r.dh, r.dw, r.peer, r.send_tag, r.recv_tag, r.send.r0, r.send.r1, r.send.c0,
                       r.send.c1, r.recv.r0, r.recv.r1, r.recv.c0, r.recv.c1});
  }
  return v;
}

HaloPlan decode(const std::vector<int64_t>& v) {
  HaloPlan p;
  p.ext_rows = v[0];
  p.ext_cols = v[1];
  p.own = Rect{v[2], v[3], v[4], v[5]};
  for (size_t k = 0; k < 8; ++k) {
    const int64_t* x = v.data() + 6 + 13 * k;
    HaloRegion& r = p.regions[k];
    r.dh = static_cast<int>(x[0]);
    r.dw = static_cast<int>(x[1]);
    r.peer = static_cast<int>(x[2]);
    r.send_tag = static_cast<int>(x[3]);
    r.recv_tag = static_cast<int>(x[4]);
    r.send = Rect{x[5], x[6], x[7], x[8]};
    r.recv = Rect{x[9], x[10], x[11], x[12]};
  }
  return p;
}

// The extended buffer: the tile in its own block, the neighbours' halos around it (zeros where
// there are none). `received`, when given, keeps each region's halo (by region index) so a
// backward can rebuild the buffer without another exchange.
torch::Tensor frame(const torch::Tensor& x, const HaloPlan& plan, comm::Communicator& comm,
                    std::vector<torch::Tensor>* received) {
  torch::Tensor ext =
      torch::zeros({x.size(0), x.size(1), plan.ext_rows, plan.ext_cols}, x.options());
  region(ext, plan.own).copy_(x);
  if (received != nullptr) received->assign(plan.regions.size(), torch::Tensor());
  move(
      plan, comm, x,
      [&](const HaloRegion& r, const torch::Tensor& t) {
        region(ext, r.recv).copy_(t);
        if (received != nullptr) (*received)[static_cast<size_t>(&r - plan.regions.data())] = t;
      },
      false);
  return ext;
}

// The same buffer from the tile and the halos `frame` kept.
torch::Tensor reframe(const torch::Tensor& x, const HaloPlan& plan,
                      const std::vector<torch::Tensor>& received) {
  torch::Tensor ext =
      torch::zeros({x.size(0), x.size(1), plan.ext_rows, plan.ext_cols}, x.options());
  region(ext, plan.own).copy_(x);
  for (size_t k = 0; k < plan.regions.size(); ++k) {
    if (received[k].defined()) region(ext, plan.regions[k].recv).copy_(received[k]);
  }
  return ext;
}

// The tile's gradient from its buffer's: the own block's, plus what the neighbours send back
// for the halos they received from this tile.
torch::Tensor unframe_grad(const torch::Tensor& grad_ext, const HaloPlan& plan,
                           comm::Communicator& comm) {
  const torch::Tensor g = grad_ext.contiguous();
  torch::Tensor gx = region(g, plan.own).clone();
  move(
      plan, comm, g,
      [&](const HaloRegion& r, const torch::Tensor& t) { region(gx, r.send).add_(t); }, true);
  return gx;
}

struct HaloExchange : public torch::autograd::Function<HaloExchange> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor tile, const HaloPlan* plan,
                               comm::Communicator* comm) {
    ctx->saved_data["plan"] = encode(*plan);
    // The spatial communicator outlives the model's graph (it belongs to the grid).
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    return frame(tile.contiguous(), *plan, *comm, nullptr);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const HaloPlan plan = decode(ctx->saved_data["plan"].toIntVector());
    auto* comm = reinterpret_cast<comm::Communicator*>(ctx->saved_data["comm"].toInt());
    return {unframe_grad(grads[0], plan, *comm), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

double halo_exchange_seconds() { return static_cast<double>(halo_ns.load()) * 1e-9; }

torch::Tensor halo_exchange(const torch::Tensor& tile, const HaloPlan& plan,
                            comm::Communicator& spatial) {
  TESSERA_CHECK(tile.dim() == 4, "halo_exchange takes [N, C, H, W] tiles, got ", tile.sizes());
  TESSERA_CHECK(tile.size(2) == plan.own.rows() && tile.size(3) == plan.own.cols(),
                "halo_exchange: the tile is ", tile.sizes(), " but the plan's block is ",
                plan.own.rows(), "x", plan.own.cols());
  return HaloExchange::apply(tile, &plan, &spatial);
}

namespace {

// A windowed layer's input beyond its tile: the halo plan, and on each axis the owned rows or
// columns at the ends that the layer does not read and the padding it applies at the image's
// border (border tiles only).
std::vector<int64_t> pair(int64_t v) { return {v, v}; }

struct Window {
  std::vector<AxisTile> rows, cols;  // the plan points into these
  HaloPlan plan;
  std::vector<int64_t> edges;  // row skip lo, hi, col skip lo, hi, row pad lo, hi, col pad lo, hi
};

std::unique_ptr<Window> plan_window(const torch::Tensor& tile, int64_t kh, int64_t kw,
                                    int64_t stride, int64_t padding, int64_t dilation,
                                    const TileSpace& s, const char* layer) {
  TESSERA_CHECK(s.comm != nullptr && s.comm->size() == s.ph * s.pw, layer, " needs the ", s.ph, "x",
                s.pw, " spatial group's communicator");
  TESSERA_CHECK(tile.dim() == 4, layer, " takes [N, C, H, W] tiles, got ", tile.sizes());
  auto w = std::make_unique<Window>();
  w->rows =
      plan_axis(tile.size(2) * s.ph, s.ph, WindowSpec{kh, stride, dilation, padding}, "height");
  w->cols =
      plan_axis(tile.size(3) * s.pw, s.pw, WindowSpec{kw, stride, dilation, padding}, "width");
  w->plan = plan_halos(s.ph, s.pw, s.h, s.w, w->rows, w->cols);
  const AxisTile& r = *w->plan.row;
  const AxisTile& c = *w->plan.col;
  w->edges = {r.skip_lo, r.skip_hi, c.skip_lo, c.skip_hi, r.pad_lo, r.pad_hi, c.pad_lo, c.pad_hi};
  return w;
}

// The part of the extended buffer the layer reads, padded at the image's border with `fill`:
// ready for the layer with padding 0.
torch::Tensor crop_pad(const torch::Tensor& ext, const std::vector<int64_t>& e, double fill) {
  // Only a real crop is a narrow: under autograd even a whole-range narrow costs a backward that
  // allocates, zeroes and copies a gradient the size of the input.
  torch::Tensor x = ext;
  if (e[0] + e[1] > 0) x = x.narrow(2, e[0], x.size(2) - e[0] - e[1]);
  if (e[2] + e[3] > 0) x = x.narrow(3, e[2], x.size(3) - e[2] - e[3]);
  if (e[4] + e[5] + e[6] + e[7] > 0) x = torch::constant_pad_nd(x, {e[6], e[7], e[4], e[5]}, fill);
  return x;
}

// The tile framed by the halos a window of kh x kw needs (through the HaloExchange autograd
// function): pooling's input.
torch::Tensor windowed_input(const torch::Tensor& tile, int64_t kh, int64_t kw, int64_t stride,
                             int64_t padding, int64_t dilation, double fill, const TileSpace& s,
                             const char* layer) {
  const std::unique_ptr<Window> w = plan_window(tile, kh, kw, stride, padding, dilation, s, layer);
  const torch::Tensor ext = s.ph * s.pw > 1 ? halo_exchange(tile, w->plan, *s.comm) : tile;
  return crop_pad(ext, w->edges, fill);
}

// A 1x1 convolution with stride 1 as what it is, one matrix product per sample (OpenBLAS), in
// both directions. On one thread torch runs these through slow_conv2d, whose backward took
// 1.5x the time of the two products here (ResNet-50's bottleneck shapes, profiled), and a rank
// of a spatial grid usually has one thread; oneDNN's forward was slower still on one thread.
struct PointwiseConv : public torch::autograd::Function<PointwiseConv> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor tile, torch::Tensor weight,
                               torch::Tensor bias) {
    const torch::Tensor x = tile.contiguous();
    const int64_t n = x.size(0), ci = x.size(1), h = x.size(2), w = x.size(3), co = weight.size(0);
    const torch::Tensor wm = weight.reshape({co, ci});
    torch::Tensor y = torch::empty({n, co, h, w}, x.options());
    for (int64_t i = 0; i < n; ++i) {
      torch::Tensor out = y[i].view({co, h * w});
      torch::mm_out(out, wm, x[i].view({ci, h * w}));
    }
    const bool has_bias = bias.numel() > 0;
    if (has_bias) y.add_(bias.view({1, co, 1, 1}));
    ctx->save_for_backward({x, weight});
    ctx->saved_data["bias"] = has_bias;
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor gy = grads[0].contiguous();
    const int64_t n = x.size(0), ci = x.size(1), hw = x.size(2) * x.size(3), co = weight.size(0);
    const torch::Tensor wm = weight.reshape({co, ci});
    torch::Tensor gx;
    if (ctx->needs_input_grad(0)) {
      gx = torch::empty_like(x);
      for (int64_t i = 0; i < n; ++i) {
        torch::Tensor out = gx[i].view({ci, hw});
        torch::mm_out(out, wm.t(), gy[i].view({co, hw}));
      }
    }
    torch::Tensor gw = torch::zeros({co, ci}, x.options());
    for (int64_t i = 0; i < n; ++i) gw.addmm_(gy[i].view({co, hw}), x[i].view({ci, hw}).t());
    const bool has_bias = ctx->saved_data["bias"].toBool();
    return {gx, gw.view(weight.sizes()), has_bias ? gy.sum({0, 2, 3}) : torch::Tensor()};
  }
};

// The convolution over a tile as one autograd function. It keeps the tile (which the layer
// before keeps anyway) and the few received halo rows, not the framed copy: framing again in
// the backward costs a copy, keeping the frame would cost a second copy of every convolution's
// input for the whole step, the memory spatial decomposition exists to save.
struct TiledConv : public torch::autograd::Function<TiledConv> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor tile, torch::Tensor weight,
                               torch::Tensor bias, int64_t stride, int64_t dilation,
                               std::vector<int64_t> plan, std::vector<int64_t> edges,
                               comm::Communicator* comm) {
    const torch::Tensor x = tile.contiguous();
    std::vector<torch::Tensor> halos;
    const torch::Tensor ext = frame(x, decode(plan), *comm, &halos);
    std::vector<torch::Tensor> keep = {x, weight};
    keep.insert(keep.end(), halos.begin(), halos.end());
    ctx->save_for_backward(keep);
    ctx->saved_data["plan"] = plan;
    ctx->saved_data["edges"] = edges;
    ctx->saved_data["stride"] = stride;
    ctx->saved_data["dilation"] = dilation;
    // No bias comes as an empty tensor: autograd functions take defined tensors only.
    const bool has_bias = bias.numel() > 0;
    ctx->saved_data["bias"] = has_bias;
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);  // the grid outlives the graph
    const std::vector<int64_t> st = {stride, stride}, zero = {0, 0}, dil = {dilation, dilation};
    return torch::conv2d(crop_pad(ext, edges, 0.0), weight, has_bias ? bias : torch::Tensor(),
                         at::IntArrayRef(st), at::IntArrayRef(zero), at::IntArrayRef(dil));
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& weight = saved[1];
    const HaloPlan plan = decode(ctx->saved_data["plan"].toIntVector());
    const std::vector<int64_t> e = ctx->saved_data["edges"].toIntVector();
    const int64_t stride = ctx->saved_data["stride"].toInt();
    const int64_t dilation = ctx->saved_data["dilation"].toInt();
    const bool has_bias = ctx->saved_data["bias"].toBool();
    auto* comm = reinterpret_cast<comm::Communicator*>(ctx->saved_data["comm"].toInt());
    const torch::Tensor ext =
        reframe(x, plan, std::vector<torch::Tensor>(saved.begin() + 2, saved.end()));
    const torch::Tensor in = crop_pad(ext, e, 0.0);
    const std::vector<int64_t> bias_sizes = {weight.size(0)}, st = {stride, stride}, zero = {0, 0},
                               dil = {dilation, dilation};
    // The image's tile (the stem's input) needs no gradient: neither its computation nor the
    // exchange (every rank's stem alike, so no neighbour waits for it).
    const bool input_grad = ctx->needs_input_grad(0);
    auto [g_in, g_weight, g_bias] = at::convolution_backward(
        grads[0].contiguous(), in, weight,
        has_bias ? at::OptionalIntArrayRef(bias_sizes) : at::OptionalIntArrayRef(c10::nullopt),
        at::IntArrayRef(st), at::IntArrayRef(zero), at::IntArrayRef(dil), false,
        at::IntArrayRef(zero), 1, {input_grad, true, has_bias});
    if (!input_grad) {
      return {torch::Tensor(), g_weight,        has_bias ? g_bias : torch::Tensor(),
              torch::Tensor(), torch::Tensor(), torch::Tensor(),
              torch::Tensor(), torch::Tensor()};
    }
    // Back through the crop and the padding into the buffer, then to the halos' owners.
    torch::Tensor g_ext = torch::zeros_like(ext);
    const int64_t rows = ext.size(2) - e[0] - e[1], cols = ext.size(3) - e[2] - e[3];
    g_ext.narrow(2, e[0], rows)
        .narrow(3, e[2], cols)
        .copy_(g_in.narrow(2, e[4], rows).narrow(3, e[6], cols));
    return {unframe_grad(g_ext, plan, *comm),
            g_weight,
            has_bias ? g_bias : torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor spatial_conv2d(const torch::Tensor& tile, const torch::Tensor& weight,
                             const torch::Tensor& bias, int64_t stride, int64_t padding,
                             int64_t dilation, const TileSpace& s) {
  TESSERA_CHECK(weight.dim() == 4, "spatial_conv2d takes [C', C, kh, kw] weights");
  const std::unique_ptr<Window> w = plan_window(tile, weight.size(2), weight.size(3), stride,
                                                padding, dilation, s, "spatial_conv2d");
  if (s.ph * s.pw == 1) {  // one tile: the ordinary convolution
    const std::vector<int64_t> st = pair(stride), pad = pair(padding), dil = pair(dilation);
    return torch::conv2d(tile, weight, bias, at::IntArrayRef(st), at::IntArrayRef(pad),
                         at::IntArrayRef(dil));
  }
  // A window that reads nothing of the neighbours (1x1 convolutions): no neighbour sends this
  // tile anything or expects anything from it, so it skips the exchange and the frame.
  const bool alone =
      std::all_of(w->plan.regions.begin(), w->plan.regions.end(),
                  [](const HaloRegion& r) { return r.send.empty() && r.recv.empty(); });
  if (alone) {
    const std::vector<int64_t> st = pair(stride), zero = pair(0), dil = pair(dilation);
    const torch::Tensor x = crop_pad(tile, w->edges, 0.0);
    const bool pointwise = weight.size(2) == 1 && weight.size(3) == 1 && stride == 1 &&
                           dilation == 1 && x.is_same(tile);
    if (pointwise) {
      return PointwiseConv::apply(tile, weight,
                                  bias.defined() ? bias : torch::empty({0}, tile.options()));
    }
    return torch::conv2d(x, weight, bias, at::IntArrayRef(st), at::IntArrayRef(zero),
                         at::IntArrayRef(dil));
  }
  return TiledConv::apply(tile, weight, bias.defined() ? bias : torch::empty({0}, tile.options()),
                          stride, dilation, encode(w->plan), w->edges, s.comm);
}

torch::Tensor spatial_max_pool2d(const torch::Tensor& tile, int64_t kernel, int64_t stride,
                                 int64_t padding, int64_t dilation, const TileSpace& s) {
  // torch pads max pooling with -infinity: padding never wins.
  const torch::Tensor x =
      windowed_input(tile, kernel, kernel, stride, padding, dilation,
                     -std::numeric_limits<double>::infinity(), s, "spatial_max_pool2d");
  const std::vector<int64_t> k = pair(kernel), st = pair(stride), zero = pair(0),
                             dil = pair(dilation);
  return torch::max_pool2d(x, at::IntArrayRef(k), at::IntArrayRef(st), at::IntArrayRef(zero),
                           at::IntArrayRef(dil));
}

torch::Tensor spatial_avg_pool2d(const torch::Tensor& tile, int64_t kernel, int64_t stride,
                                 int64_t padding, const TileSpace& s) {
  // count_include_pad: the zeros of the padding count in the mean, as torch's default.
  const torch::Tensor x =
      windowed_input(tile, kernel, kernel, stride, padding, 1, 0.0, s, "spatial_avg_pool2d");
  const std::vector<int64_t> k = pair(kernel), st = pair(stride), zero = pair(0);
  return torch::avg_pool2d(x, at::IntArrayRef(k), at::IntArrayRef(st), at::IntArrayRef(zero));
}

}  // namespace spatial
}  // namespace tessera
