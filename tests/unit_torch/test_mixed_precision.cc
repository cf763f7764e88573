// --precision and the f16 step: parse, unscale, skip.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "common/error.h"
#include "train/device/mixed_precision.h"

namespace tessera {
namespace train {
namespace {

TEST(MixedPrecision, EachPrecisionsMasterAndComputeDtypes) {
  EXPECT_EQ(parse_precision("f32").compute, torch::kFloat);
  EXPECT_EQ(parse_precision("f64").master, torch::kDouble);
  const Precision bf = parse_precision("bf16"), h = parse_precision("f16");
  EXPECT_EQ(bf.master, torch::kFloat);
  EXPECT_EQ(bf.compute, torch::kBFloat16);
  EXPECT_FALSE(bf.loss_scaled);
  EXPECT_EQ(h.master, torch::kFloat);
  EXPECT_EQ(h.compute, torch::kHalf);
  EXPECT_TRUE(h.loss_scaled);
  try {
    parse_precision("fp16");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("accepted: f32, f64, bf16, f16"), std::string::npos);
  }
}

std::vector<torch::Tensor> params_with_grads(float g0, float g1) {
  torch::Tensor a = torch::zeros({3}, torch::requires_grad()),
                b = torch::zeros({2}, torch::requires_grad());
  a.mutable_grad() = torch::full({3}, g0);
  b.mutable_grad() = torch::full({2}, g1);
  return {a, b, torch::zeros({1}, torch::requires_grad())};  // the last has no gradient
}

TEST(MixedPrecision, FiniteGradientsAreDividedByTheScale) {
  LossScaler s({1024, 2, 0.5, 100, 3});
  auto p = params_with_grads(2048, -512);
  EXPECT_TRUE(unscale_or_skip(p, s));
  EXPECT_TRUE(torch::equal(p[0].grad(), torch::full({3}, 2.0f)));
  EXPECT_TRUE(torch::equal(p[1].grad(), torch::full({2}, -0.5f)));
  EXPECT_EQ(s.scale(), 1024);
}

TEST(MixedPrecision, AnInfOrANanSkipsTheStepZeroesTheGradientsAndBacksOff) {
  for (float bad :
       {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    LossScaler s({1024, 2, 0.5, 100, 3});
    auto p = params_with_grads(1, bad);
    EXPECT_FALSE(unscale_or_skip(p, s));
    EXPECT_TRUE(torch::equal(p[0].grad(), torch::zeros({3})));
    EXPECT_TRUE(torch::equal(p[1].grad(), torch::zeros({2})));
    EXPECT_EQ(s.scale(), 512);
  }
}

TEST(MixedPrecision, OverflowEveryStepStopsNamingTheScale) {
  LossScaler s({1024, 2, 0.5, 100, 3});
  auto p = params_with_grads(1, std::numeric_limits<float>::infinity());
  EXPECT_FALSE(unscale_or_skip(p, s));
  p = params_with_grads(1, std::numeric_limits<float>::infinity());
  EXPECT_FALSE(unscale_or_skip(p, s));
  p = params_with_grads(1, std::numeric_limits<float>::infinity());
  try {
    unscale_or_skip(p, s);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("loss scale 256"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace train
}  // namespace tessera
