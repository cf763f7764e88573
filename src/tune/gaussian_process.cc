#include "tune/gaussian_process.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace tessera {
namespace tune {

GaussianProcess::GaussianProcess(double length_scale, double noise)
    : length_scale_(length_scale), noise_(noise) {
  TESSERA_CHECK(length_scale > 0 && noise >= 0,
                "a Gaussian process needs a length scale > 0 and noise >= 0");
}

double GaussianProcess::kernel(const std::vector<double>& a, const std::vector<double>& b) const {
  double d2 = 0;
  for (size_t i = 0; i < a.size(); ++i) d2 += (a[i] - b[i]) * (a[i] - b[i]);
  const double r = std::sqrt(5.0 * d2) / length_scale_;
  return (1 + r + r * r / 3) * std::exp(-r);
}

void GaussianProcess::fit(const std::vector<std::vector<double>>& xs,
                          const std::vector<double>& ys) {
  TESSERA_CHECK(!xs.empty() && xs.size() == ys.size(), "GaussianProcess::fit: ", xs.size(),
                " points but ", ys.size(), " observations");
  for (const auto& x : xs) {
    TESSERA_CHECK(x.size() == xs[0].size(), "GaussianProcess::fit: points of dimension ",
                  xs[0].size(), " and ", x.size());
  }
  const size_t n = xs.size();
  xs_ = xs;
  y_mean_ = 0;
  for (double y : ys) y_mean_ += y;
  y_mean_ /= static_cast<double>(n);
  double var = 0;
  for (double y : ys) var += (y - y_mean_) * (y - y_mean_);
  y_scale_ = n > 1 && var > 0 ? std::sqrt(var / static_cast<double>(n)) : 1.0;
  // K + noise I; a little jitter keeps it positive definite when two points coincide.
  chol_.assign(n, std::vector<double>(n, 0.0));
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j <= i; ++j) {
      double s = kernel(xs[i], xs[j]) + (i == j ? noise_ + 1e-9 : 0.0);
      for (size_t k = 0; k < j; ++k) s -= chol_[i][k] * chol_[j][k];
      if (i == j) {
        chol_[i][i] = std::sqrt(std::max(s, 1e-12));
      } else {
        chol_[i][j] = s / chol_[j][j];
      }
    }
  }
  // alpha = (L L^T)^-1 y'.
  std::vector<double> z(n);
  for (size_t i = 0; i < n; ++i) {
    double s = (ys[i] - y_mean_) / y_scale_;
    for (size_t k = 0; k < i; ++k) s -= chol_[i][k] * z[k];
    z[i] = s / chol_[i][i];
  }
  alpha_.assign(n, 0.0);
  for (size_t ii = n; ii-- > 0;) {
    double s = z[ii];
    for (size_t k = ii + 1; k < n; ++k) s -= chol_[k][ii] * alpha_[k];
    alpha_[ii] = s / chol_[ii][ii];
  }
}

GpPrediction GaussianProcess::predict(const std::vector<double>& x) const {
  TESSERA_CHECK(!xs_.empty(), "GaussianProcess::predict before fit");
  const size_t n = xs_.size();
  std::vector<double> k(n);
  double mean = 0;
  for (size_t i = 0; i < n; ++i) {
    k[i] = kernel(x, xs_[i]);
    mean += k[i] * alpha_[i];
  }
  // var = k(x,x) - v.v with L v = k.
  std::vector<double> v(n);
  double vv = 0;
  for (size_t i = 0; i < n; ++i) {
    double s = k[i];
    for (size_t j = 0; j < i; ++j) s -= chol_[i][j] * v[j];
    v[i] = s / chol_[i][i];
    vv += v[i] * v[i];
  }
  const double var = std::max(0.0, 1.0 - vv);
  return {y_mean_ + y_scale_ * mean, y_scale_ * std::sqrt(var)};
}

double expected_improvement(double mean, double sd, double best, double xi) {
  const double gain = mean - best - xi;
  if (sd <= 0) return std::max(0.0, gain);
  const double z = gain / sd;
  const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI);
  const double cdf = 0.5 * std::erfc(-z / std::sqrt(2.0));
  return gain * cdf + sd * pdf;
}

}  // namespace tune
}  // namespace tessera
