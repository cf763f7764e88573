// DeviceContext: what a communicator's device collectives share (topology, staging, streams,
// the NCCL communicator).
#include <cstring>

#include "comm/collectives.h"
#include "comm/device_collectives.h"
#include "common/error.h"
#include "gpu/nccl.h"

namespace tessera {
namespace comm {
namespace {

constexpr size_t kIdBytes = 64;  // a PCI bus id ("0000:3b:00.0") or "fake:N", padded

// Every rank's (node, physical device), gathered once.
std::vector<RankDevice> gather_devices(Communicator& comm, const gpu::Device& device) {
  std::vector<char> mine(kIdBytes, '\0');
  const std::string id = device.physical_id();
  std::memcpy(mine.data(), id.data(), std::min(id.size(), kIdBytes - 1));
  std::vector<char> ids(kIdBytes * static_cast<size_t>(comm.size()));
  allgather(comm, mine.data(), ids.data(), kIdBytes, DataType::kUInt8);
  const int node = comm.node_index();
  std::vector<int> nodes(static_cast<size_t>(comm.size()));
  allgather(comm, &node, nodes.data(), 1, DataType::kInt32);
  std::vector<RankDevice> out(static_cast<size_t>(comm.size()));
  for (size_t r = 0; r < out.size(); ++r) {
    out[r].node = nodes[r];
    out[r].gpu = std::string(ids.data() + r * kIdBytes);
  }
  return out;
}

}  // namespace

DeviceContext::DeviceContext(Communicator& comm, gpu::Device& device)
    : comm_(comm), device_(device) {
  topology_.ranks = gather_devices(comm, device);
  topology_.cuda_devices = device.name().rfind("cuda:", 0) == 0;
  topology_.nccl_built = gpu::nccl_built();
  topology_.ipc_possible = device.shares_memory();
}

DeviceContext::~DeviceContext() {
  // Copies still reading the staging buffer finish before it is freed.
  try {
    if (last_upload) last_upload->synchronize(gpu::Clock::now() + std::chrono::seconds(60), "");
  } catch (...) {  // never throws: an error was reported by the collective that caused it
  }
}

DeviceBackend DeviceContext::backend(DeviceBackend requested) const {
  return choose_device_backend(topology_, requested);
}

char* DeviceContext::staging(size_t bytes) {
  if (bytes > staging_bytes_) {
    if (last_upload) {
      last_upload->synchronize(timeout_deadline(comm_), "the copies from the old staging buffer");
    }
    staging_bytes_ = std::max(bytes, staging_bytes_ * 2);
    staging_ = device_.allocate_host(staging_bytes_);
  }
  return static_cast<char*>(staging_.get());
}

gpu::Stream& DeviceContext::upload_stream() {
  if (!upload_) upload_ = device_.new_stream();
  return *upload_;
}

gpu::NcclComm& DeviceContext::nccl() {
  if (!nccl_) {
    std::vector<char> id(128);
    if (comm_.rank() == 0) id = gpu::NcclComm::unique_id();
    broadcast(comm_, id.data(), id.size(), DataType::kUInt8, 0);
    nccl_ = std::make_unique<gpu::NcclComm>(id, comm_.size(), comm_.rank(), device_,
                                            timeout_deadline(comm_));
  }
  return *nccl_;
}

PeerBuffers& DeviceContext::peers() {
  if (!peers_) {
    Communicator* local = comm_.local();
    peers_ = std::make_unique<PeerBuffers>(local != nullptr ? *local : comm_, comm_, device_);
  }
  return *peers_;
}

}  // namespace comm
}  // namespace tessera
