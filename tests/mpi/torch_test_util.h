// Shared by the multi-rank tests of the libtorch API: a fixture that runs tessera::init() once
// (the gtest main has initialised MPI already) and stops the engine after the last test, while
// MPI is still up (the gtest main finalises it).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "tessera/torch.h"

namespace tessera {
namespace testing {

// Whether this rank's tensors hold the same bits as rank 0's (rank 0's are broadcast under
// `name`, flattened into one tensor). Collective.
inline bool same_on_every_rank(const std::vector<torch::Tensor>& tensors, const std::string& name) {
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& t : tensors) flat.push_back(t.detach().reshape({-1}));
  const torch::Tensor mine = torch::cat(flat);
  return torch::equal(broadcast(mine, 0, name), mine);
}

// max |a - b| / max |b| (b's scale, at least 1e-30): one number per comparison, so a test can
// keep the largest it saw and print it beside the tolerance it was checked against.
inline double relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor x = a.detach().to(torch::kDouble), y = b.detach().to(torch::kDouble);
  const double scale = std::max(1e-30, y.abs().max().item<double>());
  return (x - y).abs().max().item<double>() / scale;
}

// Tracks the largest relative difference of a test's comparisons against one tolerance, fails
// each comparison above it, and prints the largest at the end ("[ tolerance ] ..."): the
// figure each tolerance was set from (docs/training.md keeps them).
class Tolerance {
 public:
  Tolerance(std::string what, double bound) : what_(std::move(what)), bound_(bound) {}
  ~Tolerance() {
    std::printf("[ tolerance ] %s: largest relative difference %.3g, tolerance %.3g\n",
                what_.c_str(), worst_, bound_);
  }
  // Whether a and b are within the tolerance; records the difference.
  bool operator()(const torch::Tensor& a, const torch::Tensor& b) {
    const double d = relative_difference(a, b);
    worst_ = std::max(worst_, d);
    return d <= bound_;
  }

 private:
  std::string what_;
  double bound_;
  double worst_ = 0;
};

class TorchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    init();
    static const auto* const shutdown_at_end =
        ::testing::AddGlobalTestEnvironment(new ShutdownAtEnd);
    (void)shutdown_at_end;
  }
  static int r() { return rank(); }
  static int n() { return size(); }

 private:
  class ShutdownAtEnd : public ::testing::Environment {
   public:
    void TearDown() override { shutdown(); }
  };
};

}  // namespace testing
}  // namespace tessera
