// --device: every spec against every (local rank, visible GPUs, build) it can meet.
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "train/device/device_choice.h"

namespace tessera {
namespace train {
namespace {

DeviceFacts gpus(int n) { return {"", n, n == 0 ? "no CUDA-capable device is detected" : ""}; }
const DeviceFacts kCpuBuild{"tessera was built without CUDA (configure with TESSERA_CUDA=ON)", 0,
                            "built without CUDA"};

std::string error_of(const std::string& spec, int local_rank, const DeviceFacts& facts) {
  try {
    choose_device(spec, local_rank, facts);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceChoice, CpuIsAlwaysTheHost) {
  for (const DeviceFacts& f : {kCpuBuild, gpus(0), gpus(8)}) {
    for (int lr = 0; lr < 5; ++lr) EXPECT_EQ(choose_device("cpu", lr, f).name(), "cpu");
  }
}

TEST(DeviceChoice, CudaPlacesLocalRanksRoundRobinOverTheVisibleGpus) {
  for (int n = 1; n <= 8; ++n) {
    for (int lr = 0; lr < 3 * n; ++lr) {
      const DeviceChoice c = choose_device("cuda", lr, gpus(n));
      EXPECT_TRUE(c.cuda);
      EXPECT_EQ(c.index, lr % n) << n << " GPUs, local rank " << lr;
      EXPECT_EQ(choose_device("auto", lr, gpus(n)).index, lr % n);
    }
  }
}

TEST(DeviceChoice, AnExplicitListIsIndexedByLocalRank) {
  EXPECT_EQ(choose_device("cuda:3", 0, gpus(4)).name(), "cuda:3");
  EXPECT_EQ(choose_device("cuda:3", 5, gpus(4)).name(), "cuda:3");
  const int expect[] = {2, 0, 3, 2, 0, 3};
  for (int lr = 0; lr < 6; ++lr)
    EXPECT_EQ(choose_device("cuda:2,0,3", lr, gpus(4)).index, expect[lr]);
}

TEST(DeviceChoice, AutoFallsBackToTheCpuWithoutABuildOrAGpu) {
  EXPECT_FALSE(choose_device("auto", 0, kCpuBuild).cuda);
  EXPECT_FALSE(choose_device("auto", 3, gpus(0)).cuda);
}

TEST(DeviceChoice, CudaWithoutACudaBuildSaysSo) {
  for (const std::string spec : {"cuda", "cuda:0"}) {
    const std::string e = error_of(spec, 0, kCpuBuild);
    EXPECT_NE(e.find("needs a CUDA build, and tessera was built without"), std::string::npos) << e;
    EXPECT_NE(e.find("TESSERA_CUDA=ON"), std::string::npos) << e;
    EXPECT_NE(e.find("--device cpu"), std::string::npos) << e;
  }
}

TEST(DeviceChoice, CudaWithoutAGpuGivesTheDriversReason) {
  const std::string e = error_of("cuda", 1, gpus(0));
  EXPECT_NE(e.find("sees none"), std::string::npos) << e;
  EXPECT_NE(e.find("no CUDA-capable device is detected"), std::string::npos) << e;
}

TEST(DeviceChoice, BadSpecsAndIndicesNameWhatIsAccepted) {
  for (const std::string spec : {"gpu", "CUDA", "cuda0", "tpu:0", ""}) {
    EXPECT_NE(error_of(spec, 0, gpus(2)).find("accepted: cpu, cuda"), std::string::npos) << spec;
  }
  for (const std::string spec : {"cuda:", "cuda:x", "cuda:1,", "cuda:,1", "cuda:-1", "cuda:1.5"}) {
    EXPECT_NE(error_of(spec, 0, gpus(2)).find("is not a GPU index"), std::string::npos) << spec;
  }
  const std::string e = error_of("cuda:0,2", 0, gpus(2));
  EXPECT_NE(e.find("GPU 2 does not exist here (2 visible: 0 to 1)"), std::string::npos) << e;
  EXPECT_THROW(choose_device("cpu", -1, gpus(1)), InvalidArgument);
}

}  // namespace
}  // namespace train
}  // namespace tessera
