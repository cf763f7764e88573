#include "engine/engine.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <optional>

#include "comm/collectives.h"
#include "comm/communicator.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/reduce.h"
#include "engine/fusion.h"
#include "engine/response_cache.h"
#include "engine/timeline.h"
#include "engine/wire.h"

namespace tessera {
namespace engine {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// CPU time of the calling thread: what negotiation costs, excluding time blocked or yielded
// while waiting for other ranks.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Status bytes in front of the cache bytes of the per-cycle AND-allreduce. Each is 1 when all
// is quiet on a rank, so the AND (a min over 0/1 bytes) is 0 when any rank needs attention.
constexpr size_t kAlive = 0;          // 0: some rank asks for shutdown
constexpr size_t kNoRoundNeeded = 1;  // 0: some rank has work for the coordinator
constexpr size_t kStatusBytes = 2;

std::string join_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

}  // namespace

EngineOptions EngineOptions::from_knobs(const Knobs& k) {
  EngineOptions o;
  o.cycle_time_ms = k.cycle_time_ms;
  o.fusion_threshold = k.fusion_threshold;
  o.cache_capacity = k.cache_capacity;
  o.stall_check_s = k.stall_check_s;
  o.stall_shutdown_s = k.stall_shutdown_s;
  o.timeline = k.timeline;
  return o;
}

struct Engine::Impl {
  enum class State { kNew, kCached, kSent };
  struct Pending {
    Request req;
    std::shared_ptr<HandleState> handle;
    Clock::time_point enqueued;
    State state = State::kNew;
    int bit = -1;
    Clock::time_point agreed;
    std::string negotiate_args = "{}";  // for the timeline
  };
  // The coordinator's table, identical on every rank: who has sent which spec.
  struct Entry {
    std::vector<std::optional<TensorSpec>> by_rank;
    std::vector<uint64_t> cycle_by_rank;  // the cycle in which each rank's spec arrived
    int count = 0;
    Clock::time_point first_seen;
    bool reported = false;
  };
  struct Ready {
    std::string name;
    std::string error;  // empty: run it
  };

  Impl(comm::Communicator& c, const EngineOptions& o)
      : comm(c.dup()), opt(o), cache(o.cache_capacity) {}

  std::unique_ptr<comm::Communicator> comm;
  EngineOptions opt;
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
  std::thread thread;

  // Engine thread only.
  std::map<std::string, Pending> pending;
  std::map<std::string, Entry> table;
  std::vector<std::string> table_order;
  std::map<int, std::vector<std::string>> held_groups;  // agreed members waiting for the rest
  std::vector<char> fusion;
  uint64_t cycle_index = 0;  // identical on every rank: cycles run in lockstep
  Timeline timeline;
  Clock::time_point last_flush;

  int set_id = 0;

  void start();
  void request_shutdown(const std::string& reason);
  void run();
  bool cycle();
  void execute(const std::vector<Ready>& ready);
  void run_batch(const std::vector<Pending*>& items);
  void complete(Pending& p, std::exception_ptr e);
  void fail_all(std::exception_ptr e);
};

Engine::Engine(comm::Communicator& c, const EngineOptions& options)
    : options_(options), base_(c.dup()) {
  TESSERA_CHECK(options.cycle_time_ms >= 0, "cycle time must be >= 0 ms, got ",
                options.cycle_time_ms);
  sets_.push_back(std::make_unique<Impl>(c, options));
  if (!options.timeline.empty() && sets_[0]->comm->rank() == 0) {
    sets_[0]->timeline.start(options.timeline);
  }
  sets_[0]->start();
}

void Engine::Impl::start() {
  thread = std::thread([this] { run(); });
}

void Engine::Impl::request_shutdown(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!shutdown_requested) {
      shutdown_requested = true;
      shutdown_reason = reason;
    }
  }
  cv.notify_all();
}

Engine::Impl& Engine::set_for(int id) const {
  std::lock_guard<std::mutex> lock(sets_mu_);
  TESSERA_CHECK(id >= 0 && static_cast<size_t>(id) < sets_.size(), "process set ", id,
                " does not exist; add it with add_process_set (set 0 is every rank)");
  TESSERA_CHECK(sets_[static_cast<size_t>(id)] != nullptr, "rank ", base_->rank(),
                " is not a member of process set ", id);
  return *sets_[static_cast<size_t>(id)];
}

int Engine::add_process_set(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  const int n = base_->size();
  TESSERA_CHECK(!ranks.empty(), "a process set needs at least one rank");
  TESSERA_CHECK(ranks.front() >= 0 && ranks.back() < n, "process set ranks must be in 0..", n - 1);
  TESSERA_CHECK(std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end(),
                "a process set lists a rank twice");
  // Every rank must describe the same set: compare a digest of the list across ranks.
  std::string all;
  for (int r : ranks) all += std::to_string(r) + ",";
  const int64_t digest = static_cast<int64_t>(std::hash<std::string>{}(all)&0x7fffffffffff);
  int64_t lo = digest, hi = digest;
  comm::AllreduceOptions mn, mx;
  mn.op = ReduceOp::kMin;
  mx.op = ReduceOp::kMax;
  comm::allreduce(*base_, &lo, &lo, 1, DataType::kInt64, mn);
  comm::allreduce(*base_, &hi, &hi, 1, DataType::kInt64, mx);
  TESSERA_CHECK(lo == hi,
                "add_process_set was called with different rank lists on different "
                "ranks (this rank: ",
                all, "); every rank must pass the same list");
  const bool member = std::binary_search(ranks.begin(), ranks.end(), base_->rank());
  std::unique_ptr<comm::Communicator> sub = base_->split(member ? 0 : -1, base_->rank());
  std::lock_guard<std::mutex> lock(sets_mu_);
  const int id = static_cast<int>(sets_.size());
  if (member) {
    auto impl = std::make_unique<Impl>(*sub, options_);
    impl->set_id = id;
    impl->start();
    sets_.push_back(std::move(impl));
  } else {
    sets_.push_back(nullptr);
  }
  return id;
}

void Engine::start_timeline(const std::string& path) { set_for(0).timeline.start(path); }
void Engine::stop_timeline() { set_for(0).timeline.stop(); }

Engine::~Engine() {
  try {
    shutdown("the Engine was destroyed on rank " + std::to_string(rank()));
  } catch (...) {
  }
  for (auto& set : sets_) {
    if (set && set->thread.joinable()) set->thread.join();
  }
}

int Engine::rank() const { return base_->rank(); }
int Engine::size() const { return base_->size(); }

void Engine::shutdown(const std::string& reason) {
  std::lock_guard<std::mutex> lock(sets_mu_);
  for (auto& set : sets_) {
    if (set) set->request_shutdown(reason);
  }
}

bool Engine::is_shut_down() const { return set_for(0).stopped.load(); }

Engine::Stats Engine::stats() const {
  Stats total;
  std::lock_guard<std::mutex> lock(sets_mu_);
  for (const auto& set : sets_) {
    if (!set) continue;
    std::lock_guard<std::mutex> set_lock(set->mu);
    total.cycles += set->stats.cycles;
    total.coordinator_rounds += set->stats.coordinator_rounds;
    total.cache_hits += set->stats.cache_hits;
    total.tensors_done += set->stats.tensors_done;
    total.control_seconds += set->stats.control_seconds;
    total.control_cpu_seconds += set->stats.control_cpu_seconds;
    total.data_seconds += set->stats.data_seconds;
  }
  return total;
}

Handle Engine::enqueue(Request request) {
  std::vector<Request> one;
  one.push_back(std::move(request));
  return enqueue_group_impl(std::move(one), /*as_group=*/false).front();
}

std::vector<Handle> Engine::enqueue_group(std::vector<Request> requests) {
  return enqueue_group_impl(std::move(requests), /*as_group=*/true);
}

std::vector<Handle> Engine::enqueue_group_impl(std::vector<Request> requests, bool as_group) {
  TESSERA_CHECK(!requests.empty(), "enqueue_group needs at least one request");
  const int set = requests.front().spec.process_set;
  for (const Request& r : requests) {
    TESSERA_CHECK(r.spec.process_set == set, "a group's members must share one process set; '",
                  r.spec.name, "' is in set ", r.spec.process_set, ", not ", set);
  }
  Impl& m = set_for(set);
  const int n = m.comm->size();
  // Validate everything before enqueuing anything: a bad request leaves no trace.
  std::vector<std::string> names;
  for (const Request& r : requests) {
    const TensorSpec& s = r.spec;
    TESSERA_CHECK(!s.name.empty(), "a collective needs a non-empty name");
    const size_t elements = s.elements();
    const size_t bytes = s.bytes();
    (void)bytes;
    const bool needs_input = s.op != OpType::kBroadcast;
    TESSERA_CHECK(!needs_input || r.input != nullptr || elements == 0, "'", s.name,
                  "': the input buffer is null but the tensor has ", elements, " elements");
    const bool needs_output = s.op != OpType::kAllgather;
    TESSERA_CHECK(!needs_output || r.output != nullptr || elements == 0, "'", s.name,
                  "': the output buffer is null but the tensor has ", elements, " elements");
    if (s.op == OpType::kAllreduce || s.op == OpType::kReduceScatter) {
      check_op_supported(s.dtype, s.reduce_op);
    }
    TESSERA_CHECK(is_floating(s.dtype) || (s.prescale == 1.0 && s.postscale == 1.0), "'", s.name,
                  "': scale factors need a floating dtype, not ", dtype_name(s.dtype));
    if (s.op == OpType::kReduceScatter || s.op == OpType::kAlltoall) {
      TESSERA_CHECK(!s.shape.empty() && s.shape[0] % n == 0, "'", s.name, "': ", op_type_name(s.op),
                    " needs a first dimension divisible by the ", n, " ranks");
    }
    if (s.op == OpType::kBroadcast) {
      TESSERA_CHECK(s.root >= 0 && s.root < n, "'", s.name, "': broadcast root ", s.root,
                    " is not a rank; accepted: 0 to ", n - 1);
    }
    names.push_back(s.name);
  }
  std::sort(names.begin(), names.end());
  TESSERA_CHECK(std::adjacent_find(names.begin(), names.end()) == names.end(),
                "a group names the same tensor twice");
  // A group's id comes from its members' names, so every rank derives the same id whatever
  // order it enqueues groups in.
  int group = -1;
  if (as_group && requests.size() > 1) {
    std::string all;
    for (const std::string& s : names) all += s + '\0';
    group = static_cast<int>(std::hash<std::string>{}(all)&0x3fffffff);
  }
  std::vector<Handle> handles;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (m.shutdown_requested || m.stopped) {
      throw InvalidArgument("cannot enqueue '" + requests.front().spec.name +
                            "': the engine is shut down (" +
                            (m.final_error.empty() ? m.shutdown_reason : m.final_error) + ")");
    }
    for (const Request& r : requests) {
      TESSERA_CHECK(m.names_in_flight.count(r.spec.name) == 0, "a collective named '", r.spec.name,
                    "' is still in flight on this rank; names must be unique "
                    "until their handle is done");
    }
    for (Request& r : requests) {
      Impl::Pending p;
      p.req = std::move(r);
      if (group >= 0) {
        p.req.spec.group = group;
        p.req.spec.group_size = static_cast<int>(requests.size());
      }
      p.handle = std::make_shared<HandleState>();
      p.handle->name = p.req.spec.name;
      p.enqueued = Clock::now();
      m.names_in_flight[p.req.spec.name] = 1;
      handles.emplace_back(p.handle);
      m.queue.push_back(std::move(p));
    }
  }
  m.cv.notify_all();
  return handles;
}

namespace {

Request make_request(const std::string& name, OpType op, DataType dtype, std::vector<int64_t> shape,
                     const void* input, void* output) {
  Request r;
  r.spec.name = name;
  r.spec.op = op;
  r.spec.dtype = dtype;
  r.spec.shape = std::move(shape);
  r.input = input;
  r.output = output;
  return r;
}

}  // namespace

Handle Engine::enqueue_allreduce(const std::string& name, const void* input, void* output,
                                 DataType dtype, std::vector<int64_t> shape, ReduceOp op,
                                 double prescale, double postscale) {
  Request r = make_request(name, OpType::kAllreduce, dtype, std::move(shape), input, output);
  r.spec.reduce_op = op;
  r.spec.prescale = prescale;
  r.spec.postscale = postscale;
  return enqueue(std::move(r));
}

Handle Engine::enqueue_allgather(const std::string& name, const void* input, DataType dtype,
                                 std::vector<int64_t> shape) {
  return enqueue(make_request(name, OpType::kAllgather, dtype, std::move(shape), input, nullptr));
}

Handle Engine::enqueue_broadcast(const std::string& name, void* buffer, DataType dtype,
                                 std::vector<int64_t> shape, int root) {
  Request r = make_request(name, OpType::kBroadcast, dtype, std::move(shape), buffer, buffer);
  r.spec.root = root;
  return enqueue(std::move(r));
}

Handle Engine::enqueue_reduce_scatter(const std::string& name, const void* input, void* output,
                                      DataType dtype, std::vector<int64_t> shape, ReduceOp op) {
  Request r = make_request(name, OpType::kReduceScatter, dtype, std::move(shape), input, output);
  r.spec.reduce_op = op;
  return enqueue(std::move(r));
}

Handle Engine::enqueue_alltoall(const std::string& name, const void* input, void* output,
                                DataType dtype, std::vector<int64_t> shape) {
  return enqueue(make_request(name, OpType::kAlltoall, dtype, std::move(shape), input, output));
}

// ---- the engine thread ----

void Engine::Impl::run() {
  try {
    for (;;) {
      std::deque<Pending> fresh;
      {
        std::unique_lock<std::mutex> lock(mu);
        // An idle engine still joins a cycle every millisecond at least: the other ranks may
        // have work that needs everyone's vote.
        const double wait_ms = opt.cycle_time_ms > 0 ? opt.cycle_time_ms : 1.0;
        const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double, std::milli>(wait_ms));
        cv.wait_until(lock, until, [&] {
          return shutdown_requested || (opt.cycle_time_ms == 0 && !queue.empty());
        });
        fresh.swap(queue);
      }
      for (Pending& p : fresh) {
        const std::string name = p.req.spec.name;
        pending.emplace(name, std::move(p));
      }
      if (cycle()) break;
    }
  } catch (...) {
    fail_all(std::current_exception());
  }
  stopped = true;
}

bool Engine::Impl::cycle() {
  const auto t0 = Clock::now();
  const double cpu0 = thread_cpu_seconds();
  double data_s = 0;  // time in execute(): data movement, not negotiation
  const int n = comm->size();
  bool want_shutdown;
  std::string my_reason;
  {
    std::lock_guard<std::mutex> lock(mu);
    want_shutdown = shutdown_requested;
    my_reason = shutdown_reason;
  }
  // 1. Classify new requests; cached ones that waited too long fall back to the coordinator
  //    so that the ranks they wait on can be named.
  bool need_round = false;
  for (auto& kv : pending) {
    Pending& p = kv.second;
    if (p.state == State::kNew) {
      const ResponseCache::Lookup l = cache.lookup(p.req.spec);
      if (l.state == ResponseCache::State::kHit) {
        p.state = State::kCached;
        p.bit = l.bit;
      }
    }
    if (p.state == State::kCached && seconds_since(p.enqueued) > opt.stall_check_s) {
      p.state = State::kNew;
    }
    if (p.state != State::kCached) need_round = true;
  }
  // 2. One AND over status bytes and cache bytes.
  const size_t span = cache.bit_span();
  std::vector<uint8_t> votes(kStatusBytes + span, 0);
  votes[kAlive] = want_shutdown ? 0 : 1;
  votes[kNoRoundNeeded] = need_round ? 0 : 1;
  for (const auto& kv : pending) {
    if (kv.second.state == State::kCached)
      votes[kStatusBytes + static_cast<size_t>(kv.second.bit)] = 1;
  }
  comm::AllreduceOptions min;
  min.op = ReduceOp::kMin;
  comm::allreduce(*comm, votes.data(), votes.data(), votes.size(), DataType::kUInt8, min);

  std::vector<Ready> ready;
  uint64_t hits = 0;
  for (size_t b = 0; b < span; ++b) {
    if (votes[kStatusBytes + b] == 0) continue;
    const int bit = static_cast<int>(b);
    const std::string name = cache.spec(bit).name;
    cache.touch(bit);
    pending.at(name).negotiate_args = "{\"path\":\"cache\",\"bit\":" + std::to_string(bit) + "}";
    ready.push_back({name, ""});
    ++hits;
  }
  const bool shutting_down = votes[kAlive] == 0;
  bool round = votes[kNoRoundNeeded] == 0 || shutting_down;
  std::vector<std::pair<int, std::string>> reasons;
  if (round) {
    // 3. Coordinator round: gather every rank's shutdown reason and the specs it has not sent
    //    yet (all pending that did not just pass by cache bits), then run the same coordinator
    //    logic everywhere.
    std::vector<TensorSpec> mine;
    for (auto& kv : pending) {
      Pending& p = kv.second;
      const bool passed =
          p.state == State::kCached && votes[kStatusBytes + static_cast<size_t>(p.bit)];
      if (passed || p.state == State::kSent) continue;
      mine.push_back(p.req.spec);
      p.state = State::kSent;
    }
    const std::string body = encode_specs(mine);
    std::string msg;
    const uint32_t rlen = want_shutdown ? static_cast<uint32_t>(my_reason.size()) : 0;
    msg.append(reinterpret_cast<const char*>(&rlen), 4);
    if (want_shutdown) msg += my_reason;
    msg += body;
    int64_t len = static_cast<int64_t>(msg.size());
    std::vector<int64_t> lens(static_cast<size_t>(n));
    comm::allgather(*comm, &len, lens.data(), 1, DataType::kInt64);
    std::vector<size_t> counts(lens.begin(), lens.end());
    size_t total = 0;
    for (size_t c : counts) total += c;
    std::string all(total, '\0');
    comm::allgatherv(*comm, msg.data(), &all[0], counts, DataType::kUInt8);
    size_t at = 0;
    for (int r = 0; r < n; ++r) {
      const char* m = all.data() + at;
      const size_t size = counts[static_cast<size_t>(r)];
      at += size;
      TESSERA_ASSERT(size >= 4, "short negotiation message from rank ", r);
      uint32_t rl = 0;
      std::memcpy(&rl, m, 4);
      TESSERA_ASSERT(4 + rl <= size, "bad negotiation message from rank ", r);
      if (rl > 0) reasons.emplace_back(r, std::string(m + 4, rl));
      for (TensorSpec& s : decode_specs(m + 4 + rl, size - 4 - rl)) {
        auto it = table.find(s.name);
        if (it == table.end()) {
          Entry e;
          e.by_rank.resize(static_cast<size_t>(n));
          e.cycle_by_rank.assign(static_cast<size_t>(n), 0);
          e.first_seen = Clock::now();
          it = table.emplace(s.name, std::move(e)).first;
          table_order.push_back(s.name);
        }
        if (!it->second.by_rank[static_cast<size_t>(r)]) {
          it->second.by_rank[static_cast<size_t>(r)] = std::move(s);
          it->second.cycle_by_rank[static_cast<size_t>(r)] = cycle_index;
          ++it->second.count;
        }
      }
    }
    // Complete the names every rank has sent, in first-arrival order (the same everywhere).
    std::vector<std::string> still;
    for (const std::string& name : table_order) {
      Entry& e = table.at(name);
      if (e.count < n) {
        still.push_back(name);
        continue;
      }
      const TensorSpec& first = *e.by_rank[0];
      std::string error;
      for (int r = 1; r < n && error.empty(); ++r) {
        const std::string diff = spec_difference(first, *e.by_rank[static_cast<size_t>(r)]);
        if (diff.empty()) continue;
        // Name every rank on each side of the first disagreement.
        std::vector<int> same, other;
        for (int q = 0; q < n; ++q) {
          (spec_difference(first, *e.by_rank[static_cast<size_t>(q)]).empty() ? same : other)
              .push_back(q);
        }
        error = "mismatch in collective '" + name + "': " + diff + " (ranks " + join_ranks(same) +
                " vs ranks " + join_ranks(other) + ")";
      }
      if (error.empty()) {
        // Same order on every rank, so the caches stay identical.
        if (cache.lookup(first).state != ResponseCache::State::kHit) cache.put(first);
      } else {
        const ResponseCache::Lookup l = cache.lookup(first);
        if (l.bit >= 0) cache.erase(l.bit);
      }
      if (timeline.active()) {
        std::string cycles;
        for (uint64_t c : e.cycle_by_rank)
          cycles += (cycles.empty() ? "" : ",") + std::to_string(c);
        pending.at(name).negotiate_args =
            "{\"path\":\"coordinator\",\"ready_cycle_by_rank\":[" + cycles + "]}";
      }
      ready.push_back({name, error});
      table.erase(name);
    }
    table_order.swap(still);
    // Stall inspector: rank 0 names who is missing; past the shutdown time, shut down.
    for (const std::string& name : table_order) {
      Entry& e = table.at(name);
      const double age = seconds_since(e.first_seen);
      if (age < opt.stall_check_s) continue;
      std::vector<int> missing, present;
      for (int q = 0; q < n; ++q)
        (e.by_rank[static_cast<size_t>(q)] ? present : missing).push_back(q);
      const std::string report =
          detail::concat("stall: collective '", name, "' has waited ",
                         static_cast<int>(age * 10) / 10.0, " s; ranks ", join_ranks(present),
                         " enqueued it, ranks ", join_ranks(missing), " have not");
      if (!e.reported && comm->rank() == 0) TESSERA_LOG(kWarning, report);
      e.reported = true;
      if (opt.stall_shutdown_s > 0 && age > opt.stall_shutdown_s) {
        std::lock_guard<std::mutex> lock(mu);
        if (!shutdown_requested) {
          shutdown_requested = true;
          shutdown_reason = report;
        }
      }
    }
  }
  if (shutting_down) {
    std::string why;
    for (const auto& rr : reasons) {
      why += (why.empty() ? "" : "; ") + rr.second + " (rank " + std::to_string(rr.first) + ")";
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      final_error = "shut down because " + why;
    }
    fail_all(std::make_exception_ptr(Error(final_error)));
    return true;
  }
  // 4. Groups wait until every member passed; then run everything in the agreed order.
  const auto agreed = Clock::now();
  std::vector<Ready> runnable;
  for (const Ready& r : ready) {
    Pending& p = pending.at(r.name);
    p.agreed = agreed;
    timeline.event(r.name, "NEGOTIATE", p.enqueued, agreed, p.negotiate_args);
    if (p.req.spec.group < 0 || !r.error.empty()) {
      runnable.push_back(r);
      continue;
    }
    std::vector<std::string>& members = held_groups[p.req.spec.group];
    members.push_back(r.name);
    if (static_cast<int>(members.size()) == p.req.spec.group_size) {
      for (const std::string& m : members) runnable.push_back({m, ""});
      held_groups.erase(p.req.spec.group);
    }
  }
  {
    // Counted before the handles complete, so a caller that waited on them sees them.
    std::lock_guard<std::mutex> lock(mu);
    ++stats.cycles;
    stats.cache_hits += hits;
    if (round) ++stats.coordinator_rounds;
    stats.control_seconds += seconds_since(t0);
    stats.control_cpu_seconds += thread_cpu_seconds() - cpu0;
  }
  ++cycle_index;
  const auto td = Clock::now();
  execute(runnable);
  data_s = seconds_since(td);
  // Flushing re-closes the JSON array; a few times a second is enough for a trace that
  // survives a crash, and keeps file writes off most cycles.
  if (!runnable.empty() && seconds_since(last_flush) > 0.1) {
    timeline.flush();
    last_flush = Clock::now();
  }
  std::lock_guard<std::mutex> lock(mu);
  stats.data_seconds += data_s;
  return false;
}

void Engine::Impl::execute(const std::vector<Ready>& ready) {
  std::vector<Pending*> ok;
  for (const Ready& r : ready) {
    Pending& p = pending.at(r.name);
    if (!r.error.empty()) {
      complete(p, std::make_exception_ptr(InvalidArgument(r.error)));
    } else {
      ok.push_back(&p);
    }
  }
  std::vector<TensorSpec> specs;
  for (Pending* p : ok) specs.push_back(p->req.spec);
  for (const FusionBatch& b : plan_fusion(specs, opt.fusion_threshold)) {
    std::vector<Pending*> items;
    for (size_t i : b.items) items.push_back(ok[i]);
    run_batch(items);
    for (Pending* p : items) complete(*p, nullptr);
  }
}

void Engine::Impl::run_batch(const std::vector<Pending*>& items) {
  const TensorSpec& lead = items.front()->req.spec;
  const int n = comm->size();
  const size_t esize = dtype_size(lead.dtype);
  const auto start = Clock::now();
  for (Pending* p : items) timeline.event(p->req.spec.name, "QUEUE", p->agreed, start);
  // One trace event per tensor of the batch for each phase.
  auto trace = [&](const char* phase, Clock::time_point begin, const std::string& args) {
    if (!timeline.active()) return;
    const auto end = Clock::now();
    for (Pending* p : items) timeline.event(p->req.spec.name, phase, begin, end, args);
  };
  auto collective_args = [&](size_t bytes) {
    std::string a =
        "{\"bytes\":" + std::to_string(bytes) + ",\"tensors\":" + std::to_string(items.size());
    if (lead.op == OpType::kAllreduce) {
      a += std::string(",\"algorithm\":\"") +
           comm::algorithm_name(comm::choose_allreduce(*comm, bytes, comm::Algorithm::kAuto)) +
           "\"";
    }
    return a + "}";
  };
  switch (lead.op) {
    case OpType::kAllreduce: {
      const bool average = lead.reduce_op == ReduceOp::kAverage;
      // Averaging and the post-scale are folded into the copy out of the fusion buffer.
      const double out_factor = lead.postscale * (average ? 1.0 / n : 1.0);
      comm::AllreduceOptions o;
      o.op = average ? ReduceOp::kSum : lead.reduce_op;
      if (items.size() == 1) {
        Request& r = items.front()->req;
        const size_t count = r.spec.elements();
        const void* src = r.input;
        if (lead.prescale != 1.0) {
          scale(lead.dtype, lead.prescale, r.input, r.output, count);
          src = r.output;
        }
        const auto t = Clock::now();
        comm::allreduce(*comm, src, r.output, count, lead.dtype, o);
        trace("ALLREDUCE", t, collective_args(count * esize));
        if (out_factor != 1.0) scale(lead.dtype, out_factor, r.output, r.output, count);
        return;
      }
      size_t total = 0;
      for (Pending* p : items) total += p->req.spec.bytes();
      if (fusion.size() < total) fusion.resize(total);
      auto t = Clock::now();
      size_t off = 0;
      for (Pending* p : items) {
        const size_t bytes = p->req.spec.bytes();
        if (lead.prescale != 1.0) {
          scale(lead.dtype, lead.prescale, p->req.input, fusion.data() + off, bytes / esize);
        } else if (bytes > 0) {
          std::memcpy(fusion.data() + off, p->req.input, bytes);
        }
        off += bytes;
      }
      trace("MEMCPY_IN_FUSION_BUFFER", t, "{}");
      t = Clock::now();
      comm::allreduce(*comm, fusion.data(), fusion.data(), total / esize, lead.dtype, o);
      trace("ALLREDUCE", t, collective_args(total));
      t = Clock::now();
      off = 0;
      for (Pending* p : items) {
        const size_t bytes = p->req.spec.bytes();
        if (out_factor != 1.0) {
          scale(lead.dtype, out_factor, fusion.data() + off, p->req.output, bytes / esize);
        } else if (bytes > 0) {
          std::memcpy(p->req.output, fusion.data() + off, bytes);
        }
        off += bytes;
      }
      trace("MEMCPY_OUT_FUSION_BUFFER", t, "{}");
      return;
    }
    case OpType::kAllgather: {
      Pending& p = *items.front();
      const TensorSpec& s = p.req.spec;
      size_t row = 1;
      for (size_t d = 1; d < s.shape.size(); ++d) row *= static_cast<size_t>(s.shape[d]);
      int64_t mine = s.shape.empty() ? 1 : s.shape[0];
      std::vector<int64_t> rows(static_cast<size_t>(n));
      comm::allgather(*comm, &mine, rows.data(), 1, DataType::kInt64);
      std::vector<size_t> counts;
      int64_t total_rows = 0;
      for (int64_t r : rows) {
        counts.push_back(static_cast<size_t>(r) * row);
        total_rows += r;
      }
      size_t total = 0;
      for (size_t c : counts) total += c;
      p.handle->result.assign(total * esize, 0);
      comm::allgatherv(*comm, p.req.input, p.handle->result.data(), counts, s.dtype);
      trace("ALLGATHER", start, collective_args(total * esize));
      p.handle->result_shape = s.shape.empty() ? std::vector<int64_t>{total_rows} : s.shape;
      p.handle->result_shape[0] = total_rows;
      return;
    }
    case OpType::kBroadcast: {
      const Request& r = items.front()->req;
      comm::broadcast(*comm, r.output, r.spec.elements(), r.spec.dtype, r.spec.root);
      trace("BROADCAST", start, collective_args(r.spec.bytes()));
      return;
    }
    case OpType::kReduceScatter: {
      const Request& r = items.front()->req;
      comm::reduce_scatter(*comm, r.input, r.output, r.spec.elements() / static_cast<size_t>(n),
                           r.spec.dtype, r.spec.reduce_op);
      trace("REDUCE_SCATTER", start, collective_args(r.spec.bytes()));
      return;
    }
    case OpType::kAlltoall: {
      const Request& r = items.front()->req;
      comm::alltoall(*comm, r.input, r.output, r.spec.elements() / static_cast<size_t>(n),
                     r.spec.dtype);
      trace("ALLTOALL", start, collective_args(r.spec.bytes()));
      return;
    }
  }
}

void Engine::Impl::complete(Pending& p, std::exception_ptr e) {
  const std::string name = p.req.spec.name;
  std::shared_ptr<HandleState> h = p.handle;
  pending.erase(name);
  {
    std::lock_guard<std::mutex> lock(mu);
    names_in_flight.erase(name);
    ++stats.tensors_done;
  }
  h->finish(std::move(e));
}

void Engine::Impl::fail_all(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (final_error.empty()) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        final_error = x.what();
      } catch (...) {
        final_error = "unknown error";
      }
    }
    for (Pending& p : queue) pending.emplace(p.req.spec.name, std::move(p));
    queue.clear();
    names_in_flight.clear();
    shutdown_requested = true;
  }
  for (auto& kv : pending) kv.second.handle->finish(e);
  pending.clear();
  stopped = true;
}

}  // namespace engine
}  // namespace tessera
