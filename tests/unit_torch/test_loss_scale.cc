// Dynamic loss scaling: the scale's path in closed form, and the stop after max_skips.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/error.h"
#include "train/device/loss_scale.h"

namespace tessera {
namespace train {
namespace {

TEST(LossScale, GrowsAfterEachIntervalOfGoodStepsAndHalvesOnOverflow) {
  LossScaler s({1024, 2, 0.5, 3, 0});
  // 3 good steps: x2; 2 good + 1 overflow: the good run restarts, x0.5.
  const bool overflow[] = {false, false, false, false, false, true, false, false, false};
  const double scale_after[] = {1024, 1024, 2048, 2048, 2048, 1024, 1024, 1024, 2048};
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(s.update(overflow[i]), !overflow[i]) << i;
    EXPECT_EQ(s.scale(), scale_after[i]) << i;
  }
  EXPECT_EQ(s.skipped_total(), 1);
}

TEST(LossScale, TheDefaultsAreGradScalers) {
  LossScaler s;
  EXPECT_EQ(s.scale(), 65536.0);
  for (int i = 0; i < 1999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 65536.0);
  s.update(false);
  EXPECT_EQ(s.scale(), 131072.0);
}

TEST(LossScale, OverflowEveryStepStopsAtMaxSkipsNamingTheScale) {
  LossScaler s({65536, 2, 0.5, 2000, 5});
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 65536.0 / 16);
  try {
    s.update(true);
    FAIL() << "a fifth skip in a row was accepted";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("5 steps in a row"), std::string::npos) << m;
    EXPECT_NE(m.find("loss scale 4096"), std::string::npos) << m;
    EXPECT_NE(m.find("--precision bf16"), std::string::npos) << m;
  }
}

TEST(LossScale, AGoodStepResetsTheCountOfSkipsInARow) {
  LossScaler s({65536, 2, 0.5, 2000, 3});
  for (int round = 0; round < 10; ++round) {
    EXPECT_FALSE(s.update(true));
    EXPECT_FALSE(s.update(true));
    EXPECT_TRUE(s.update(false));  // never three in a row: never stops
  }
  EXPECT_EQ(s.skipped_total(), 20);
  EXPECT_EQ(s.skipped_in_a_row(), 0);
  EXPECT_EQ(s.scale(), 65536.0 * std::pow(0.25, 10));
}

TEST(LossScale, BadOptionsAreRefusedNamingThem) {
  EXPECT_THROW(LossScaler({0, 2, 0.5, 10, 5}), InvalidArgument);
  EXPECT_THROW(LossScaler({1, 0.5, 0.5, 10, 5}), InvalidArgument);
  EXPECT_THROW(LossScaler({1, 2, 1.0, 10, 5}), InvalidArgument);
  EXPECT_THROW(LossScaler({1, 2, 0.5, 0, 5}), InvalidArgument);
  EXPECT_THROW(LossScaler({1, 2, 0.5, 10, -1}), InvalidArgument);
}

}  // namespace
}  // namespace train
}  // namespace tessera
