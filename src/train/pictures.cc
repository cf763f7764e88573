#include "train/pictures.h"

#include "common/error.h"
#include "common/svg_plot.h"
#include "data/image_codec.h"

namespace tessera {
namespace train {
namespace {

constexpr int64_t kGap = 2;

// [3, S, S] any float -> [S, S, 3] u8 over its own range.
torch::Tensor stretched(const torch::Tensor& image) {
  const torch::Tensor x = image.to(torch::kFloat64);
  const double lo = x.min().item<double>(), hi = x.max().item<double>();
  const torch::Tensor unit = hi > lo ? (x - lo) / (hi - lo) : torch::zeros_like(x);
  return (unit * 255).round().to(torch::kUInt8).permute({1, 2, 0});
}

// [S, S] labels -> [S, S, 3] u8 in the VOC colours; 255 (ignored) white.
torch::Tensor coloured(const torch::Tensor& mask) {
  static const torch::Tensor lut = [] {
    torch::Tensor t = torch::empty({256, 3}, torch::kUInt8);
    for (int i = 0; i < 256; ++i) {
      const auto c = i == 255 ? std::array<uint8_t, 3>{255, 255, 255} : data::voc_color(i);
      for (int ch = 0; ch < 3; ++ch) t[i][ch] = c[static_cast<size_t>(ch)];
    }
    return t;
  }();
  return lut.index_select(0, mask.reshape({-1}).to(torch::kLong).clamp(0, 255))
      .reshape({mask.size(0), mask.size(1), 3});
}

}  // namespace

torch::Tensor prediction_grid(const torch::Tensor& images, const torch::Tensor& truth,
                              const torch::Tensor& predicted, int64_t zoom) {
  TESSERA_CHECK(images.dim() == 4 && images.size(1) == 3 && truth.dim() == 3 &&
                    truth.sizes() == predicted.sizes() && images.size(0) == truth.size(0) &&
                    images.size(2) == truth.size(1) && images.size(3) == truth.size(2),
                "prediction_grid needs images [N, 3, H, W] and masks [N, H, W], got ",
                images.sizes(), ", ", truth.sizes(), " and ", predicted.sizes());
  TESSERA_CHECK(zoom >= 1, "prediction_grid: zoom must be >= 1, got ", zoom);
  const int64_t n = images.size(0), h = images.size(2) * zoom, w = images.size(3) * zoom;
  torch::Tensor grid =
      torch::full({n * (h + kGap) - kGap, 3 * (w + kGap) - kGap, 3}, 255, torch::kUInt8);
  for (int64_t i = 0; i < n; ++i) {
    const torch::Tensor row[3] = {stretched(images[i].cpu()), coloured(truth[i].cpu()),
                                  coloured(predicted[i].cpu())};
    for (int64_t j = 0; j < 3; ++j) {
      const torch::Tensor big = row[j].repeat_interleave(zoom, 0).repeat_interleave(zoom, 1);
      grid.narrow(0, i * (h + kGap), h).narrow(1, j * (w + kGap), w).copy_(big);
    }
  }
  return grid;
}

std::string training_curve_svg(const std::vector<std::pair<double, double>>& loss,
                               const std::vector<std::pair<double, double>>& metric,
                               const std::string& metric_name) {
  Plot l;
  l.title = "training loss (mean over ranks of each logged interval)";
  l.x.label = "step";
  l.y.label = "loss";
  l.y.lo = 0;
  l.series = {{"loss", loss}};
  Plot m;
  m.title = "validation " + metric_name;
  m.x.label = "step";
  m.y.label = metric_name;
  m.y.lo = 0;
  m.y.hi = 1;
  m.y.step = 0.1;
  m.series = {{metric_name, metric}};
  // The same steps on both x axes, so that the panels line up.
  if (!loss.empty()) {
    l.x.lo = m.x.lo = 0;
    l.x.hi = m.x.hi = loss.back().first;
  }
  return plots_svg({l, m});
}

}  // namespace train
}  // namespace tessera
