// Which backend carries a collective on device buffers: a pure function of where the ranks'
// GPUs are and what this build has, so every rank chooses the same and tests cover every case.
//
//   nccl          every rank of the communicator on its own GPU (NCCL refuses two ranks on one
//                 GPU: "Duplicate GPU detected")
//   ipc           one node: kernels read the peers' buffers through CUDA IPC handles (the
//                 fake device: POSIX shared memory); several ranks may share one GPU
//   staged        device -> pinned host copies overlapped with tessera's host algorithms: works
//                 everywhere (MPI never sees a device pointer)
//   hierarchical  ipc within each node, staged across nodes (the same number of ranks on each)
#pragma once

#include <string>
#include <vector>

namespace tessera {
namespace comm {

enum class DeviceBackend { kAuto, kNccl, kIpc, kStaged, kHierarchical };

// "auto", "nccl", "ipc", "staged", "hierarchical".
const char* device_backend_name(DeviceBackend backend);
// Parses one of those names; InvalidArgument listing them otherwise.
DeviceBackend parse_device_backend(const std::string& name);

// Where one rank's GPU is: its node, and an id of the physical GPU (its UUID or PCI bus id),
// equal for two ranks exactly when they share the GPU.
struct RankDevice {
  int node = 0;
  std::string gpu;
};

struct DeviceTopology {
  std::vector<RankDevice> ranks;  // by rank
  bool cuda_devices = false;      // the ranks use real CUDA devices (not the host or fake ones)
  bool nccl_built = false;        // this build has NCCL
  bool ipc_possible = false;      // the devices share memory across processes (CUDA, fake)
};

// The backend for `requested` on `topology` (the same on every rank). kAuto: nccl where it may
// run, else ipc on one node, else hierarchical across nodes of equal size, else staged.
// An explicit request that cannot run here is an InvalidArgument saying why (naming the ranks
// that share a GPU for nccl) and which backends can.
DeviceBackend choose_device_backend(const DeviceTopology& topology, DeviceBackend requested);

// "ranks 0 and 2 share GPU X on node 0", or "" when every rank has its own GPU.
std::string describe_shared_gpus(const DeviceTopology& topology);

}  // namespace comm
}  // namespace tessera
