#include "spatial/spatial_ops.h"

#include <atomic>
#include <chrono>

#include "comm/collectives.h"
#include "common/error.h"

namespace tessera {
namespace spatial {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

std::atomic<int64_t> group_ns{0};

// The sum over `comm` on x's device, through host memory (MPI's): small per-channel sums.
torch::Tensor allreduce_copy(const torch::Tensor& x, comm::Communicator& comm) {
  const auto start = std::chrono::steady_clock::now();
  torch::Tensor y = x.to(torch::kCPU).contiguous().clone();
  TESSERA_CHECK(y.scalar_type() == torch::kFloat || y.scalar_type() == torch::kDouble,
                "group_sum takes f32 or f64 tensors, got ", y.scalar_type());
  comm::allreduce(comm, y.data_ptr(), y.data_ptr(), static_cast<size_t>(y.numel()),
                  y.scalar_type() == torch::kFloat ? DataType::kFloat32 : DataType::kFloat64);
  group_ns +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  return y.to(x.device());
}

struct GroupSum : public torch::autograd::Function<GroupSum> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, comm::Communicator* comm) {
    // The communicator belongs to the grid, which outlives the graph.
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    return allreduce_copy(x, *comm);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto* comm = reinterpret_cast<comm::Communicator*>(ctx->saved_data["comm"].toInt());
    return {allreduce_copy(grads[0], *comm), torch::Tensor()};
  }
};

}  // namespace

double group_sum_seconds() { return static_cast<double>(group_ns.load()) * 1e-9; }

torch::Tensor group_sum(const torch::Tensor& x, comm::Communicator& comm) {
  if (comm.size() == 1) return x;
  return GroupSum::apply(x, &comm);
}

torch::Tensor spatial_global_avg_pool(const torch::Tensor& tile, const TileSpace& s) {
  TESSERA_CHECK(tile.dim() == 4, "spatial_global_avg_pool takes [N, C, H, W] tiles");
  TESSERA_CHECK(s.comm != nullptr && s.comm->size() == s.ph * s.pw,
                "spatial_global_avg_pool needs the ", s.ph, "x", s.pw,
                " spatial group's communicator");
  const double pixels = static_cast<double>(tile.size(2) * s.ph * tile.size(3) * s.pw);
  return group_sum(tile.sum({2, 3}), *s.comm) / pixels;
}

namespace {

// BatchNorm over the group as one autograd function, so that it keeps what torch's own keeps
// (the input, the statistics) and runs torch's fused kernels: the forward normalises with the
// group's statistics through batch_norm's inference kernel, the backward takes its local sums
// from batch_norm's backward kernel and reduces them over the group once. Composing it from
// elementwise ops instead kept several tile-sized intermediates per layer for the backward and
// made a ResNet step on a 1x2 grid several times slower than the same image on one rank.
struct SpatialBatchNorm : public torch::autograd::Function<SpatialBatchNorm> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor weight,
                               torch::Tensor bias, torch::Tensor running_mean,
                               torch::Tensor running_var, double momentum, double eps,
                               comm::Communicator* stats) {
    const int64_t c = x.size(1);
    // Count, sum and sum of squares per channel over every tile, in one allreduce. (torch's
    // var_mean over N, H, W is about 20x slower on the CPU than these two sums.)
    const double local = static_cast<double>(x.numel() / c);
    torch::Tensor sums = torch::cat(
        {x.sum({0, 2, 3}), (x * x).sum({0, 2, 3}), torch::full({1}, local, x.options())});
    if (stats->size() > 1) sums = allreduce_copy(sums, *stats);
    const double n = sums[2 * c].item<double>();
    const torch::Tensor mean = sums.narrow(0, 0, c) / n;
    const torch::Tensor var = (sums.narrow(0, c, c) / n - mean * mean).clamp_min_(0);
    if (running_mean.numel() > 0) running_mean.mul_(1 - momentum).add_(mean * momentum);
    if (running_var.numel() > 0) {
      running_var.mul_(1 - momentum).add_(var * (n / std::max(1.0, n - 1)) * momentum);
    }
    const torch::Tensor invstd = (var + eps).rsqrt();
    const bool affine = weight.numel() > 0;
    ctx->save_for_backward({x, affine ? weight : torch::ones_like(mean), mean, invstd});
    ctx->saved_data["stats"] = reinterpret_cast<int64_t>(stats);  // the grid outlives the graph
    ctx->saved_data["n"] = n;
    ctx->saved_data["weight"] = affine;
    ctx->saved_data["bias"] = bias.numel() > 0;
    return torch::batch_norm(x, affine ? weight : torch::Tensor(),
                             bias.numel() > 0 ? bias : torch::Tensor(), mean, var,
                             /*training=*/false, 0.0, eps, false);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3];
    auto* stats = reinterpret_cast<comm::Communicator*>(ctx->saved_data["stats"].toInt());
    const double n = ctx->saved_data["n"].toDouble();
    const torch::Tensor gy = grads[0].contiguous();
    const int64_t c = x.size(1);
    // Local sums of dy and dy * (x - mean) from the fused kernel (invstd 1 gives the latter).
    const torch::Tensor ones = torch::ones_like(invstd);
    const auto local = torch::native_batch_norm_backward(gy, x, ones, {}, {}, mean, ones, true, 0.0,
                                                         {false, true, true});
    const torch::Tensor& sum_dy_xmu = std::get<1>(local);
    const torch::Tensor& sum_dy = std::get<2>(local);
    torch::Tensor global = torch::cat({sum_dy, sum_dy_xmu});
    if (stats->size() > 1) global = allreduce_copy(global, *stats);
    const torch::Tensor g_dy = global.narrow(0, 0, c) / n;
    const torch::Tensor g_xmu = global.narrow(0, c, c) / n;
    // dx = w invstd (dy - mean(dy) - (x - mean) invstd^2 mean(dy (x - mean))), the means over the
    // group: dy * k + x * m + b per channel.
    const torch::Tensor k = weight * invstd;
    const torch::Tensor m = -k * invstd * invstd * g_xmu;
    const torch::Tensor b = -k * g_dy - m * mean;
    // x * m + b through batch_norm's inference kernel (mean 0, variance 1, eps 0: a per-channel
    // affine map), about as fast as a copy; then dy * k added in place.
    const torch::Tensor zero = torch::zeros_like(m);
    torch::Tensor gx = torch::batch_norm(x, m, b, zero, ones, false, 0.0, 0.0, false);
    gx.addcmul_(gy, k.view({1, c, 1, 1}));
    // The weight's and bias's gradients are this tile's share; the engine sums the shares.
    return {gx,
            ctx->saved_data["weight"].toBool() ? sum_dy_xmu * invstd : torch::Tensor(),
            ctx->saved_data["bias"].toBool() ? sum_dy : torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor spatial_batch_norm(const torch::Tensor& tile, const torch::Tensor& weight,
                                 const torch::Tensor& bias, torch::Tensor running_mean,
                                 torch::Tensor running_var, double momentum, double eps,
                                 comm::Communicator& stats) {
  TESSERA_CHECK(tile.dim() == 4, "spatial_batch_norm takes [N, C, H, W] tiles");
  // Autograd functions take defined tensors only: an absent one comes as an empty tensor.
  auto or_empty = [&](const torch::Tensor& t) {
    return t.defined() ? t : torch::empty({0}, tile.options());
  };
  return SpatialBatchNorm::apply(tile, or_empty(weight), or_empty(bias), or_empty(running_mean),
                                 or_empty(running_var), momentum, eps, &stats);
}

torch::Tensor spatial_upsample_bilinear(const torch::Tensor& tile, int64_t factor,
                                        const TileSpace& s) {
  TESSERA_CHECK(factor >= 1, "the upsampling factor must be >= 1, got ", factor);
  TESSERA_CHECK(tile.dim() == 4 && tile.size(2) >= 1 && tile.size(3) >= 1,
                "spatial_upsample_bilinear takes [N, C, H, W] tiles");
  TESSERA_CHECK(s.comm != nullptr && s.comm->size() == s.ph * s.pw,
                "spatial_upsample_bilinear needs the ", s.ph, "x", s.pw,
                " spatial group's communicator");
  // Output row o reads input rows around (o + 0.5) / f - 0.5: one row past the tile on each
  // side, the image's edge row repeated at the border (torch clamps there). The geometry is
  // that of a 3-wide window with padding 1; the border rows replicate instead of padding zeros.
  const std::vector<AxisTile> rows =
      plan_axis(tile.size(2) * s.ph, s.ph, WindowSpec{3, 1, 1, 1}, "height");
  const std::vector<AxisTile> cols =
      plan_axis(tile.size(3) * s.pw, s.pw, WindowSpec{3, 1, 1, 1}, "width");
  const HaloPlan plan = plan_halos(s.ph, s.pw, s.h, s.w, rows, cols);
  const AxisTile& r = *plan.row;
  const AxisTile& c = *plan.col;
  torch::Tensor x = s.ph * s.pw > 1 ? halo_exchange(tile, plan, *s.comm) : tile;
  x = torch::replication_pad2d(x, {c.pad_lo, c.pad_hi, r.pad_lo, r.pad_hi});
  const std::vector<int64_t> size = {x.size(2) * factor, x.size(3) * factor};
  torch::Tensor up = torch::upsample_bilinear2d(x, at::IntArrayRef(size), false);
  // Drop the output rows of the one-row frame (f each side): the shift of one input row is a
  // shift of f output rows, so what is left is the tile's share of the whole image's output.
  return up.narrow(2, factor, tile.size(2) * factor).narrow(3, factor, tile.size(3) * factor);
}

}  // namespace spatial
}  // namespace tessera
