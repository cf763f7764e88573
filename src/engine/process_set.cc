// The cycle of one process set's engine: vote, coordinator round, groups, fusion, execution.
#include "engine/process_set.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>

#include "comm/collectives.h"
#include "common/agreement.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/reduce.h"
#include "engine/fusion.h"
#include "engine/idle_backoff.h"
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

// Status bits in front of the cache bits of the per-cycle AND-allreduce. Each is 1 when all is
// quiet on a rank, so after the AND it is 0 when any rank needs attention.
constexpr size_t kAlive = 0;          // 0: some rank asks for shutdown
constexpr size_t kNoRoundNeeded = 1;  // 0: some rank has new, changed or stalled work
constexpr size_t kIdle = 2;           // 0: some rank has work pending
constexpr size_t kStatusBits = 3;

// One rank's part of a coordinator round: its shutdown reason ("" if none) and its specs.
struct RankMessage {
  std::string reason;
  std::string specs;  // encode_specs
};

// Every rank's message, by rank: [reason length u32][reason][specs], gathered everywhere.
std::vector<RankMessage> exchange_round(comm::Communicator& comm, const std::string& reason,
                                        const std::string& specs) {
  std::string msg;
  const uint32_t rlen = static_cast<uint32_t>(reason.size());
  msg.append(reinterpret_cast<const char*>(&rlen), 4);
  msg += reason;
  msg += specs;
  const int n = comm.size();
  int64_t len = static_cast<int64_t>(msg.size());
  std::vector<int64_t> lens(static_cast<size_t>(n));
  comm::allgather(comm, &len, lens.data(), 1, DataType::kInt64);
  const std::vector<size_t> counts(lens.begin(), lens.end());
  size_t total = 0;
  for (size_t c : counts) total += c;
  std::string all(total, '\0');
  comm::allgatherv(comm, msg.data(), &all[0], counts, DataType::kUInt8);
  std::vector<RankMessage> out(static_cast<size_t>(n));
  size_t at = 0;
  for (int r = 0; r < n; ++r) {
    const char* m = all.data() + at;
    const size_t size = counts[static_cast<size_t>(r)];
    at += size;
    TESSERA_ASSERT(size >= 4, "short negotiation message from rank ", r);
    uint32_t rl = 0;
    std::memcpy(&rl, m, 4);
    TESSERA_ASSERT(4 + rl <= size, "bad negotiation message from rank ", r);
    out[static_cast<size_t>(r)] = {std::string(m + 4, rl), std::string(m + 4 + rl, size - 4 - rl)};
  }
  return out;
}

}  // namespace

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
// ---- the engine thread ----

void Engine::Impl::run() {
  try {
    for (;;) {
      std::deque<Pending> fresh;
      {
        std::unique_lock<std::mutex> lock(mu);
        // The wait the last cycle chose (next_wait_ms: longer while every rank is idle).
        const double wait_ms = idle_wait_ms;
        const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double, std::milli>(wait_ms));
        cv.wait_until(lock, until, [&] {
          return shutdown_requested || (opt.tunables.cycle_time_ms == 0 && !queue.empty());
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
  release_device_work(/*all=*/true);  // the stream may still read the callers' tensors
  stopped = true;
}

// A cycle: vote; a coordinator round when some rank needs one; shut down if asked; release
// groups whose members all passed; record the cycle; execute what is runnable; flush the trace.
bool Engine::Impl::cycle() {
  const auto t0 = Clock::now();
  const double cpu0 = thread_cpu_seconds();
  bool want_shutdown;
  std::string my_reason;
  {
    std::lock_guard<std::mutex> lock(mu);
    want_shutdown = shutdown_requested;
    my_reason = shutdown_reason;
  }
  Vote v = vote(t0, want_shutdown);
  const uint64_t hits = v.ready.size();
  idle_wait_ms =
      next_wait_ms(v.all_idle, idle_wait_ms, opt.tunables.cycle_time_ms, opt.idle_backoff_ms);
  std::vector<std::pair<int, std::string>> reasons;
  if (v.round) reasons = coordinate(v, want_shutdown, my_reason, &v.ready);
  if (v.shutting_down) {
    finish_shutdown(reasons);
    return true;
  }
  const std::vector<Ready> runnable = release_groups(v.ready);
  record_cycle(t0, cpu0, v, hits);
  const auto td = Clock::now();
  execute(runnable);
  const double data_s = seconds_since(td);
  if (!runnable.empty()) flush_timeline();
  std::lock_guard<std::mutex> lock(mu);
  stats.data_seconds += data_s;
  return false;
}

// Classifies new requests (cached ones that waited too long fall back to the coordinator, so
// that the ranks they wait on can be named), then one bitwise AND over the status bits and the
// cache bits. The cached tensors every rank voted for are ready.
Engine::Impl::Vote Engine::Impl::vote(Clock::time_point now, bool want_shutdown) {
  auto stalled = [&](const Pending& p) {
    return std::chrono::duration<double>(now - p.enqueued).count() > opt.stall_check_s;
  };
  const size_t span = cache.bit_span();
  std::vector<Pending*> by_bit(span, nullptr);  // this rank's cached request for each bit
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
    if (p.state == State::kCached && stalled(p)) p.state = State::kNew;
    if (p.state == State::kCached) {
      by_bit[static_cast<size_t>(p.bit)] = &p;
    } else {
      need_round = true;
    }
  }
  Vote v;
  v.votes = BitVector(kStatusBits + span);
  if (!want_shutdown) v.votes.set(kAlive);
  if (!need_round) v.votes.set(kNoRoundNeeded);
  if (pending.empty() && held_groups.empty()) v.votes.set(kIdle);
  for (size_t b = 0; b < span; ++b) {
    if (by_bit[b]) v.votes.set(kStatusBits + b);
  }
  comm::AllreduceOptions band;
  band.op = ReduceOp::kBitAnd;
  comm::allreduce(*comm, v.votes.words(), v.votes.words(), v.votes.num_words(), DataType::kInt64,
                  band);
  for (size_t b = 0; b < span; ++b) {
    if (!v.votes.test(kStatusBits + b)) continue;
    // Every rank set this bit, so every rank has a request cached under it: this one's.
    Pending* p = by_bit[b];
    TESSERA_ASSERT(p != nullptr, "cache bit ", b, " passed the vote without a request here");
    cache.touch(static_cast<int>(b));
    if (timeline.active()) {  // no per-tensor work unless someone traces
      p->negotiate_args = {{"path", "cache"}, {"bit", b}, {"bytes", p->req.spec.bytes()}};
    }
    v.ready.push_back({p, ""});
  }
  v.all_idle = v.votes.test(kIdle);
  v.shutting_down = !v.votes.test(kAlive);
  v.round = !v.votes.test(kNoRoundNeeded) || v.shutting_down;
  return v;
}

// The coordinator round: gathers every rank's shutdown reason and the specs it has not sent yet
// (all pending that did not just pass by cache bits), then runs the same coordinator logic
// everywhere. Cached requests that did not pass go along too: a rank whose copy of that tensor
// is new, changed or stalled waits for them there. So after a round no request is left under a
// cache bit, and the cache may change (evict, replace, erase) without a request voting for a
// bit that now means another tensor. A request in the coordinator keeps asking for rounds
// (state kSent) until it completes. Returns the shutdown reasons by rank.
std::vector<std::pair<int, std::string>> Engine::Impl::coordinate(const Vote& v, bool want_shutdown,
                                                                  const std::string& my_reason,
                                                                  std::vector<Ready>* ready) {
  std::vector<TensorSpec> mine;
  for (auto& kv : pending) {
    Pending& p = kv.second;
    const bool passed =
        p.state == State::kCached && v.votes.test(kStatusBits + static_cast<size_t>(p.bit));
    if (passed || p.state == State::kSent) continue;
    mine.push_back(p.req.spec);
    p.state = State::kSent;
  }
  const std::string reason = want_shutdown ? my_reason : std::string();
  const std::vector<RankMessage> all = exchange_round(*comm, reason, encode_specs(mine));
  std::vector<std::pair<int, std::string>> reasons;
  for (int r = 0; r < comm->size(); ++r) {
    const RankMessage& m = all[static_cast<size_t>(r)];
    if (!m.reason.empty()) reasons.emplace_back(r, m.reason);
    for (TensorSpec& s : decode_specs(m.specs.data(), m.specs.size())) {
      coordinator.add(r, std::move(s), cycle_index, Clock::now());
    }
  }
  take_decisions(ready);
  inspect_stalls();
  return reasons;
}

// The coordinator's complete decisions, the same in the same order on every rank, so the caches
// stay identical. A rank that has joined takes part with the operation's identity, no handle.
Engine::Impl::Pending Engine::Impl::stand_in(const TensorSpec& spec, bool with_buffers) {
  Pending phantom;
  phantom.req.spec = spec;
  phantom.state = State::kSent;
  phantom.enqueued = Clock::now();
  if (with_buffers) {
    phantom.own_in.resize(spec.bytes());
    phantom.own_out.resize(spec.bytes());
    fill_identity(spec.dtype, spec.reduce_op, phantom.own_in.data(), spec.elements());
    phantom.req.input = phantom.own_in.data();
    phantom.req.output = phantom.own_out.data();
  }
  return phantom;
}

void Engine::Impl::take_decisions(std::vector<Ready>* ready) {
  for (Coordinator::Decision& d : coordinator.take_complete()) {
    if (d.error.empty() && !d.joined.empty() && d.spec.device != gpu::DeviceType::kCpu) {
      // Every rank knows who joined, so every rank fails it alike.
      d.error = "'" + d.name + "' is on " + gpu::device_type_name(d.spec.device) +
                " while a rank has joined: join() takes host tensors only, for now";
    }
    const ResponseCache::Lookup l = cache.lookup(d.spec);
    // A join is never cached: each join must reach the coordinator, which marks the joined rank.
    const bool is_join = d.spec.op == OpType::kJoin;
    if (d.error.empty() && !is_join) {
      if (l.state != ResponseCache::State::kHit) cache.put(d.spec);
    } else if (l.bit >= 0) {
      cache.erase(l.bit);
    }
    const bool joined_here =
        std::find(d.joined.begin(), d.joined.end(), comm->rank()) != d.joined.end();
    if (joined_here) pending.emplace(d.name, stand_in(d.spec, d.error.empty()));
    Pending& p = pending.at(d.name);  // complete: this rank sent it too, or joined
    p.contributors = comm->size() - static_cast<int>(d.joined.size());
    if (is_join && p.handle) p.handle->last_joined = last_to_arrive(d.cycle_by_rank);
    if (timeline.active()) {
      p.negotiate_args = {{"path", "coordinator"},
                          {"bytes", p.req.spec.bytes()},
                          {"ready_cycle_by_rank", d.cycle_by_rank}};
    }
    ready->push_back({&p, d.error});
  }
}

// Rank 0 names who is missing; past the shutdown time, every rank shuts down.
void Engine::Impl::inspect_stalls() {
  for (const Coordinator::Stall& st : coordinator.stalls(opt.stall_check_s, Clock::now())) {
    const std::string report = st.report();
    if (st.first_report && comm->rank() == 0) TESSERA_LOG(kWarning, report);
    // A joined rank waits for the others' data to run out, however long that takes.
    if (opt.stall_shutdown_s > 0 && st.waited_s > opt.stall_shutdown_s && st.name != kJoinName) {
      std::lock_guard<std::mutex> lock(mu);
      if (!shutdown_requested) {
        shutdown_requested = true;
        shutdown_reason = report;
      }
    }
  }
}

// Every pending handle fails with every rank's reason and what some ranks enqueued and others
// never did: a rank that ran fewer steps (skipped one, or had less data: see join()) leaves
// exactly these behind. The same table on every rank.
void Engine::Impl::finish_shutdown(const std::vector<std::pair<int, std::string>>& reasons) {
  std::string why;
  for (const auto& rr : reasons) {
    why += (why.empty() ? "" : "; ") + rr.second + " (rank " + std::to_string(rr.first) + ")";
  }
  const std::vector<Coordinator::Stall> left = coordinator.stalls(-1.0, Clock::now());
  for (size_t i = 0; i < left.size() && i < 3; ++i) {
    why += std::string(i == 0 ? "; left incomplete: " : ", ") + "'" + left[i].name +
           "' (enqueued by " + (left[i].present.size() == 1 ? "rank " : "ranks ") +
           rank_list(left[i].present) + ", not by " +
           (left[i].missing.size() == 1 ? "rank " : "ranks ") + rank_list(left[i].missing) + ")";
  }
  if (left.size() > 3) why += " and " + std::to_string(left.size() - 3) + " more";
  {
    std::lock_guard<std::mutex> lock(mu);
    final_error = "shut down because " + why;
  }
  fail_all(std::make_exception_ptr(Error(final_error)));
}

// Groups wait until every member passed; everything else runs in the agreed order. A member
// that failed (a mismatch, a refusal) fails the whole group, the held members with it, so no
// member waits for one that will never run. The same on every rank: the decisions are.
std::vector<Engine::Impl::Ready> Engine::Impl::release_groups(const std::vector<Ready>& ready) {
  const auto agreed = Clock::now();
  std::vector<Ready> runnable;
  const bool tracing = timeline.active();
  for (const Ready& r : ready) {
    Pending& p = *r.pending;
    p.agreed = agreed;
    if (tracing) timeline.event(p.req.spec.name, "NEGOTIATE", p.enqueued, agreed, p.negotiate_args);
    if (p.req.spec.group < 0) {
      runnable.push_back(r);
      continue;
    }
    HeldGroup& g = held_groups[p.req.spec.group];
    ++g.seen;
    if (g.error.empty() && !r.error.empty()) {
      g.error = r.error;
      for (Pending* m : g.passed) runnable.push_back({m, "group failed: " + g.error});
      g.passed.clear();
    }
    if (!g.error.empty()) {
      runnable.push_back({&p, r.error.empty() ? "group failed: " + g.error : r.error});
    } else {
      g.passed.push_back(&p);
      if (static_cast<int>(g.passed.size()) == p.req.spec.group_size) {
        for (Pending* m : g.passed) runnable.push_back({m, ""});
      }
    }
    if (g.seen >= p.req.spec.group_size) held_groups.erase(p.req.spec.group);
  }
  return runnable;
}

// Counted before the handles complete, so a caller that waited on them sees them.
void Engine::Impl::record_cycle(Clock::time_point t0, double cpu0, const Vote& v, uint64_t hits) {
  std::lock_guard<std::mutex> lock(mu);
  ++stats.cycles;
  stats.cache_hits += hits;
  if (v.round) ++stats.coordinator_rounds;
  stats.control_seconds += seconds_since(t0);
  stats.control_cpu_seconds += thread_cpu_seconds() - cpu0;
  auto since_epoch = [](Clock::time_point t) {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
  };
  const CycleTime ct{cycle_index, since_epoch(t0), since_epoch(Clock::now()), v.all_idle,
                     idle_wait_ms};
  if (cycle_log.size() < kCycleLogSize) {
    cycle_log.push_back(ct);
  } else {
    cycle_log[cycle_index % kCycleLogSize] = ct;
  }
  ++cycle_index;
}

// Flushing re-closes the JSON array; a few times a second is enough for a trace that survives a
// crash, and keeps file writes off most cycles.
void Engine::Impl::flush_timeline() {
  if (seconds_since(last_flush) <= 0.1) return;
  timeline.flush();
  last_flush = Clock::now();
}

void Engine::Impl::execute(const std::vector<Ready>& ready) {
  std::vector<Pending*> ok;
  for (const Ready& r : ready) {
    Pending& p = *r.pending;
    if (!r.error.empty()) {
      complete({&p}, std::make_exception_ptr(InvalidArgument(r.error)));
    } else {
      ok.push_back(&p);
    }
  }
  std::vector<const TensorSpec*> specs;
  specs.reserve(ok.size());
  for (Pending* p : ok) specs.push_back(&p->req.spec);
  for (const FusionBatch& b : plan_fusion(specs, opt.tunables.fusion_threshold)) {
    std::vector<Pending*> items;
    for (size_t i : b.items) items.push_back(ok[i]);
    if (!device_batch_can_run(items)) continue;
    run_batch(items);
    // After the broadcast that carries them has run, every rank holds rank 0's settings; every
    // rank reaches this point in the same cycle at the same batch, so all switch together.
    // What remains of this cycle was planned before and runs alike everywhere.
    const bool switch_now = items.size() == 1 && items.front()->carries_tunables;
    if (switch_now) apply(decode_tunables(static_cast<const char*>(items.front()->req.output)));
    complete(items, nullptr);
  }
}

void Engine::Impl::apply(const Tunables& t) {
  if (t.cache_enabled != opt.tunables.cache_enabled) {
    // A fresh cache on every rank at the same point; requests that voted under the old bits go
    // back to the coordinator.
    cache = ResponseCache(t.cache_enabled ? opt.cache_capacity : 0);
    for (auto& kv : pending) {
      if (kv.second.state == State::kCached) {
        kv.second.state = State::kNew;
        kv.second.bit = -1;
      }
    }
  }
  comm->set_settings(with_tunables(comm->settings(), t));  // checked by set_tunables already
  opt.tunables = t;
  idle_wait_ms = base_wait_ms(t.cycle_time_ms);
  std::lock_guard<std::mutex> lock(mu);
  current = t;
}

void Engine::Impl::complete(const std::vector<Pending*>& items, std::exception_ptr e) {
  std::vector<std::shared_ptr<HandleState>> handles;
  handles.reserve(items.size());
  {
    // One lock per batch, not per tensor.
    std::lock_guard<std::mutex> lock(mu);
    for (Pending* p : items) {
      if (!p->handle) continue;  // a joined rank's stand-in
      names_in_flight.erase(p->req.spec.name);
      ++stats.tensors_done;
      // The autotuner's score; counted under the lock complete() takes anyway.
      if (e == nullptr && p->req.spec.op == OpType::kAllreduce) {
        stats.allreduce_bytes += p->req.spec.bytes();
      }
    }
  }
  for (Pending* p : items) {
    handles.push_back(p->handle);
    pending.erase(p->req.spec.name);  // p dangles from here on
  }
  for (auto& h : handles) {
    if (h) h->finish(e);
  }
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
  for (auto& kv : pending) {
    if (kv.second.handle) kv.second.handle->finish(e);
  }
  pending.clear();
  stopped = true;
}

}  // namespace engine
}  // namespace tessera
