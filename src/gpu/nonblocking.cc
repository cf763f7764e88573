// wait_until_enqueued: a bounded poll with a growing pause (NCCL enqueues within microseconds
// unless a peer is late; a 1 ms cap keeps a late peer from costing a busy core).
#include "gpu/nonblocking.h"

#include <algorithm>
#include <thread>

#include "common/error.h"

namespace tessera {
namespace gpu {

void wait_until_enqueued(CallState returned,
                         const std::function<CallState(std::string& error)>& poll,
                         Clock::time_point deadline, const std::string& what) {
  std::string error;
  CallState state = returned;
  auto pause = std::chrono::microseconds(50);
  while (state == CallState::kInProgress) {
    if (Clock::now() > deadline) {
      throw TimeoutError(detail::concat("timed out waiting for ", what,
                                        " to be enqueued: the communicator stayed in progress "
                                        "(a rank did not make the matching call)"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
    state = poll(error);
  }
  if (state == CallState::kFailed) throw DeviceError(detail::concat(what, " failed: ", error));
}

}  // namespace gpu
}  // namespace tessera
