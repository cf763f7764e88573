#include "comm/device_selector.h"

#include <map>
#include <set>
#include <utility>

#include "common/error.h"

namespace tessera {
namespace comm {

const char* device_backend_name(DeviceBackend backend) {
  switch (backend) {
    case DeviceBackend::kAuto:
      return "auto";
    case DeviceBackend::kNccl:
      return "nccl";
    case DeviceBackend::kIpc:
      return "ipc";
    case DeviceBackend::kStaged:
      return "staged";
    case DeviceBackend::kHierarchical:
      return "hierarchical";
  }
  return "?";
}

DeviceBackend parse_device_backend(const std::string& name) {
  for (DeviceBackend b : {DeviceBackend::kAuto, DeviceBackend::kNccl, DeviceBackend::kIpc,
                          DeviceBackend::kStaged, DeviceBackend::kHierarchical}) {
    if (name == device_backend_name(b)) return b;
  }
  TESSERA_CHECK(false, "unknown device backend '", name,
                "': expected auto, nccl, ipc, staged or hierarchical");
  return DeviceBackend::kAuto;
}

std::string describe_shared_gpus(const DeviceTopology& t) {
  std::map<std::pair<int, std::string>, std::vector<int>> by_gpu;
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    by_gpu[{t.ranks[r].node, t.ranks[r].gpu}].push_back(static_cast<int>(r));
  }
  std::string out;
  for (const auto& [where, ranks] : by_gpu) {
    if (ranks.size() < 2) continue;
    std::string list;
    for (size_t i = 0; i < ranks.size(); ++i) {
      list += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
    }
    out += (out.empty() ? "" : "; ") +
           detail::concat("ranks ", list, " share GPU ", where.second, " on node ", where.first);
  }
  return out;
}

namespace {

bool one_node(const DeviceTopology& t) {
  std::set<int> nodes;
  for (const RankDevice& r : t.ranks) nodes.insert(r.node);
  return nodes.size() <= 1;
}

// Every node holds the same number of ranks (the hierarchical allreduce pairs ranks across nodes
// by local rank).
bool uniform_nodes(const DeviceTopology& t) {
  std::map<int, int> per_node;
  for (const RankDevice& r : t.ranks) ++per_node[r.node];
  for (const auto& [node, n] : per_node) {
    if (n != per_node.begin()->second) return false;
  }
  return true;
}

// Why `b` cannot run on `t`, or "" when it can.
std::string why_not(const DeviceTopology& t, DeviceBackend b) {
  switch (b) {
    case DeviceBackend::kNccl: {
      if (!t.cuda_devices) return "NCCL needs CUDA devices";
      if (!t.nccl_built) return "this build has no NCCL (configure with CUDA and nccl.h found)";
      const std::string shared = describe_shared_gpus(t);
      if (!shared.empty()) return "NCCL refuses two ranks on one GPU: " + shared;
      return "";
    }
    case DeviceBackend::kIpc:
      if (!t.ipc_possible) return "CUDA IPC needs CUDA devices (or the fake device)";
      if (!one_node(t)) return "CUDA IPC works within one node and these ranks span several";
      return "";
    case DeviceBackend::kHierarchical:
      if (!t.ipc_possible) return "its in-node part (CUDA IPC) needs CUDA devices";
      if (!uniform_nodes(t)) return "it needs the same number of ranks on every node";
      return "";
    default:
      return "";
  }
}

}  // namespace

DeviceBackend choose_device_backend(const DeviceTopology& t, DeviceBackend requested) {
  if (requested != DeviceBackend::kAuto) {
    const std::string why = why_not(t, requested);
    if (!why.empty()) {
      std::string can = "staged";
      for (DeviceBackend b :
           {DeviceBackend::kNccl, DeviceBackend::kIpc, DeviceBackend::kHierarchical}) {
        if (why_not(t, b).empty()) can += std::string(", ") + device_backend_name(b);
      }
      TESSERA_CHECK(false, "device backend ", device_backend_name(requested),
                    " cannot run here: ", why, ". Backends that can: ", can);
    }
    return requested;
  }
  if (why_not(t, DeviceBackend::kNccl).empty()) return DeviceBackend::kNccl;
  if (why_not(t, DeviceBackend::kIpc).empty()) return DeviceBackend::kIpc;
  if (why_not(t, DeviceBackend::kHierarchical).empty()) return DeviceBackend::kHierarchical;
  return DeviceBackend::kStaged;
}

}  // namespace comm
}  // namespace tessera
