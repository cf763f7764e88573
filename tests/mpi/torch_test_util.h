// Shared by the multi-rank tests of the libtorch API: a fixture that runs tessera::init() once
// (the gtest main has initialised MPI already) and stops the engine after the last test, while
// MPI is still up (the gtest main finalises it).
#pragma once

#include <gtest/gtest.h>

#include "tessera/torch.h"

namespace tessera {
namespace testing {

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
