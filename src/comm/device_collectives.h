// Collectives on device buffers (CUDA memory, or the fake device's in tests). MPI never sees a
// device pointer: the backends (device_selector.h) are NCCL; IPC within a node
// (ipc_collectives.h); host staging through pinned buffers with tessera's own host algorithms;
// and hierarchical, whose allreduce is IPC within each node around a staged allreduce across
// nodes (its other collectives are staged).
//
// Ordering, as in CUDA: a collective reads its input after the work enqueued on `stream`
// before the call, and its results are ready for work enqueued on `stream` after it returns.
// The host may block inside the call for the host-side part (staged: until the host
// reduction is done; the copies back are enqueued), bounded by the communicator's timeout.
// Every rank calls the same collective with matching arguments, in the same order, with the
// same options (the backend is chosen from facts every rank shares).
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/algorithm.h"
#include "comm/communicator.h"
#include "comm/device_peers.h"
#include "comm/device_selector.h"
#include "common/dtype.h"
#include "gpu/device.h"

namespace tessera {
namespace gpu {
class NcclComm;
}
namespace comm {

struct DeviceOptions {
  DeviceBackend backend = DeviceBackend::kAuto;
  Algorithm host_algorithm = Algorithm::kAuto;  // staged: the host algorithm of the allreduce
  // staged: the unit of the device->host / host->device copies that overlap the host
  // reduction (rounded down to whole elements).
  size_t staging_segment_bytes = size_t{4} << 20;
};

// One communicator's device state: every rank's GPU (gathered once), the pinned staging buffer,
// the stream that carries copies back to the device, and the NCCL communicator (made on first
// use). One per communicator (a process set's), used by one thread at a time.
class DeviceContext {
 public:
  // Collective over `comm`: gathers each rank's (node, physical device). Both must outlive it.
  DeviceContext(Communicator& comm, gpu::Device& device);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  Communicator& comm() { return comm_; }
  gpu::Device& device() { return device_; }
  const DeviceTopology& topology() const { return topology_; }
  // The backend `requested` resolves to (the same on every rank).
  DeviceBackend backend(DeviceBackend requested) const;

  // Pinned host memory of at least `bytes`, reused across calls. Growing it first waits for the
  // copies that still read the old one.
  char* staging(size_t bytes);
  // Where staged results go back to the device; `last_upload` is the event after its latest
  // copies, which the next staged call waits on before reusing the staging buffer.
  gpu::Stream& upload_stream();
  std::shared_ptr<gpu::Event> last_upload;
  // The NCCL communicator over `comm` (created, collectively, on first use).
  gpu::NcclComm& nccl();
  // The IPC backend's buffers over this node's ranks of `comm` (comm's local() where it has
  // node structure, else comm itself), their steps agreed over all of `comm`; made on first use.
  PeerBuffers& peers();

 private:
  Communicator& comm_;
  gpu::Device& device_;
  DeviceTopology topology_;
  std::shared_ptr<void> staging_;
  size_t staging_bytes_ = 0;
  std::unique_ptr<gpu::Stream> upload_;
  std::unique_ptr<gpu::NcclComm> nccl_;
  std::unique_ptr<PeerBuffers> peers_;
};

// recv[i] = op over ranks of send[i] (kAverage: the mean), count elements, on every rank.
void device_allreduce(DeviceContext& ctx, gpu::Stream& stream, const void* send, void* recv,
                      size_t count, DataType dtype, ReduceOp op, const DeviceOptions& o = {});
// counts[r] elements from rank r, packed in rank order into recv.
void device_allgatherv(DeviceContext& ctx, gpu::Stream& stream, const void* send, void* recv,
                       const std::vector<size_t>& counts, DataType dtype,
                       const DeviceOptions& o = {});
// buf on every rank = buf on root.
void device_broadcast(DeviceContext& ctx, gpu::Stream& stream, void* buf, size_t count,
                      DataType dtype, int root, const DeviceOptions& o = {});
// recv (block elements) on rank r = op over ranks of block r of send.
void device_reduce_scatter(DeviceContext& ctx, gpu::Stream& stream, const void* send, void* recv,
                           size_t block, DataType dtype, ReduceOp op, const DeviceOptions& o = {});
// send_counts[j] elements to rank j, recv_counts[j] from rank j, packed in rank order.
void device_alltoallv(DeviceContext& ctx, gpu::Stream& stream, const void* send,
                      const std::vector<size_t>& send_counts, void* recv,
                      const std::vector<size_t>& recv_counts, DataType dtype,
                      const DeviceOptions& o = {});

}  // namespace comm
}  // namespace tessera
