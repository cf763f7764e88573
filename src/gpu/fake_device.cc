// FakeDevice's streams: a thread each, running a FIFO of operations after random delays.
#include "gpu/fake_device.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <random>
#include <thread>

#include "common/error.h"
#include "gpu/host_ops.h"

namespace tessera {
namespace gpu {
namespace {

// Completion of the work recorded before an event; `error` is the stream's first failure.
struct EventState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string error;
};

class FakeEvent : public Event {
 public:
  explicit FakeEvent(std::shared_ptr<EventState> state) : state_(std::move(state)) {}
  bool done() override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->done && !state_->error.empty()) throw DeviceError(state_->error);
    return state_->done;
  }
  void synchronize(Clock::time_point deadline, const std::string& what) override {
    std::unique_lock<std::mutex> lock(state_->mu);
    if (!state_->cv.wait_until(lock, deadline, [&] { return state_->done; })) {
      throw TimeoutError(detail::concat("timed out waiting for ", what, " on the fake device"));
    }
    if (!state_->error.empty()) throw DeviceError(state_->error);
  }
  const std::shared_ptr<EventState>& state() const { return state_; }

 private:
  std::shared_ptr<EventState> state_;
};

}  // namespace

class FakeStream : public Stream {
 public:
  FakeStream(FakeDevice& device, uint64_t seed, bool slow)
      : device_(device), rng_(seed), slow_(slow), worker_([this] { run(); }) {}
  ~FakeStream() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();  // drains the queue first
  }

  void copy(void* dst, const void* src, size_t bytes) override {
    enqueue([=] {
      if (bytes > 0) std::memmove(dst, src, bytes);
    });
  }
  void batched_copy(const std::vector<CopyItem>& items, DataType dtype, double factor) override {
    check_copy_factor(dtype, factor);  // at the call, as CUDA's launch would
    enqueue([=] { host_batched_copy(items, dtype, factor); });
  }
  void reduce(DataType dtype, ReduceOp op, const void* in, void* inout, size_t count) override {
    TESSERA_CHECK(op != ReduceOp::kAverage,
                  "a device reduction takes sum, min, max, prod, band or bor, not average");
    enqueue([=] { host_reduce(dtype, op, in, inout, count); });
  }
  void reduce_many(DataType dtype, ReduceOp op, const std::vector<const void*>& inputs, void* out,
                   size_t count, double factor) override {
    TESSERA_CHECK(op != ReduceOp::kAverage,
                  "a device reduction takes sum, min, max, prod, band or bor, not average");
    check_copy_factor(dtype, factor);
    enqueue([=] { host_reduce_many(dtype, op, inputs, out, count, factor); });
  }
  std::shared_ptr<Event> record() override {
    auto state = std::make_shared<EventState>();
    enqueue_control([this, state] {
      std::lock_guard<std::mutex> lock(state->mu);
      state->done = true;
      state->error = error_;
      state->cv.notify_all();
    });
    return std::make_shared<FakeEvent>(state);
  }
  void wait(const std::shared_ptr<Event>& event) override {
    auto* fake = dynamic_cast<FakeEvent*>(event.get());
    TESSERA_CHECK(fake != nullptr, "a fake stream can only wait on a fake device's event");
    auto state = fake->state();
    const double timeout = device_.options_.wait_timeout_s;
    enqueue_control([this, state, timeout] {
      std::unique_lock<std::mutex> lock(state->mu);
      const auto deadline = Clock::now() + std::chrono::duration<double>(timeout);
      if (!state->cv.wait_until(lock, deadline, [&] { return state->done; })) {
        if (error_.empty()) error_ = "a fake stream waited past its deadline for an event";
      } else if (!state->error.empty() && error_.empty()) {
        error_ = state->error;  // the failure travels with the dependency, as in CUDA
      }
    });
  }

 private:
  // A data operation: delayed at random, skipped after a failure, and the injected failure
  // lands here.
  void enqueue(std::function<void()> op) {
    std::string failure = device_.take_failure();
    enqueue_control([this, op = std::move(op), failure] {
      if (!error_.empty()) return;
      if (!failure.empty()) {
        error_ = failure;
        return;
      }
      try {
        op();
      } catch (const std::exception& e) {
        error_ = e.what();
      }
      ++device_.ops_run_;
    });
  }
  void enqueue_control(std::function<void()> op) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(op));
    }
    cv_.notify_all();
  }
  void run() {
    const auto& o = device_.options_;
    std::uniform_int_distribution<int> delay(slow_ ? o.slow_delay_us : o.min_delay_us,
                                             slow_ ? o.slow_delay_us : o.max_delay_us);
    for (;;) {
      std::function<void()> op;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and drained
        op = std::move(queue_.front());
        queue_.pop_front();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(delay(rng_)));
      while (device_.held_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      op();
    }
  }

  FakeDevice& device_;
  std::mt19937_64 rng_;
  bool slow_;
  std::string error_;  // the first failure; touched only by the worker thread
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread worker_;  // last: starts after the members it uses
};

FakeDevice::FakeDevice(FakeDeviceOptions options, int index) : options_(options), index_(index) {}

std::string FakeDevice::name() const { return detail::concat("fake:", index_); }

std::unique_ptr<Stream> FakeDevice::new_stream() {
  const uint64_t k = streams_made_++;
  return std::make_unique<FakeStream>(*this, options_.seed * 1000003 + k,
                                      static_cast<int64_t>(k) == options_.slow_stream);
}

std::shared_ptr<void> FakeDevice::allocate(size_t bytes) {
  ++allocations_;
  return host_allocate(bytes);
}
std::shared_ptr<void> FakeDevice::allocate_host(size_t bytes) { return host_allocate(bytes); }

namespace {

// The handle: the segment's size, then its name.
struct SharedHeader {
  uint64_t bytes;
  char name[kSharedHandleBytes - sizeof(uint64_t)];
};
static_assert(sizeof(SharedHeader) == kSharedHandleBytes, "the handle is one header");

// Maps `bytes` of the segment `fd`; unmapped (and, for the owner, unlinked) with the last owner.
std::shared_ptr<void> map_segment(int fd, size_t bytes, std::string unlink_name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    throw DeviceError(
        detail::concat("cannot map ", bytes, " bytes of shared memory: ", std::strerror(err)));
  }
  return std::shared_ptr<void>(p, [bytes, unlink_name](void* q) {
    munmap(q, bytes);
    if (!unlink_name.empty()) shm_unlink(unlink_name.c_str());
  });
}

}  // namespace

// Segments made by this process, by every FakeDevice in it: a name is never made twice here.
std::atomic<uint64_t> g_shared_made{0};

SharedMemory FakeDevice::allocate_shared(size_t bytes) {
  bytes = std::max<size_t>(bytes, 256);
  SharedHeader h{};
  h.bytes = bytes;
  std::snprintf(h.name, sizeof(h.name), "/tessera-fake-%d-%llu", static_cast<int>(getpid()),
                static_cast<unsigned long long>(g_shared_made++));
  int fd = shm_open(h.name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 && errno == EEXIST) {
    // A segment under this pid can only be a dead process's (the pid was reused after it was
    // killed before unlinking): no living process but this one makes names with this pid.
    shm_unlink(h.name);
    fd = shm_open(h.name, O_CREAT | O_EXCL | O_RDWR, 0600);
  }
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    if (fd >= 0) {
      close(fd);
      shm_unlink(h.name);
    }
    throw DeviceError(detail::concat("cannot create shared memory ", h.name, " of ", bytes,
                                     " bytes: ", std::strerror(err)));
  }
  SharedMemory m;
  m.memory = map_segment(fd, bytes, h.name);
  m.handle.resize(kSharedHandleBytes);
  std::memcpy(m.handle.data(), &h, sizeof(h));
  return m;
}

std::shared_ptr<void> FakeDevice::open_shared(const std::vector<char>& handle) {
  TESSERA_CHECK_EQ(handle.size(), kSharedHandleBytes, "a shared memory handle's size");
  SharedHeader h{};
  std::memcpy(&h, handle.data(), sizeof(h));
  h.name[sizeof(h.name) - 1] = '\0';
  const int fd = shm_open(h.name, O_RDWR, 0600);
  if (fd < 0) {
    throw DeviceError(detail::concat("cannot open another rank's shared memory ", h.name, ": ",
                                     std::strerror(errno)));
  }
  return map_segment(fd, h.bytes, "");
}

void FakeDevice::fail_next(const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  failure_ = message;
}

std::string FakeDevice::take_failure() {
  std::lock_guard<std::mutex> lock(mu_);
  std::string f;
  f.swap(failure_);
  return f;
}

}  // namespace gpu
}  // namespace tessera
