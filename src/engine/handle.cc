#include "engine/handle.h"

#include <chrono>

#include "common/error.h"

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
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done;
}

bool Handle::wait_for(double seconds) const {
  if (!state_) return true;
  std::unique_lock<std::mutex> lock(state_->mutex);
  return state_->done_cv.wait_for(lock, std::chrono::duration<double>(seconds),
                                  [&] { return state_->done; });
}

void Handle::wait(double timeout_s) const {
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

}  // namespace engine
}  // namespace tessera
