#include "spatial/spatial_ops.h"

#include <atomic>
#include <chrono>

#include "comm/collectives.h"
#include "common/error.h"
#include "torch/batch_norm_math.h"

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

// BatchNorm over the group as one autograd function, by the math of torch/batch_norm_math.h
// (the tiles are its parts): it keeps what torch's own keeps (the input, the statistics) and
// runs torch's fused kernels. The sums stay in the tile's dtype (their f64 copy would be a
// tile-sized f64 temporary per layer, which the memory budget of a tile does not allow).
struct SpatialBatchNorm : public torch::autograd::Function<SpatialBatchNorm> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor weight,
                               torch::Tensor bias, torch::Tensor running_mean,
                               torch::Tensor running_var, double momentum, double eps,
                               comm::Communicator* stats) {
    torch::Tensor sums = batch_norm::local_sums(x, x.scalar_type());
    if (stats->size() > 1) sums = allreduce_copy(sums, *stats);
    const batch_norm::Stats s = batch_norm::stats_of(sums, eps, "spatial BatchNorm");
    batch_norm::update_running(running_mean, running_var, s, momentum);
    ctx->save_for_backward({x, weight, s.mean, s.invstd});
    ctx->saved_data["stats"] = reinterpret_cast<int64_t>(stats);  // the grid outlives the graph
    ctx->saved_data["count"] = s.count;
    ctx->saved_data["bias"] = bias.numel() > 0;
    return batch_norm::normalize(x, weight, bias, s, eps);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3];
    auto* stats = reinterpret_cast<comm::Communicator*>(ctx->saved_data["stats"].toInt());
    const int64_t c = x.size(1);
    const torch::Tensor local = batch_norm::local_grad_sums(grads[0], x, mean);
    const torch::Tensor global = stats->size() > 1 ? allreduce_copy(local, *stats) : local;
    const torch::Tensor gx = batch_norm::input_grad(grads[0], x, weight, mean, invstd, global,
                                                    ctx->saved_data["count"].toDouble());
    // The weight's and bias's gradients are this tile's share; the engine sums the shares.
    return {gx,
            weight.numel() > 0 ? local.narrow(0, c, c) * invstd : torch::Tensor(),
            ctx->saved_data["bias"].toBool() ? local.narrow(0, 0, c).clone() : torch::Tensor(),
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
