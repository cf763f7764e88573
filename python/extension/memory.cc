// tessera._tessera's CPU allocator statistics: torch keeps allocator statistics for CUDA only
// (torch.cuda.max_memory_allocated), and tessera.torch.spatial's memory target is stated in
// them. Once installed, every CPU tensor torch allocates goes through a counter of the bytes held
// now and at most (since the last reset) before reaching torch's own allocator.
#include <c10/core/CPUAllocator.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace py = pybind11;

namespace tessera {
namespace python {
namespace {

std::atomic<int64_t> held{0}, peak{0};

// torch's own allocations by their data pointer: a block's context must be its data pointer, for
// raw_allocate's callers (oneDNN's scratch memory among them).
std::mutex blocks_mu;
std::unordered_map<void*, std::pair<c10::DataPtr, int64_t>>& blocks() {
  static auto* m = new std::unordered_map<void*, std::pair<c10::DataPtr, int64_t>>();
  return *m;
}

void release(void* p) {
  c10::DataPtr inner;  // freed after the lock is let go
  std::lock_guard<std::mutex> lock(blocks_mu);
  auto it = blocks().find(p);
  if (it == blocks().end()) return;
  held -= it->second.second;
  inner = std::move(it->second.first);
  blocks().erase(it);
}

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) const override {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    if (data == nullptr) return inner;  // empty tensors hold nothing
    const c10::Device device = inner.device();
    const int64_t now = held += static_cast<int64_t>(n);
    int64_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
    std::lock_guard<std::mutex> lock(blocks_mu);
    blocks()[data] = {std::move(inner), static_cast<int64_t>(n)};
    return {data, data, &release, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

 private:
  c10::Allocator* base_;
};

}  // namespace

void bind_memory(py::module_& m) {
  m.def("track_cpu_memory", [] {
    // Installed once, for the rest of the process (tensors made before keep their own deleters).
    static CountingAllocator* counting = [] {
      auto* a = new CountingAllocator(c10::GetCPUAllocator());
      c10::SetCPUAllocator(a, /*priority=*/100);
      return a;
    }();
    (void)counting;
  });
  m.def("cpu_memory_stats", [] {
    py::dict d;
    d["held_bytes"] = held.load();
    d["peak_bytes"] = peak.load();
    return d;
  });
  m.def("reset_cpu_memory_peak", [] { peak = held.load(); });
}

}  // namespace python
}  // namespace tessera
