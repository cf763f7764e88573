// A Gaussian process over [0,1]^d and expected improvement: the Bayesian half of the autotuner
// (Horovod's autotune does the same over fusion threshold and cycle time). Pure and small: the
// tuner observes tens of points, so an exact Cholesky solve per fit is all it needs.
#pragma once

#include <cstddef>
#include <vector>

namespace tessera {
namespace tune {

struct GpPrediction {
  double mean = 0;
  double sd = 0;
};

class GaussianProcess {
 public:
  // Matern-5/2 kernel with one length scale on inputs scaled to [0,1]; `noise` is the variance
  // of the observation noise relative to the signal's (the targets are standardised at fit).
  explicit GaussianProcess(double length_scale = 0.25, double noise = 0.05);

  // xs: n points of dimension d (every point the same d, n >= 1); ys: n observations.
  // Throws InvalidArgument when the sizes disagree.
  void fit(const std::vector<std::vector<double>>& xs, const std::vector<double>& ys);
  // Posterior of the (noise-free) function at x, in the units of ys.
  GpPrediction predict(const std::vector<double>& x) const;

  double kernel(const std::vector<double>& a, const std::vector<double>& b) const;

 private:
  double length_scale_, noise_;
  std::vector<std::vector<double>> xs_;
  std::vector<double> alpha_;              // K^-1 (y - mean) / scale, standardised
  std::vector<std::vector<double>> chol_;  // lower Cholesky factor of K + noise I
  double y_mean_ = 0, y_scale_ = 1;
};

// Expected improvement over `best` of a normal belief (mean, sd) when larger is better, with an
// exploration margin xi: E[max(0, f - best - xi)].
double expected_improvement(double mean, double sd, double best, double xi = 0.0);

}  // namespace tune
}  // namespace tessera
