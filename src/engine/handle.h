// Handle: the caller's view of one enqueued collective.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tessera {
namespace engine {

struct HandleState {
  std::string name;
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::exception_ptr error;
  // allgather: the gathered bytes and their shape (first dimension summed over ranks).
  std::vector<char> result;
  std::vector<int64_t> result_shape;
  // join only: the last rank to join (Horovod's hvd.join() return value).
  int last_joined = -1;

  void finish(std::exception_ptr e);
};

class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<HandleState> s) : state_(std::move(s)) {}

  // Non-blocking: true once the collective finished (successfully or not). Never throws.
  bool poll() const;
  // Blocks until the collective finished; rethrows the engine's exception (the original type:
  // InvalidArgument for a mismatch between ranks, TimeoutError, CommError, ...). timeout_s < 0
  // waits without a deadline of its own (the engine's waits have theirs); otherwise throws
  // TimeoutError naming the tensor when the time passes.
  void wait(double timeout_s = -1) const;
  // Blocks up to `seconds` for the collective to finish; true when it has. Never throws (the
  // caller's loop checks for interrupts between calls, then wait() returns or rethrows).
  bool wait_for(double seconds) const;
  const std::string& name() const { return state_->name; }
  // allgather only, after wait(): the gathered data and its shape.
  const std::vector<char>& result() const { return state_->result; }
  const std::vector<int64_t>& result_shape() const { return state_->result_shape; }
  // join only, after wait(): the rank whose join arrived last (the highest on a tie).
  int last_joined() const { return state_->last_joined; }

 private:
  std::shared_ptr<HandleState> state_;
};

}  // namespace engine
}  // namespace tessera
