// Internal to src/engine: one process set's engine: its communicator, the negotiation state
// (pending requests, response cache, coordinator table, held groups) and the thread that runs
// the cycles. Engine (engine.cc) routes requests to these; process_set.cc runs the cycle and
// batch.cc carries out each batch.
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
#include "comm/device_collectives.h"
#include "comm/selector.h"
#include "engine/bit_vector.h"
#include "engine/coordinator.h"
#include "engine/engine.h"
#include "engine/idle_backoff.h"
#include "engine/response_cache.h"
#include "engine/timeline.h"
#include "gpu/device.h"

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
    nlohmann::json negotiate_args;      // for the timeline: how it was agreed
    bool carries_tunables = false;      // set_tunables' broadcast: switch once it has run
    int contributors = 0;               // ranks that did not join (0: all); averages divide by it
    std::vector<char> own_in, own_out;  // a joined rank's stand-in: the identity, and scratch
  };
  // The set's device work (device_batch.cc): its own stream on the rank's device, the device
  // collectives' state, the device fusion buffer, and what must live until queued work has run.
  struct DeviceState {
    gpu::Device* device = nullptr;  // Engine::set_device's (under mu; read by the engine thread)
    std::unique_ptr<gpu::Stream> stream;
    std::unique_ptr<comm::DeviceContext> context;  // made by the set's first device batch
    std::shared_ptr<void> fusion;
    size_t fusion_bytes = 0;
    struct InFlight {
      std::shared_ptr<gpu::Event> done;
      std::vector<std::shared_ptr<void>> keep;
    };
    std::deque<InFlight> in_flight;  // oldest first
  };
  struct Ready {
    Pending* pending;   // an entry of `pending` (map nodes stay put until erased)
    std::string error;  // empty: run it
  };

  // What one cycle learns from the vote.
  struct Vote {
    bool shutting_down = false;  // some rank asked to shut down
    bool round = false;          // a coordinator round runs this cycle
    bool all_idle = false;       // no rank had anything pending
    std::vector<Ready> ready;    // cached tensors every rank voted for
    BitVector votes;
  };

  Impl(comm::Communicator& c, const EngineOptions& o)
      : comm(c.dup(with_tunables(c.settings(), o.tunables))),
        opt(o),
        cache(o.tunables.cache_enabled ? o.cache_capacity : 0),
        coordinator(comm->size()),
        idle_wait_ms(base_wait_ms(o.tunables.cycle_time_ms)) {
    current = o.tunables;
  }

  // The engine's communicator: its settings carry the tuned algorithm, colors and segments.
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
  // Groups whose members are being agreed: those that passed wait for the rest; once one
  // member fails, the group's error fails the held ones and every later one.
  struct HeldGroup {
    std::vector<Pending*> passed;
    int seen = 0;
    std::string error;
  };
  std::map<int, HeldGroup> held_groups;
  std::vector<char> fusion;
  uint64_t cycle_index = 0;   // identical on every rank: cycles run in lockstep
  double idle_wait_ms = 1.0;  // the wait before the next cycle: longer while all are idle
  Timeline timeline;
  Clock::time_point last_flush;
  DeviceState dev;

  int set_id = 0;

  void start();
  void request_shutdown(const std::string& reason);
  void run();
  // One cycle, as its named steps; true when the engine has shut down.
  bool cycle();
  Vote vote(Clock::time_point now, bool want_shutdown);
  std::vector<std::pair<int, std::string>> coordinate(const Vote& v, bool want_shutdown,
                                                      const std::string& my_reason,
                                                      std::vector<Ready>* ready);
  void take_decisions(std::vector<Ready>* ready);
  // A joined rank's request for `spec`: the identity as input (without buffers for a decision
  // that failed), no handle.
  Pending stand_in(const TensorSpec& spec, bool with_buffers);
  void inspect_stalls();
  void finish_shutdown(const std::vector<std::pair<int, std::string>>& reasons);
  std::vector<Ready> release_groups(const std::vector<Ready>& ready);
  void record_cycle(Clock::time_point t0, double cpu0, const Vote& v, uint64_t hits);
  void execute(const std::vector<Ready>& ready);
  void flush_timeline();

  // One fused batch (batch.cc).
  void run_batch(const std::vector<Pending*>& items);
  void run_allreduce(const std::vector<Pending*>& items);
  void run_adasum(const std::vector<Pending*>& items);
  void run_allgather(Pending& p);
  void run_reduce_scatter(Pending& p, size_t block);
  struct GatherCounts {
    std::vector<size_t> counts;  // elements from each rank
    size_t total = 0;
    int64_t shape_rows = 0;
    std::vector<int64_t> shape;  // of the result: the first dimension summed over ranks
  };
  // Collective over the set: every rank's first dimension of allgather's `s`.
  GatherCounts gather_counts(const TensorSpec& s);
  // The same on device buffers (device_batch.cc). device_batch_can_run first (true for host
  // batches): it makes the set's device state and fails a batch whose backend cannot run.
  bool device_batch_can_run(const std::vector<Pending*>& items);
  void run_device_batch(const std::vector<Pending*>& items);
  void run_device_allreduce(const std::vector<Pending*>& items);
  void run_device_allgather(Pending& p);
  char* device_fusion(size_t bytes);
  comm::DeviceOptions device_options() const;  // from the set's communicator's settings
  // Drops what queued device work no longer needs; with `all`, first waits (to the set's
  // timeout) for all of it, as at shutdown.
  void release_device_work(bool all);
  void trace_batch(const std::vector<Pending*>& items, const char* phase, Clock::time_point begin,
                   size_t bytes);
  void complete(const std::vector<Pending*>& items, std::exception_ptr e);
  void fail_all(std::exception_ptr e);
  // Switches opt and the communicator to `t` (engine thread, at the agreed point).
  void apply(const Tunables& t);
};

}  // namespace engine
}  // namespace tessera
