// Internal to src/engine: one process set's engine: its communicator, the negotiation state
// (pending requests, response cache, coordinator table, held groups) and the thread that runs
// the cycles. Engine (engine.cc) routes requests to these; set_engine.cc runs them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/selector.h"
#include "engine/coordinator.h"
#include "engine/engine.h"
#include "engine/response_cache.h"
#include "engine/timeline.h"

namespace tessera {
namespace engine {

// set_tunables' broadcast buffer back into settings (engine.cc).
Tunables decode_tunables(const char* buf);

struct Engine::Impl {
  using Clock = std::chrono::steady_clock;

  enum class State { kNew, kCached, kSent };
  struct Pending {
    Request req;
    std::shared_ptr<HandleState> handle;
    Clock::time_point enqueued;
    State state = State::kNew;
    int bit = -1;
    Clock::time_point agreed;
    std::string negotiate_args = "{}";  // for the timeline
    bool carries_tunables = false;      // set_tunables' broadcast: switch once it has run
    int contributors = 0;               // ranks that did not join (0: all); averages divide by it
    std::vector<char> own_in, own_out;  // a joined rank's stand-in: the identity, and scratch
  };
  struct Ready {
    Pending* pending;   // an entry of `pending` (map nodes stay put until erased)
    std::string error;  // empty: run it
  };

  Impl(comm::Communicator& c, const EngineOptions& o)
      : comm(c.dup()),
        opt(o),
        cache(o.cache_capacity),
        coordinator(comm->size()),
        idle_wait_ms(o.cycle_time_ms > 0 ? o.cycle_time_ms : 1.0),
        full_cache_capacity(o.cache_capacity > 0 ? o.cache_capacity : 1024),
        override_ranges(comm::parse_override(o.allreduce)) {
    current = tunables_of(opt);
  }

  std::unique_ptr<comm::Communicator> comm;
  EngineOptions opt;  // engine thread only; `current` mirrors its tunables for other threads
  ResponseCache cache;

  // Shared with the callers' threads.
  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<Pending> queue;
  std::map<std::string, int> names_in_flight;  // duplicate names are refused at enqueue
  bool shutdown_requested = false;
  std::string shutdown_reason;
  std::string final_error;  // why the engine stopped; set once
  std::atomic<bool> stopped{false};
  Stats stats;
  Tunables current;
  std::vector<CycleTime> cycle_log;  // ring of kCycleLogSize; cycle_index % size is the newest
  std::thread thread;

  // Engine thread only.
  std::map<std::string, Pending> pending;
  Coordinator coordinator;
  std::map<int, std::vector<Pending*>> held_groups;  // agreed members waiting for the rest
  std::vector<char> fusion;
  uint64_t cycle_index = 0;   // identical on every rank: cycles run in lockstep
  double idle_wait_ms = 1.0;  // the wait before the next cycle: longer while all are idle
  Timeline timeline;
  Clock::time_point last_flush;
  size_t full_cache_capacity;  // the capacity the cache gets when tuning turns it back on
  std::vector<comm::SizeRange> override_ranges;  // opt.allreduce parsed; empty: the knob's

  int set_id = 0;

  void start();
  void request_shutdown(const std::string& reason);
  void run();
  bool cycle();
  void execute(const std::vector<Ready>& ready);
  void run_batch(const std::vector<Pending*>& items);
  void complete(const std::vector<Pending*>& items, std::exception_ptr e);
  void fail_all(std::exception_ptr e);
  // Switches opt to `t` (engine thread, at the agreed point).
  void apply(const Tunables& t);
  static Tunables tunables_of(const EngineOptions& o);
  comm::Algorithm algorithm_for(size_t bytes) const;
};

}  // namespace engine
}  // namespace tessera
