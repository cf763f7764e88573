// The device IPC backend's memory: one buffer per rank of a node-local communicator, each
// opened by every other rank (handles exchanged once, and again only when the buffers grow), so
// that copies and kernels on this rank's stream read the peers' buffers directly. Ranks
// synchronise on the host between the steps of a collective: a step's work has run on every
// rank (host wait on an event, then a barrier) before any rank reads what it wrote.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "gpu/device.h"

namespace tessera {
namespace comm {

// Now plus `comm`'s timeout: the deadline of a host wait inside a device collective.
gpu::Clock::time_point timeout_deadline(const Communicator& comm);

class PeerBuffers {
 public:
  // `comm`'s ranks must share memory (one node). The steps agree over `agree`: `comm` itself,
  // or every rank of a collective that spans nodes (each node's ranks with their own
  // PeerBuffers), so that a failure on one node is an error on all. All must outlive this.
  PeerBuffers(Communicator& comm, Communicator& agree, gpu::Device& device)
      : comm_(comm), agree_(agree), device_(device) {}

  Communicator& comm() { return comm_; }
  // Every rank's buffer, by rank, of at least `bytes`: the same `bytes` on every rank (callers
  // derive it from arguments all ranks share). Collective when the buffers grow.
  const std::vector<char*>& buffers(size_t bytes);
  char* mine() const { return ptrs_[static_cast<size_t>(comm_.rank())]; }
  // Ends a step: the host waits for `stream`'s work so far, then for every rank of `agree` to
  // get here (each bounded by the timeout). If any rank's work failed, every rank throws
  // DeviceError: that rank's own message there, "`what` failed on the device of rank(s) ..."
  // (world ranks) elsewhere.
  void step(gpu::Stream& stream, const char* what);

 private:
  Communicator& comm_;
  Communicator& agree_;
  gpu::Device& device_;
  gpu::SharedMemory mine_;
  std::vector<std::shared_ptr<void>> opened_;  // the peers' buffers, mapped here
  std::vector<char*> ptrs_;
  size_t bytes_ = 0;
};

}  // namespace comm
}  // namespace tessera
