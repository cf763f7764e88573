// The device backend selector, over every case of where the ranks' GPUs are and what the build
// has: auto picks NCCL only where each rank has its own GPU, explicit requests that cannot run
// say why and what can.
#include <gtest/gtest.h>

#include "comm/device_selector.h"
#include "common/error.h"

namespace tessera {
namespace comm {
namespace {

// `gpus[r]` is rank r's GPU id, `nodes[r]` its node.
DeviceTopology topo(std::vector<int> nodes, std::vector<std::string> gpus, bool cuda = true,
                    bool nccl = true, bool ipc = true) {
  DeviceTopology t;
  for (size_t r = 0; r < nodes.size(); ++r) t.ranks.push_back({nodes[r], gpus[r]});
  t.cuda_devices = cuda;
  t.nccl_built = nccl;
  t.ipc_possible = ipc;
  return t;
}

std::string error_of(const DeviceTopology& t, DeviceBackend b) {
  try {
    choose_device_backend(t, b);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceSelector, AutoPrefersNcclWhereEveryRankHasItsOwnGpu) {
  EXPECT_EQ(choose_device_backend(topo({0}, {"a"}), DeviceBackend::kAuto), DeviceBackend::kNccl);
  EXPECT_EQ(choose_device_backend(topo({0, 0, 1, 1}, {"a", "b", "a", "b"}), DeviceBackend::kAuto),
            DeviceBackend::kNccl);  // the same bus id on two nodes is two GPUs
}

TEST(DeviceSelector, AutoAvoidsNcclWhenRanksShareAGpu) {
  EXPECT_EQ(choose_device_backend(topo({0, 0}, {"a", "a"}), DeviceBackend::kAuto),
            DeviceBackend::kIpc);
  EXPECT_EQ(choose_device_backend(topo({0, 0, 1, 1}, {"a", "a", "b", "c"}), DeviceBackend::kAuto),
            DeviceBackend::kHierarchical);
  EXPECT_EQ(
      choose_device_backend(topo({0, 0}, {"a", "a"}, true, true, false), DeviceBackend::kAuto),
      DeviceBackend::kStaged);
}

// The hierarchical allreduce pairs ranks across nodes by local rank: nodes of different sizes
// stage instead, and hierarchical asked for says why.
TEST(DeviceSelector, UnevenNodesStageAndRefuseHierarchical) {
  const DeviceTopology uneven = topo({0, 0, 1}, {"a", "a", "b"});
  EXPECT_EQ(choose_device_backend(uneven, DeviceBackend::kAuto), DeviceBackend::kStaged);
  const std::string e = error_of(uneven, DeviceBackend::kHierarchical);
  EXPECT_NE(e.find("same number of ranks on every node"), std::string::npos) << e;
  EXPECT_NE(e.find("Backends that can: staged"), std::string::npos) << e;
}

TEST(DeviceSelector, WithoutNcclOrIpcAutoStages) {
  EXPECT_EQ(
      choose_device_backend(topo({0, 0}, {"a", "b"}, true, false, false), DeviceBackend::kAuto),
      DeviceBackend::kStaged);
  EXPECT_EQ(choose_device_backend(topo({0, 0}, {"fake:0", "fake:0"}, false, true, false),
                                  DeviceBackend::kAuto),
            DeviceBackend::kStaged);
  EXPECT_EQ(
      choose_device_backend(topo({0, 1}, {"a", "b"}, true, false, true), DeviceBackend::kAuto),
      DeviceBackend::kHierarchical);
}

TEST(DeviceSelector, NcclForcedOnASharedGpuNamesTheRanks) {
  const std::string e = error_of(topo({0, 0, 0}, {"g0", "g1", "g0"}), DeviceBackend::kNccl);
  EXPECT_NE(e.find("NCCL refuses two ranks on one GPU: ranks 0 and 2 share GPU g0 on node 0"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("Backends that can: staged, ipc, hierarchical"), std::string::npos) << e;
  const std::string f =
      error_of(topo({0, 0}, {"a", "b"}, false, true, false), DeviceBackend::kNccl);
  EXPECT_NE(f.find("NCCL needs CUDA devices"), std::string::npos) << f;
  const std::string g =
      error_of(topo({0, 0}, {"a", "b"}, true, false, false), DeviceBackend::kNccl);
  EXPECT_NE(g.find("this build has no NCCL"), std::string::npos) << g;
}

TEST(DeviceSelector, IpcNeedsOneNode) {
  const std::string e = error_of(topo({0, 1}, {"a", "a"}), DeviceBackend::kIpc);
  EXPECT_NE(e.find("within one node"), std::string::npos) << e;
  EXPECT_EQ(choose_device_backend(topo({0, 1}, {"a", "a"}), DeviceBackend::kStaged),
            DeviceBackend::kStaged);
}

TEST(DeviceSelector, DescribesEveryGroupOfSharingRanks) {
  EXPECT_EQ(describe_shared_gpus(topo({0, 0, 0, 0, 0}, {"x", "y", "x", "y", "x"})),
            "ranks 0, 2 and 4 share GPU x on node 0; ranks 1 and 3 share GPU y on node 0");
  EXPECT_EQ(describe_shared_gpus(topo({0, 1}, {"x", "x"})), "");
}

TEST(DeviceSelector, ParsesItsNames) {
  for (auto b : {DeviceBackend::kAuto, DeviceBackend::kNccl, DeviceBackend::kIpc,
                 DeviceBackend::kStaged, DeviceBackend::kHierarchical}) {
    EXPECT_EQ(parse_device_backend(device_backend_name(b)), b);
  }
  EXPECT_THROW(parse_device_backend("gloo"), InvalidArgument);
}

}  // namespace
}  // namespace comm
}  // namespace tessera
