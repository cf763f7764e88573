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
namespace gpu {
class Event;
}
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
  // Device tensors: the event after the collective's device work (set before done), which
  // wait() also waits for, up to device_timeout_s; allgather's result in device memory.
  std::shared_ptr<gpu::Event> completion;
  double device_timeout_s = 60;
  std::shared_ptr<void> device_result;

  void finish(std::exception_ptr e);
};

class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<HandleState> s) : state_(std::move(s)) {}

  // Non-blocking: true once the collective finished (successfully or not), device work
  // included. Never throws.
  bool poll() const;
  // Blocks until the collective finished; rethrows the engine's exception (the original type:
  // InvalidArgument for a mismatch between ranks, TimeoutError, CommError, ...). timeout_s < 0
  // waits without a deadline of its own (the engine's waits have theirs); otherwise throws
  // TimeoutError naming the tensor when the time passes. For device tensors it also waits on
  // the host for the device work, and throws DeviceError with the failed operation's message.
  void wait(double timeout_s = -1) const;
  // wait() without the host's wait for the device work: returns once the collective has been
  // issued (host tensors: finished; device tensors: enqueued on the device, completion() set),
  // rethrowing the engine's exception. A consumer's stream then waits on completion(), and the
  // host runs ahead (the optimizer's step queued behind the allreduces, as Horovod's
  // asynchronous completion does); a failed kernel surfaces at that stream's next
  // synchronisation, as CUDA's errors do.
  void wait_issued(double timeout_s = -1) const;
  // Device tensors, once the handle is done (wait_for, or poll): the event a consumer's stream
  // waits on instead of the host (nullptr for host tensors, or after an error).
  std::shared_ptr<gpu::Event> completion() const;
  // Blocks up to `seconds` for the collective to finish; true when it has. Never throws (the
  // caller's loop checks for interrupts between calls, then wait() returns or rethrows).
  bool wait_for(double seconds) const;
  const std::string& name() const { return state_->name; }
  // allgather only, after wait(): the gathered data and its shape.
  const std::vector<char>& result() const { return state_->result; }
  const std::vector<int64_t>& result_shape() const { return state_->result_shape; }
  // allgather of device tensors, after wait(): the gathered data in device memory.
  const std::shared_ptr<void>& device_result() const { return state_->device_result; }
  // join only, after wait(): the rank whose join arrived last (the highest on a tie).
  int last_joined() const { return state_->last_joined; }

 private:
  std::shared_ptr<HandleState> state_;
};

}  // namespace engine
}  // namespace tessera
