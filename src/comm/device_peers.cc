// PeerBuffers: growth by collective handle exchange, and the host step.
#include "comm/device_peers.h"

#include <algorithm>
#include <exception>
#include <string>

#include "comm/collectives.h"
#include "common/error.h"

namespace tessera {
namespace comm {

gpu::Clock::time_point timeout_deadline(const Communicator& comm) {
  return gpu::Clock::now() + std::chrono::duration_cast<gpu::Clock::duration>(
                                 std::chrono::duration<double>(comm.settings().timeout_s));
}

const std::vector<char*>& PeerBuffers::buffers(size_t bytes) {
  if (bytes <= bytes_ && !ptrs_.empty()) return ptrs_;
  // Every rank grows at the same call (same `bytes`, same history). The previous collective
  // ended with a step, so no work reads the old buffers any more.
  const size_t grown = (std::max(bytes, bytes_ * 2) + 255) / 256 * 256;
  mine_ = device_.allocate_shared(std::max<size_t>(grown, 256));
  const size_t h = gpu::kSharedHandleBytes;
  std::vector<char> handles(h * static_cast<size_t>(comm_.size()));
  allgather(comm_, mine_.handle.data(), handles.data(), h, DataType::kUInt8);
  opened_.assign(static_cast<size_t>(comm_.size()), nullptr);
  ptrs_.assign(static_cast<size_t>(comm_.size()), nullptr);
  for (int r = 0; r < comm_.size(); ++r) {
    const auto i = static_cast<size_t>(r);
    if (r == comm_.rank()) {
      ptrs_[i] = static_cast<char*>(mine_.memory.get());
      continue;
    }
    opened_[i] =
        device_.open_shared(std::vector<char>(handles.begin() + static_cast<long>(i * h),
                                              handles.begin() + static_cast<long>((i + 1) * h)));
    ptrs_[i] = static_cast<char*>(opened_[i].get());
  }
  bytes_ = grown;
  return ptrs_;
}

// The meeting is an agreement, not a bare barrier: a rank whose device work failed would
// otherwise leave the others reading a buffer it never wrote (a silent wrong result) or
// waiting for it. Every rank learns which ranks failed and throws alike.
void PeerBuffers::step(gpu::Stream& stream, const char* what) {
  int32_t failed = 0;
  std::exception_ptr mine;
  try {
    stream.record()->synchronize(timeout_deadline(comm_), what);
  } catch (const Error&) {  // DeviceError, or TimeoutError of a stuck stream
    failed = 1;
    mine = std::current_exception();
  }
  std::vector<int32_t> all(static_cast<size_t>(agree_.size()));
  allgather(agree_, &failed, all.data(), 1, DataType::kInt32);
  std::string ranks;
  for (int r = 0; r < agree_.size(); ++r) {
    if (all[static_cast<size_t>(r)] != 0) {
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(agree_.world_rank_of(r));
    }
  }
  if (ranks.empty()) return;
  if (failed) std::rethrow_exception(mine);
  throw DeviceError(detail::concat(what, " failed on the device of rank(s) ", ranks,
                                   " (MPI_COMM_WORLD); this rank's result would be incomplete"));
}

}  // namespace comm
}  // namespace tessera
