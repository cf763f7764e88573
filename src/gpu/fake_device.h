// A fake device for tests without a GPU: host memory, and streams that run their work later on
// their own threads, each operation after a random delay, so that code which forgets to wait
// for an event reads stale data or races, and a test sees it. Failures can be injected.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "gpu/device.h"

namespace tessera {
namespace gpu {

struct FakeDeviceOptions {
  int min_delay_us = 0;  // each operation sleeps a random min..max_delay_us before it runs
  int max_delay_us = 200;
  uint64_t seed = 1;           // of the delays (each stream draws from its own generator)
  double wait_timeout_s = 60;  // a Stream::wait whose event never completes fails after this
  // The stream made `slow_stream`-th on this device (from 0; -1: none) sleeps slow_delay_us
  // before each operation instead: one stream lagging far behind the others exposes a missing
  // wait that random delays of the same size would hide.
  int slow_stream = -1;
  int slow_delay_us = 0;
};

class FakeDevice : public Device {
 public:
  explicit FakeDevice(FakeDeviceOptions options = {}, int index = 0);
  DeviceType type() const override { return DeviceType::kCuda; }  // stands in for a GPU
  int index() const override { return index_; }
  std::string name() const override;
  std::string physical_id() const override { return name(); }
  std::unique_ptr<Stream> new_stream() override;
  std::shared_ptr<void> allocate(size_t bytes) override;
  std::shared_ptr<void> allocate_host(size_t bytes) override;
  // POSIX shared memory (shm_open), so ranks on one machine read each other's "device" memory
  // as CUDA IPC lets them. The name is unlinked when the owner frees it; a crashed process
  // leaves its segments in /dev/shm (tessera-fake-<pid>-*), which a later process given the same
  // pid replaces.
  bool shares_memory() const override { return true; }
  SharedMemory allocate_shared(size_t bytes) override;
  std::shared_ptr<void> open_shared(const std::vector<char>& handle) override;

  // The next operation enqueued on any of this device's streams fails with `message` when it
  // runs: that stream's later events report it (DeviceError), as a failed kernel does in CUDA.
  void fail_next(const std::string& message);
  // Operations run so far on all of this device's streams.
  uint64_t operations_run() const { return ops_run_; }
  // While held, no stream of this device starts another operation (a GPU busy with other
  // work): a test sees what the host does before the device work runs.
  void hold(bool held) { held_ = held; }
  // Calls of allocate so far (the device's own memory, cudaMalloc's stand-in).
  uint64_t allocations() const { return allocations_; }

 private:
  friend class FakeStream;
  std::string take_failure();  // the injected failure, once ("" when none)

  FakeDeviceOptions options_;
  int index_;
  std::atomic<uint64_t> streams_made_{0};
  std::atomic<uint64_t> ops_run_{0};
  std::atomic<uint64_t> allocations_{0};
  std::atomic<bool> held_{false};
  std::mutex mu_;
  std::string failure_;
};

}  // namespace gpu
}  // namespace tessera
