// Shared by the multi-rank trainer tests: a training run that must fail on this rank with an
// InvalidArgument whose message holds `fragment`.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/error.h"
#include "train/trainer.h"

namespace tessera {
namespace testing {

// Where the equivalence tests train: the CPU, or TESSERA_TEST_TRAIN_DEVICE (scripts/gpu_check.sh
// sets cuda, so the same comparisons run on the GPU, against a reference on the GPU).
inline std::string train_test_device() {
  const char* d = std::getenv("TESSERA_TEST_TRAIN_DEVICE");
  return d != nullptr && *d != '\0' ? d : "cpu";
}

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
