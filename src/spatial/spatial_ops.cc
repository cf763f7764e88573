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

torch::Tensor allreduce_copy(const torch::Tensor& x, comm::Communicator& comm) {
  const auto start = std::chrono::steady_clock::now();
  torch::Tensor y = x.contiguous().clone();
  TESSERA_CHECK(y.scalar_type() == torch::kFloat || y.scalar_type() == torch::kDouble,
                "group_sum takes f32 or f64 tensors, got ", y.scalar_type());
  comm::allreduce(comm, y.data_ptr(), y.data_ptr(), static_cast<size_t>(y.numel()),
                  y.scalar_type() == torch::kFloat ? DataType::kFloat32 : DataType::kFloat64);
  group_ns +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  return y;
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

torch::Tensor spatial_batch_norm(const torch::Tensor& tile, const torch::Tensor& weight,
                                 const torch::Tensor& bias, torch::Tensor running_mean,
                                 torch::Tensor running_var, double momentum, double eps,
                                 comm::Communicator& stats) {
  TESSERA_CHECK(tile.dim() == 4, "spatial_batch_norm takes [N, C, H, W] tiles");
  const int64_t c = tile.size(1);
  // Count, sum and sum of squares per channel over every tile, in one sum over the group.
  const double local = static_cast<double>(tile.numel() / c);
  const torch::Tensor sums =
      group_sum(torch::cat({tile.sum({0, 2, 3}), (tile * tile).sum({0, 2, 3}),
                            torch::full({1}, local, tile.options())}),
                stats);
  const torch::Tensor count = sums[2 * c];
  const torch::Tensor mean = sums.narrow(0, 0, c) / count;
  // E[x^2] - E[x]^2 in the tile's precision; f64 keeps it exact enough for the comparisons.
  const torch::Tensor var = sums.narrow(0, c, c) / count - mean * mean;
  {
    torch::NoGradGuard no_grad;
    const double n = count.item<double>();
    if (running_mean.defined()) running_mean.mul_(1 - momentum).add_(mean.detach() * momentum);
    if (running_var.defined()) {
      running_var.mul_(1 - momentum).add_(var.detach() * (n / std::max(1.0, n - 1)) * momentum);
    }
  }
  torch::Tensor y = (tile - mean.view({1, c, 1, 1})) / torch::sqrt(var.view({1, c, 1, 1}) + eps);
  if (weight.defined()) y = y * weight.view({1, c, 1, 1});
  if (bias.defined()) y = y + bias.view({1, c, 1, 1});
  return y;
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
