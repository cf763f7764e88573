// The completion of a call on a nonblocking communicator (NCCL's with config.blocking = 0), as
// code without NCCL can test it. Such a call may return "in progress": its work is then not yet
// on the stream, and an event recorded there at once would complete without it, so a consumer
// waiting on that event would read stale results. The caller polls the communicator's state
// until the work is enqueued (NCCL: ncclCommGetAsyncError leaves ncclInProgress).
#pragma once

#include <functional>
#include <string>

#include "gpu/device.h"

namespace tessera {
namespace gpu {

enum class CallState { kDone, kInProgress, kFailed };

// Returns once the call that answered `returned` has its work on the stream: at once for kDone;
// for kInProgress, polling `poll` (which sets `error` when it answers kFailed) every 50 us to
// 1 ms. Throws DeviceError naming `what` and the error for kFailed, TimeoutError at `deadline`.
void wait_until_enqueued(CallState returned,
                         const std::function<CallState(std::string& error)>& poll,
                         Clock::time_point deadline, const std::string& what);

}  // namespace gpu
}  // namespace tessera
