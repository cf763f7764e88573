#include "engine/handle.h"

#include <chrono>

#include "common/error.h"
#include "gpu/device.h"

namespace tessera {
namespace engine {

void HandleState::finish(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    error = std::move(e);
    done = true;
  }
  done_cv.notify_all();
}

bool Handle::poll() const {
  if (!state_) return true;
  std::shared_ptr<gpu::Event> completion;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (!state_->done) return false;
    completion = state_->completion;
  }
  try {
    return completion == nullptr || completion->done();
  } catch (const std::exception&) {
    return true;  // failed: finished, and wait() says why
  }
}

std::shared_ptr<gpu::Event> Handle::completion() const {
  if (!state_) return nullptr;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done && !state_->error ? state_->completion : nullptr;
}

bool Handle::wait_for(double seconds) const {
  if (!state_) return true;
  std::unique_lock<std::mutex> lock(state_->mutex);
  return state_->done_cv.wait_for(lock, std::chrono::duration<double>(seconds),
                                  [&] { return state_->done; });
}

void Handle::wait_issued(double timeout_s) const {
  TESSERA_CHECK(state_ != nullptr, "wait() on an empty Handle");
  std::unique_lock<std::mutex> lock(state_->mutex);
  if (timeout_s < 0) {
    state_->done_cv.wait(lock, [&] { return state_->done; });
  } else if (!state_->done_cv.wait_for(lock, std::chrono::duration<double>(timeout_s),
                                       [&] { return state_->done; })) {
    throw TimeoutError(
        detail::concat("collective '", state_->name, "' not finished after ", timeout_s, " s"));
  }
  if (state_->error) std::rethrow_exception(state_->error);
}

void Handle::wait(double timeout_s) const {
  wait_issued(timeout_s);
  std::shared_ptr<gpu::Event> completion;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    completion = state_->completion;
  }
  if (!completion) return;
  const double s = timeout_s < 0 ? state_->device_timeout_s : timeout_s;
  completion->synchronize(gpu::Clock::now() + std::chrono::duration_cast<gpu::Clock::duration>(
                                                  std::chrono::duration<double>(s)),
                          "the device work of collective '" + state_->name + "'");
}

}  // namespace engine
}  // namespace tessera
