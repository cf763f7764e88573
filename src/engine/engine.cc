#include "engine/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <thread>

#include "comm/collectives.h"
#include "comm/communicator.h"
#include "common/activity.h"
#include "common/error.h"
#include "engine/process_set.h"
#include "gpu/device.h"

namespace tessera {
namespace engine {
Engine::Engine(comm::Communicator& c) : Engine(c, options_for(c.settings())) {}

Engine::Engine(comm::Communicator& c, const EngineOptions& options)
    : options_(options), base_(c.dup()) {
  TESSERA_CHECK(options.tunables.cycle_time_ms >= 0, "cycle time must be >= 0 ms, got ",
                options.tunables.cycle_time_ms);
  sets_.push_back(std::make_unique<Impl>(c, options));
  removed_.push_back(false);
  members_.emplace_back();
  for (int r = 0; r < base_->size(); ++r) members_.back().push_back(r);
  if (!options.timeline.empty() && sets_[0]->comm->rank() == 0) {
    sets_[0]->timeline.start(options.timeline);
  }
  sets_[0]->start();
  activity_id_ = activity::add_reporter([this] { return describe_in_flight(); });
}

std::string Engine::describe_in_flight() const {
  // Called on the liveness thread while this rank ends: never wait long for a lock.
  auto try_lock = [](std::mutex& m) {
    for (int i = 0; i < 50; ++i) {
      if (m.try_lock()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  };
  if (!try_lock(sets_mu_)) return "engine: busy (its state could not be read)";
  std::lock_guard<std::mutex> sets_lock(sets_mu_, std::adopt_lock);
  std::vector<std::string> names;
  size_t total = 0;
  for (const auto& set : sets_) {
    if (!set || !try_lock(set->mu)) continue;
    std::lock_guard<std::mutex> lock(set->mu, std::adopt_lock);
    total += set->names_in_flight.size();
    for (const auto& kv : set->names_in_flight) {
      if (names.size() < 6) names.push_back(kv.first);
    }
  }
  if (total == 0) return "";
  std::string out = "engine: " + std::to_string(total) +
                    (total == 1 ? " collective" : " collectives") + " in flight (";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  if (total > names.size()) out += ", ... " + std::to_string(total - names.size()) + " more";
  return out + ")";
}

Engine::Impl& Engine::set_for(int id) const {
  std::lock_guard<std::mutex> lock(sets_mu_);
  TESSERA_CHECK(id >= 0 && static_cast<size_t>(id) < sets_.size(), "process set ", id,
                " does not exist; add it with add_process_set (set 0 is every rank)");
  TESSERA_CHECK(!removed_[static_cast<size_t>(id)], "process set ", id,
                " was removed (remove_process_set)");
  TESSERA_CHECK(sets_[static_cast<size_t>(id)] != nullptr, "rank ", base_->rank(),
                " is not a member of process set ", id);
  return *sets_[static_cast<size_t>(id)];
}

int Engine::process_set_rank(int id) const { return set_for(id).comm->rank(); }
int Engine::process_set_size(int id) const { return set_for(id).comm->size(); }

std::vector<int> Engine::process_set_ranks(int id) const {
  std::lock_guard<std::mutex> lock(sets_mu_);
  const size_t i = static_cast<size_t>(id);
  TESSERA_CHECK(id >= 0 && i < members_.size() && !removed_[i], "process set ", id,
                " does not exist or was removed");
  return members_[i];
}

bool Engine::in_process_set(int id) const {
  std::lock_guard<std::mutex> lock(sets_mu_);
  const size_t i = static_cast<size_t>(id);
  return id >= 0 && i < sets_.size() && !removed_[i] && sets_[i] != nullptr;
}

void Engine::remove_process_set(int id) {
  TESSERA_CHECK(id != 0, "process set 0 (every rank) cannot be removed");
  std::unique_ptr<Impl> set;
  {
    std::lock_guard<std::mutex> lock(sets_mu_);
    const size_t i = static_cast<size_t>(id);
    TESSERA_CHECK(id > 0 && i < sets_.size() && !removed_[i], "process set ", id,
                  " does not exist or was removed already");
    set = std::move(sets_[i]);
    removed_[i] = true;
  }
  if (!set) return;  // this rank was no member
  set->request_shutdown("process set " + std::to_string(id) + " was removed");
  if (set->thread.joinable()) set->thread.join();
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
  removed_.push_back(false);
  members_.push_back(ranks);
  if (member) {
    auto impl = std::make_unique<Impl>(*sub, options_);
    impl->set_id = id;
    impl->dev.device = device_;
    impl->start();
    sets_.push_back(std::move(impl));
  } else {
    sets_.push_back(nullptr);
  }
  return id;
}

void Engine::start_timeline(const std::string& path) { set_for(0).timeline.start(path); }
void Engine::stop_timeline() { set_for(0).timeline.stop(); }
bool Engine::tracing() const { return set_for(0).timeline.active(); }
void Engine::trace(const std::string& row, const std::string& name,
                   std::chrono::steady_clock::time_point begin,
                   std::chrono::steady_clock::time_point end) {
  Timeline& t = set_for(0).timeline;
  if (t.active()) t.event(row, name, begin, end);
}

Engine::~Engine() {
  activity::remove_reporter(activity_id_);
  try {
    shutdown("the Engine was destroyed on rank " + std::to_string(rank()));
  } catch (...) {
  }
  for (auto& set : sets_) {
    if (set && set->thread.joinable()) set->thread.join();
  }
}

void Engine::set_device(gpu::Device& device) {
  std::lock_guard<std::mutex> lock(sets_mu_);
  TESSERA_CHECK(device_ == nullptr || device_ == &device, "this rank's engine already uses ",
                device_ ? device_->name() : "", "; a rank keeps one device (asked for ",
                device.name(), ")");
  device_ = &device;
  for (auto& set : sets_) {
    if (!set) continue;
    std::lock_guard<std::mutex> set_lock(set->mu);
    set->dev.device = &device;
  }
}

// Host buffers (no device, or a CPU one) or this rank's device; sets spec.device.
void Engine::resolve_device(Request& r) const {
  if (r.device != nullptr && r.device->type() == gpu::DeviceType::kCpu) r.device = nullptr;
  r.spec.device = r.device ? r.device->type() : gpu::DeviceType::kCpu;
  if (r.device == nullptr) return;
  std::lock_guard<std::mutex> lock(sets_mu_);
  TESSERA_CHECK(device_ != nullptr, "'", r.spec.name, "' is on ", r.device->name(),
                " but this rank's engine has no device: call set_device first (host tensors "
                "need none)");
  TESSERA_CHECK(r.device == device_, "'", r.spec.name, "' is on ", r.device->name(),
                " but this rank's engine uses ", device_->name(),
                "; each rank moves tensors of its one device (or host tensors)");
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
    total.allreduce_bytes += set->stats.allreduce_bytes;
  }
  return total;
}

Tunables Engine::tunables() const {
  Impl& set = set_for(0);
  std::lock_guard<std::mutex> lock(set.mu);
  return set.current;
}

namespace {

// set_tunables' broadcast: the JSON text in a fixed-size buffer, so that every rank's request has
// the same shape before it knows rank 0's values.
constexpr size_t kTunablesBytes = 1024;

std::vector<char> encode_tunables(const Tunables& t) {
  const std::string text = to_json(t);
  TESSERA_CHECK(text.size() < kTunablesBytes, "set_tunables: the settings are too long (",
                text.size(), " bytes of JSON; at most ", kTunablesBytes - 1, ")");
  std::vector<char> buf(kTunablesBytes, '\0');
  std::copy(text.begin(), text.end(), buf.begin());
  return buf;
}

}  // namespace

Tunables decode_tunables(const char* buf) {
  return tunables_from_json(std::string(buf, strnlen(buf, kTunablesBytes)));
}

void Engine::set_tunables(const Tunables& t) {
  // Checked on every rank before anything is sent, so that a bad value fails everywhere alike
  // rather than only on the rank whose engine thread would parse it.
  TESSERA_CHECK(t.cycle_time_ms >= 0, "set_tunables: cycle time must be >= 0 ms, got ",
                t.cycle_time_ms);
  TESSERA_CHECK(t.colors >= comm::kColors.lo && t.colors <= comm::kColors.hi,
                "set_tunables: colors must be from ", comm::kColors.lo, " to ", comm::kColors.hi,
                ", got ", t.colors);
  TESSERA_CHECK(
      t.segment_bytes >= comm::kSegmentBytes.lo && t.segment_bytes <= comm::kSegmentBytes.hi,
      "set_tunables: segment bytes must be from ", comm::kSegmentBytes.lo, " to ",
      comm::kSegmentBytes.hi, ", got ", t.segment_bytes);
  comm::parse_override(t.allreduce);
  std::vector<char> buf = encode_tunables(t);
  if (rank() != 0) std::fill(buf.begin(), buf.end(), '\0');
  Request r;
  r.spec.name = "tessera.tunables." + std::to_string(tunables_calls_++);
  r.spec.op = OpType::kBroadcast;
  r.spec.dtype = DataType::kUInt8;
  r.spec.shape = {static_cast<int64_t>(buf.size())};
  r.spec.root = 0;
  r.input = buf.data();
  r.output = buf.data();
  std::vector<Request> one;
  one.push_back(std::move(r));
  Handle h =
      enqueue_group_impl(std::move(one), /*as_group=*/false, /*carries_tunables=*/true).front();
  h.wait(options_.timeout_s);
}

std::vector<Engine::CycleTime> Engine::cycle_log() const {
  Impl& set = set_for(0);
  std::lock_guard<std::mutex> lock(set.mu);
  std::vector<CycleTime> log(set.cycle_log.size());
  // The ring holds cycle i at i % kCycleLogSize; the oldest entry has the lowest index.
  for (const CycleTime& c : set.cycle_log) log[c.index % log.size()] = c;
  std::rotate(
      log.begin(),
      std::min_element(log.begin(), log.end(),
                       [](const CycleTime& a, const CycleTime& b) { return a.index < b.index; }),
      log.end());
  return log;
}

Handle Engine::enqueue(Request request) {
  std::vector<Request> one;
  one.push_back(std::move(request));
  return enqueue_group_impl(std::move(one), /*as_group=*/false).front();
}

namespace {

// Horovod's limits on Adasum for CPU tensors (horovod/torch/mpi_ops.py): an allreduce, on a
// power-of-two number of ranks. Device tensors are refused, saying what to do instead: the
// device path has no Adasum kernels (docs/python.md).
void check_adasum(const Request& r, int n) {
  const TensorSpec& s = r.spec;
  TESSERA_CHECK(s.op == OpType::kAllreduce, "'", s.name, "': Adasum is an allreduce op, not a ",
                op_type_name(s.op), " one");
  TESSERA_CHECK(n > 0 && (n & (n - 1)) == 0, "'", s.name,
                "': Adasum needs a power-of-two number of ranks (as Horovod's); the set has ", n);
  TESSERA_CHECK(s.device == gpu::DeviceType::kCpu, "'", s.name,
                "': Adasum takes CPU tensors (GPU tensors: move them to the CPU, or use Average)");
}

// Throws InvalidArgument naming the tensor when `r` cannot run on a set of `n` ranks.
void check_request(const Request& r, int n) {
  const TensorSpec& s = r.spec;
  TESSERA_CHECK(!s.name.empty(), "a collective needs a non-empty name");
  TESSERA_CHECK((s.op == OpType::kJoin) == (s.name == kJoinName), "'", s.name, "': the name '",
                kJoinName, "' is join()'s and join() uses no other");
  const size_t elements = s.elements();
  const bool needs_input = s.op != OpType::kBroadcast;
  TESSERA_CHECK(!needs_input || r.input != nullptr || elements == 0, "'", s.name,
                "': the input buffer is null but the tensor has ", elements, " elements");
  const bool needs_output = s.op != OpType::kAllgather;
  TESSERA_CHECK(!needs_output || r.output != nullptr || elements == 0, "'", s.name,
                "': the output buffer is null but the tensor has ", elements, " elements");
  // Average and scale factors on integer tensors are Horovod's: the sum scaled in double and
  // truncated toward zero (common/reduce.h), so only the bitwise ops are checked here.
  if ((s.op == OpType::kAllreduce || s.op == OpType::kReduceScatter) &&
      s.reduce_op != ReduceOp::kAverage) {
    check_op_supported(s.dtype, s.reduce_op);
  }
  if (s.reduce_op == ReduceOp::kAdasum) check_adasum(r, n);
  TESSERA_CHECK(std::isfinite(s.prescale) && std::isfinite(s.postscale), "'", s.name,
                "': scale factors must be finite numbers, got ", s.prescale, " and ", s.postscale);
  if (s.op == OpType::kReduceScatter || s.op == OpType::kAlltoall) {
    TESSERA_CHECK(!s.shape.empty() && s.shape[0] % n == 0, "'", s.name, "': ", op_type_name(s.op),
                  " needs a first dimension divisible by the ", n, " ranks");
  }
  if (s.op == OpType::kBroadcast) {
    TESSERA_CHECK(s.root >= 0 && s.root < n, "'", s.name, "': broadcast root ", s.root,
                  " is not a rank; accepted: 0 to ", n - 1);
  }
}

}  // namespace

std::vector<Handle> Engine::enqueue_group(std::vector<Request> requests) {
  return enqueue_group_impl(std::move(requests), /*as_group=*/true);
}

std::vector<Handle> Engine::enqueue_group_impl(std::vector<Request> requests, bool as_group,
                                               bool carries_tunables) {
  TESSERA_CHECK(!requests.empty(), "enqueue_group needs at least one request");
  const int set = requests.front().spec.process_set;
  for (const Request& r : requests) {
    TESSERA_CHECK(r.spec.process_set == set, "a group's members must share one process set; '",
                  r.spec.name, "' is in set ", r.spec.process_set, ", not ", set);
  }
  Impl& m = set_for(set);
  // Validate everything before enqueuing anything: a bad request leaves no trace.
  std::vector<std::string> names;
  for (Request& r : requests) {
    resolve_device(r);
    check_request(r, m.comm->size());
    names.push_back(r.spec.name);
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
      p.enqueued = Impl::Clock::now();
      p.carries_tunables = carries_tunables;
      m.names_in_flight[p.req.spec.name] = 1;
      handles.emplace_back(p.handle);
      m.queue.push_back(std::move(p));
    }
  }
  m.cv.notify_all();
  return handles;
}

void Engine::refuse(const std::string& name, int process_set, const std::string& reason) noexcept {
  // The reason travels to every rank: a few lines are enough to say what was wrong.
  constexpr size_t kMaxReason = 2000;
  try {
    if (name.empty() || !in_process_set(process_set)) return;
    Impl& m = set_for(process_set);
    Impl::Pending p;
    p.req.spec.name = name;
    p.req.spec.process_set = process_set;
    p.req.spec.refusal =
        reason.empty() ? std::string("no reason given") : reason.substr(0, kMaxReason);
    p.handle = std::make_shared<HandleState>();  // nobody waits on it; complete() finishes it
    p.handle->name = name;
    p.enqueued = Impl::Clock::now();
    {
      std::lock_guard<std::mutex> lock(m.mu);
      if (m.shutdown_requested || m.stopped || m.names_in_flight.count(name) != 0) return;
      m.names_in_flight[name] = 1;
      m.queue.push_back(std::move(p));
    }
    m.cv.notify_all();
  } catch (...) {
    // Refusing is already an error path; the caller raises its own error.
  }
}

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

Handle Engine::join(int process_set) {
  Request r = make_request(kJoinName, OpType::kJoin, DataType::kInt32, {0}, nullptr, nullptr);
  r.spec.process_set = process_set;
  return enqueue(std::move(r));
}

Handle Engine::enqueue_alltoall(const std::string& name, const void* input, void* output,
                                DataType dtype, std::vector<int64_t> shape) {
  return enqueue(make_request(name, OpType::kAlltoall, dtype, std::move(shape), input, output));
}

}  // namespace engine
}  // namespace tessera
