// Engine: named asynchronous collectives negotiated in the background (Horovod's design).
//
// Any thread enqueues collectives by name and gets a Handle. The engine thread wakes every
// cycle and, with every other rank, agrees which named tensors every rank has enqueued:
//   - tensors negotiated before are in the response cache: one bitwise-AND allreduce of a bit
//     vector (a bit per cache entry, plus status bits) per cycle says which are ready everywhere;
//   - new, changed or stalled tensors go to the coordinator round: every rank's pending specs
//     are gathered and every rank runs the same coordinator logic on the same data, so they
//     agree without a second message; mismatches (name, op, dtype, shape, root, reduce op,
//     scale, group) become errors on every rank naming the tensor, the field and the ranks.
// Ready tensors are fused (plan_fusion) and reduced with comm's selected algorithm.
//
// The engine owns no static state: two engines over different communicators can coexist.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/dtype.h"
#include "engine/handle.h"
#include "engine/options.h"
#include "engine/tensor_spec.h"

namespace tessera {
namespace comm {
class Communicator;
}
namespace gpu {
class Device;
class Event;
}  // namespace gpu
namespace engine {

// One collective to enqueue. Buffers must stay valid until the handle is done.
struct Request {
  TensorSpec spec;
  const void* input = nullptr;
  void* output = nullptr;  // allreduce, reduce-scatter, alltoall: caller's; broadcast: in place
  // Device tensors: the device the buffers are on (the engine's, set_device; nullptr or a CPU
  // device: host buffers). The engine sets spec.device from it.
  gpu::Device* device = nullptr;
  // The producer's readiness: an event recorded on its stream after the work that writes the
  // buffers (nullptr: ready now). The engine's stream waits on it; the host never does.
  std::shared_ptr<gpu::Event> ready;
  // Owners of the buffers' memory, held until the device work on them has run (the caller may
  // drop its own references once enqueued).
  std::vector<std::shared_ptr<void>> keep_alive;
  // An allgather's device result, from the front end's allocator: torch's caching allocator on
  // the caller's stream, so that freeing it never synchronises the whole device as cudaFree
  // does. `ready`, recorded on the caller's stream when the memory is handed out, is what the
  // engine's stream waits on before writing it. Unset: the device's own allocate.
  struct ResultBuffer {
    std::shared_ptr<void> memory;
    std::shared_ptr<gpu::Event> ready;
  };
  std::function<ResultBuffer(size_t bytes)> allocate_result;
};

// A host request: the spec's name, op, dtype and shape and the two buffers.
Request make_request(const std::string& name, OpType op, DataType dtype, std::vector<int64_t> shape,
                     const void* input, void* output);

class Engine {
 public:
  // Collective over `comm` (the engine duplicates it for its own messages). Without options: the
  // declared defaults, with `comm`'s algorithm settings and timeout (options_for).
  explicit Engine(comm::Communicator& comm);
  Engine(comm::Communicator& comm, const EngineOptions& options);
  // Shuts down (agreed with the other ranks) and joins the thread. Never throws.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  int rank() const;
  int size() const;

  // This rank's device for device tensors (a GPU per process, as with NCCL or Horovod): set it
  // before enqueuing the first, and keep it; it must outlive the engine. Each process set gets
  // its own stream on it, and the collectives' device state (staging, NCCL) lazily.
  void set_device(gpu::Device& device);

  Handle enqueue_allreduce(const std::string& name, const void* input, void* output, DataType dtype,
                           std::vector<int64_t> shape, ReduceOp op = ReduceOp::kAverage,
                           double prescale = 1.0, double postscale = 1.0);
  // Output is in the handle (result()); ranks may differ in the first dimension.
  Handle enqueue_allgather(const std::string& name, const void* input, DataType dtype,
                           std::vector<int64_t> shape);
  Handle enqueue_broadcast(const std::string& name, void* buffer, DataType dtype,
                           std::vector<int64_t> shape, int root);
  // The first dimension must divide by the number of ranks; output holds 1/size of it.
  Handle enqueue_reduce_scatter(const std::string& name, const void* input, void* output,
                                DataType dtype, std::vector<int64_t> shape,
                                ReduceOp op = ReduceOp::kSum);
  // The first dimension must divide by the number of ranks; block j goes to rank j.
  Handle enqueue_alltoall(const std::string& name, const void* input, void* output, DataType dtype,
                          std::vector<int64_t> shape);
  // This rank has no more data (uneven shards): until every rank of the set has joined, it takes
  // part in the other ranks' allreduces with the operation's identity (zeros for a sum or an
  // average), and averages divide by the ranks that did not join. Any other collective while a
  // rank has joined fails on every rank, naming it. The handle completes when every rank has
  // joined (after which the set runs as before). Horovod's hvd.join, DDP's Join.
  Handle join(int process_set = 0);
  // Enqueues all at once as one group (all in one process set): released only when every member is
  // ready everywhere, and fused together unless they exceed the fusion threshold.
  std::vector<Handle> enqueue_group(std::vector<Request> requests);
  Handle enqueue(Request request);

  // This rank refuses the collective `name` of set `process_set` (its arguments failed a local
  // check, `reason`): the ranks that enqueued `name` fail it within a cycle, naming this rank
  // and the reason, and the engine goes on. Does nothing when `name` is in flight here (a
  // duplicate: the first stays), the set is not this rank's, or the engine is shut down.
  // Never throws.
  void refuse(const std::string& name, int process_set, const std::string& reason) noexcept;

  // Asks every rank to shut down: pending handles on every rank fail with "shut down because
  // <reason> (rank R)". Returns at once; later enqueues throw.
  void shutdown(const std::string& reason);
  bool is_shut_down() const;

  struct Stats {
    uint64_t cycles = 0;
    uint64_t coordinator_rounds = 0;
    uint64_t cache_hits = 0;
    uint64_t tensors_done = 0;
    double control_seconds = 0;      // wall time in negotiation (not in data movement)
    double control_cpu_seconds = 0;  // the engine thread's CPU time in negotiation: the work
                                     // itself, without the time spent waiting for other ranks
    double data_seconds = 0;
    uint64_t allreduce_bytes = 0;  // bytes of every allreduced tensor (the autotuner's score)
  };
  Stats stats() const;

  // Process set 0's current tunables. The cache is on when its capacity is > 0.
  Tunables tunables() const;
  // Collective over every rank of the engine (in the same order as its other collectives): rank
  // 0's `t` becomes every rank's, and every rank's engine thread switches all of process set
  // 0's settings at the same point of the same cycle (just after the agreed broadcast that
  // carries them), so no two ranks ever fuse, cache or reduce the same tensors differently.
  // Returns once this rank has switched. Turning the cache off or on empties it (every tensor
  // is negotiated once more). Throws InvalidArgument for a bad allreduce range text.
  void set_tunables(const Tunables& t);

  // When a cycle of process set 0 began on this rank and when its negotiation ended (just
  // before data movement), on the steady clock in seconds. Cycles run in lockstep, so `index`
  // names the same cycle on every rank: on one node (one clock) the bench takes the negotiation
  // cost of a cycle from the last rank's arrival, which separates it from arrival skew.
  struct CycleTime {
    uint64_t index = 0;
    double start_s = 0;
    double negotiated_s = 0;
    bool idle = false;   // every rank voted that it had nothing pending
    double wait_ms = 0;  // the wait chosen before the next cycle (next_wait_ms)
  };
  static constexpr size_t kCycleLogSize = 4096;
  // The last kCycleLogSize cycles, oldest first.
  std::vector<CycleTime> cycle_log() const;

  // Process sets: collectives among a subset of the ranks, negotiated independently of the
  // other sets (each set has its own communicator, cache, coordinator table and thread, so a
  // stalled or long collective in one set never holds back another). Collective over all
  // ranks of the engine, called with the same list in the same order everywhere (checked);
  // returns the set's id for Request::spec.process_set. Set 0 is every rank.
  int add_process_set(std::vector<int> ranks);
  // Stops set `id` (every member calls it; its collectives still in flight fail naming the
  // removal) and frees its communicator and thread. Later use of the id is an error that says
  // it was removed. Set 0 cannot be removed.
  void remove_process_set(int id);
  // This rank's rank within set `id`, and the set's size. Throw InvalidArgument when the set
  // does not exist, was removed, or does not include this rank.
  int process_set_rank(int id) const;
  int process_set_size(int id) const;
  // The set's members as ranks of the whole engine, ascending (a member's rank in the set is
  // its index here). Throws InvalidArgument for an unknown or removed id; works on non-members.
  std::vector<int> process_set_ranks(int id) const;
  // Whether this rank belongs to set `id` (false for a removed or unknown id).
  bool in_process_set(int id) const;

  // Starts / stops the Chrome trace of this rank's engine (EngineOptions::timeline starts it on
  // rank 0 at construction). tracing(): whether this rank writes one now. start throws
  // InvalidArgument if the file cannot be written.
  void start_timeline(const std::string& path);
  void stop_timeline();
  bool tracing() const;
  // Adds a span of the caller's own (for example the trainer's FORWARD and BACKWARD) to the
  // timeline on its row `row`, so collectives can be seen against it. No-op while not tracing.
  void trace(const std::string& row, const std::string& name,
             std::chrono::steady_clock::time_point begin,
             std::chrono::steady_clock::time_point end);

 private:
  std::vector<Handle> enqueue_group_impl(std::vector<Request> requests, bool as_group,
                                         bool carries_tunables = false);

  void resolve_device(Request& r) const;

  struct Impl;  // one process set: its communicator, negotiation state and thread
  Impl& set_for(int id) const;

  EngineOptions options_;
  std::unique_ptr<comm::Communicator> base_;  // the user thread's, for creating sets
  mutable std::mutex sets_mu_;
  std::vector<std::unique_ptr<Impl>> sets_;  // by id; nullptr where this rank is no member
  std::vector<bool> removed_;                // by id: remove_process_set was called
  std::vector<std::vector<int>> members_;    // by id: the set's ranks, ascending
  gpu::Device* device_ = nullptr;            // set_device's; sets made later get it too
  uint64_t tunables_calls_ = 0;              // names each set_tunables broadcast
  int activity_id_ = -1;                     // the reporter of in-flight work (common/activity.h)

  // "engine: 3 collectives in flight: a, b, c" without blocking ("" when none).
  std::string describe_in_flight() const;
};

}  // namespace engine
}  // namespace tessera
