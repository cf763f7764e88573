#include "spatial/halo_exchange.h"

#include <atomic>
#include <chrono>
#include <limits>

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
// `land(region, received)` for each. `backward` swaps the roles of the two rectangles.
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
      keep.push_back(region(from, out).contiguous());
      sends.push_back({r.peer, tag_base + r.send_tag, keep.back().data_ptr(),
                       static_cast<size_t>(keep.back().nbytes())});
    }
    if (!in.empty()) {
      got[k] = torch::empty({n, c, in.rows(), in.cols()}, from.options());
      recvs.push_back(
          {r.peer, tag_base + r.recv_tag, got[k].data_ptr(), static_cast<size_t>(got[k].nbytes())});
    }
  }
  comm::exchange(comm, sends, recvs);
  for (size_t k = 0; k < plan.regions.size(); ++k) {
    if (got[k].defined()) land(plan.regions[k], got[k]);
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

struct HaloExchange : public torch::autograd::Function<HaloExchange> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor tile, const HaloPlan* plan,
                               comm::Communicator* comm) {
    ctx->saved_data["plan"] = encode(*plan);
    // The spatial communicator outlives the model's graph (it belongs to the grid).
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    torch::Tensor x = tile.contiguous();
    torch::Tensor ext =
        torch::zeros({x.size(0), x.size(1), plan->ext_rows, plan->ext_cols}, x.options());
    region(ext, plan->own).copy_(x);
    move(
        *plan, *comm, x,
        [&](const HaloRegion& r, const torch::Tensor& t) { region(ext, r.recv).copy_(t); }, false);
    return ext;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const HaloPlan plan = decode(ctx->saved_data["plan"].toIntVector());
    auto* comm = reinterpret_cast<comm::Communicator*>(ctx->saved_data["comm"].toInt());
    torch::Tensor g = grads[0].contiguous();
    torch::Tensor gx = region(g, plan.own).clone();
    // The halos' gradients go back to their owners, who add them where they were sent from.
    move(
        plan, *comm, g,
        [&](const HaloRegion& r, const torch::Tensor& t) { region(gx, r.send).add_(t); }, true);
    return {gx, torch::Tensor(), torch::Tensor()};
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

// The tile framed by the halos a window of `kernel` x `kernel` needs, trimmed to what it reads
// and padded at the image border with `fill`: ready for the layer with padding 0.
torch::Tensor windowed_input(const torch::Tensor& tile, int64_t kh, int64_t kw, int64_t stride,
                             int64_t padding, int64_t dilation, double fill, const TileSpace& s,
                             const char* layer) {
  TESSERA_CHECK(s.comm != nullptr && s.comm->size() == s.ph * s.pw, layer, " needs the ", s.ph, "x",
                s.pw, " spatial group's communicator");
  TESSERA_CHECK(tile.dim() == 4, layer, " takes [N, C, H, W] tiles, got ", tile.sizes());
  const int64_t height = tile.size(2) * s.ph, width = tile.size(3) * s.pw;
  const std::vector<AxisTile> rows =
      plan_axis(height, s.ph, WindowSpec{kh, stride, dilation, padding}, "height");
  const std::vector<AxisTile> cols =
      plan_axis(width, s.pw, WindowSpec{kw, stride, dilation, padding}, "width");
  const HaloPlan plan = plan_halos(s.ph, s.pw, s.h, s.w, rows, cols);
  const AxisTile& r = *plan.row;
  const AxisTile& c = *plan.col;
  torch::Tensor x = s.ph * s.pw > 1 ? halo_exchange(tile, plan, *s.comm) : tile;
  x = x.narrow(2, r.skip_lo, x.size(2) - r.skip_lo - r.skip_hi)
          .narrow(3, c.skip_lo, x.size(3) - c.skip_lo - c.skip_hi);
  if (r.pad_lo + r.pad_hi + c.pad_lo + c.pad_hi > 0) {
    x = torch::constant_pad_nd(x, {c.pad_lo, c.pad_hi, r.pad_lo, r.pad_hi}, fill);
  }
  return x;
}

std::vector<int64_t> pair(int64_t v) { return {v, v}; }

}  // namespace

torch::Tensor spatial_conv2d(const torch::Tensor& tile, const torch::Tensor& weight,
                             const torch::Tensor& bias, int64_t stride, int64_t padding,
                             int64_t dilation, const TileSpace& s) {
  TESSERA_CHECK(weight.dim() == 4, "spatial_conv2d takes [C', C, kh, kw] weights");
  const torch::Tensor x = windowed_input(tile, weight.size(2), weight.size(3), stride, padding,
                                         dilation, 0.0, s, "spatial_conv2d");
  const std::vector<int64_t> st = pair(stride), zero = pair(0), dil = pair(dilation);
  return torch::conv2d(x, weight, bias, at::IntArrayRef(st), at::IntArrayRef(zero),
                       at::IntArrayRef(dil));
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
