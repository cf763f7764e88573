// Shared by the multi-rank trainer tests: a training run that must fail on this rank with an
// InvalidArgument whose message holds `fragment`.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "train/trainer.h"

namespace tessera {
namespace testing {

inline void expect_training_error(const train::TrainOptions& o, const std::string& fragment) {
  try {
    train::run_training(o);
    ADD_FAILURE() << "expected an error containing '" << fragment << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

}  // namespace testing
}  // namespace tessera
