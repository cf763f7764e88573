// Timeline: a Chrome / Perfetto trace (chrome://tracing, ui.perfetto.dev) of what the engine
// does with each tensor: NEGOTIATE (enqueue to agreement, with each rank's ready cycle),
// QUEUE (agreement to execution), MEMCPY_IN_FUSION_BUFFER, the collective (named by its
// algorithm), MEMCPY_OUT_FUSION_BUFFER. One row per tensor.
//
// The file is valid JSON after every flush: the closing bracket is written each time and
// overwritten by the next events, so a job that dies leaves a trace that still parses.
// Thread-safe; started and stopped at run time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

namespace tessera {
namespace engine {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  Timeline() = default;
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Starts writing to `path` (replacing the file); throws InvalidArgument if it cannot.
  void start(const std::string& path);
  void stop();
  // Lock-free, so the engine can skip per-tensor tracing work while nobody traces.
  bool active() const { return active_.load(std::memory_order_relaxed); }

  // A complete event on the row of `tensor`, with `args` shown beside it. The one writer of
  // trace events: every caller hands its arguments over as JSON values.
  void event(const std::string& tensor, const std::string& name, Clock::time_point begin,
             Clock::time_point end, const nlohmann::json& args = nlohmann::json::object());
  // Writes what is buffered and re-closes the array.
  void flush();

 private:
  int row_of(const std::string& tensor);  // mutex_ held
  void write(const std::string& text);    // mutex_ held

  mutable std::mutex mutex_;
  std::FILE* file_ = nullptr;
  std::atomic<bool> active_{false};  // file_ != nullptr
  bool first_ = true;
  Clock::time_point origin_;
  std::map<std::string, int> rows_;
  std::string buffer_;
};

}  // namespace engine
}  // namespace tessera
