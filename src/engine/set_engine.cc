// The cycle of one process set's engine: vote, coordinator round, groups, fusion, execution.
#include "engine/set_engine.h"

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
#include "engine/bit_vector.h"
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
  //    so that the ranks they wait on can be named. One clock read for the whole cycle.
  auto stalled = [&](const Pending& p) {
    return std::chrono::duration<double>(t0 - p.enqueued).count() > opt.stall_check_s;
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
  // 2. One bitwise AND over the status bits and the cache bits.
  BitVector votes(kStatusBits + span);
  if (!want_shutdown) votes.set(kAlive);
  if (!need_round) votes.set(kNoRoundNeeded);
  if (pending.empty() && held_groups.empty()) votes.set(kIdle);
  for (size_t b = 0; b < span; ++b) {
    if (by_bit[b]) votes.set(kStatusBits + b);
  }
  comm::AllreduceOptions band;
  band.op = ReduceOp::kBitAnd;
  comm::allreduce(*comm, votes.words(), votes.words(), votes.num_words(), DataType::kInt64, band);

  std::vector<Ready> ready;
  uint64_t hits = 0;
  for (size_t b = 0; b < span; ++b) {
    if (!votes.test(kStatusBits + b)) continue;
    // Every rank set this bit, so every rank has a request cached under it: this one's.
    Pending* p = by_bit[b];
    TESSERA_ASSERT(p != nullptr, "cache bit ", b, " passed the vote without a request here");
    cache.touch(static_cast<int>(b));
    if (timeline.active()) {  // no string work per tensor unless someone traces
      p->negotiate_args = "{\"path\":\"cache\",\"bit\":" + std::to_string(b) +
                          ",\"bytes\":" + std::to_string(p->req.spec.bytes()) + "}";
    }
    ready.push_back({p, ""});
    ++hits;
  }
  const bool all_idle = votes.test(kIdle);
  idle_wait_ms = next_wait_ms(all_idle, idle_wait_ms, opt.cycle_time_ms, opt.idle_backoff_ms);
  const bool shutting_down = !votes.test(kAlive);
  const bool round = !votes.test(kNoRoundNeeded) || shutting_down;
  std::vector<std::pair<int, std::string>> reasons;
  if (round) {
    // 3. Coordinator round: gather every rank's shutdown reason and the specs it has not sent
    //    yet (all pending that did not just pass by cache bits), then run the same coordinator
    //    logic everywhere. Cached requests that did not pass go along too: a rank whose copy
    //    of that tensor is new, changed or stalled waits for them there. So after a round no
    //    request is left under a cache bit, and the cache may change (evict, replace, erase)
    //    without a request voting for a bit that now means another tensor. A request in the
    //    coordinator keeps asking for rounds (state kSent) until it completes.
    std::vector<TensorSpec> mine;
    for (auto& kv : pending) {
      Pending& p = kv.second;
      const bool passed =
          p.state == State::kCached && votes.test(kStatusBits + static_cast<size_t>(p.bit));
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
        coordinator.add(r, std::move(s), cycle_index, Clock::now());
      }
    }
    for (Coordinator::Decision& d : coordinator.take_complete()) {
      // Same decisions in the same order on every rank, so the caches stay identical.
      const ResponseCache::Lookup l = cache.lookup(d.spec);
      if (d.error.empty()) {
        if (l.state != ResponseCache::State::kHit) cache.put(d.spec);
      } else if (l.bit >= 0) {
        cache.erase(l.bit);
      }
      const bool joined_here =
          std::find(d.joined.begin(), d.joined.end(), comm->rank()) != d.joined.end();
      if (joined_here) {
        // This rank has joined: it takes part with the operation's identity and no handle.
        Pending phantom;
        phantom.req.spec = d.spec;
        phantom.state = State::kSent;
        phantom.enqueued = Clock::now();
        if (d.error.empty()) {
          phantom.own_in.resize(d.spec.bytes());
          phantom.own_out.resize(d.spec.bytes());
          fill_identity(d.spec.dtype, d.spec.reduce_op, phantom.own_in.data(), d.spec.elements());
          phantom.req.input = phantom.own_in.data();
          phantom.req.output = phantom.own_out.data();
        }
        pending.emplace(d.name, std::move(phantom));
      }
      Pending& p = pending.at(d.name);  // complete: this rank sent it too, or joined
      p.contributors = comm->size() - static_cast<int>(d.joined.size());
      if (timeline.active()) {
        std::string cycles;
        for (uint64_t c : d.cycle_by_rank) {
          cycles += (cycles.empty() ? "" : ",") + std::to_string(c);
        }
        p.negotiate_args =
            "{\"path\":\"coordinator\",\"bytes\":" + std::to_string(p.req.spec.bytes()) +
            ",\"ready_cycle_by_rank\":[" + cycles + "]}";
      }
      ready.push_back({&p, d.error});
    }
    // Stall inspector: rank 0 names who is missing; past the shutdown time, shut down.
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
  if (shutting_down) {
    std::string why;
    for (const auto& rr : reasons) {
      why += (why.empty() ? "" : "; ") + rr.second + " (rank " + std::to_string(rr.first) + ")";
    }
    // What some ranks enqueued and others never did: a rank that ran fewer steps (skipped one,
    // or had less data: see join()) leaves exactly these behind. Same table on every rank.
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
    return true;
  }
  // 4. Groups wait until every member passed; then run everything in the agreed order.
  const auto agreed = Clock::now();
  std::vector<Ready> runnable;
  const bool tracing = timeline.active();
  for (const Ready& r : ready) {
    Pending& p = *r.pending;
    p.agreed = agreed;
    if (tracing) timeline.event(p.req.spec.name, "NEGOTIATE", p.enqueued, agreed, p.negotiate_args);
    if (p.req.spec.group < 0 || !r.error.empty()) {
      runnable.push_back(r);
      continue;
    }
    std::vector<Pending*>& members = held_groups[p.req.spec.group];
    members.push_back(&p);
    if (static_cast<int>(members.size()) == p.req.spec.group_size) {
      for (Pending* m : members) runnable.push_back({m, ""});
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
    auto since_epoch = [](Clock::time_point t) {
      return std::chrono::duration<double>(t.time_since_epoch()).count();
    };
    const CycleTime ct{cycle_index, since_epoch(t0), since_epoch(Clock::now()), all_idle,
                       idle_wait_ms};
    if (cycle_log.size() < kCycleLogSize) {
      cycle_log.push_back(ct);
    } else {
      cycle_log[cycle_index % kCycleLogSize] = ct;
    }
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
  for (const FusionBatch& b : plan_fusion(specs, opt.fusion_threshold)) {
    std::vector<Pending*> items;
    for (size_t i : b.items) items.push_back(ok[i]);
    run_batch(items);
    // After the broadcast that carries them has run, every rank holds rank 0's settings; every
    // rank reaches this point in the same cycle at the same batch, so all switch together.
    // What remains of this cycle was planned before and runs alike everywhere.
    const bool switch_now = items.size() == 1 && items.front()->carries_tunables;
    if (switch_now) apply(decode_tunables(static_cast<const char*>(items.front()->req.output)));
    complete(items, nullptr);
  }
}

Tunables Engine::Impl::tunables_of(const EngineOptions& o) {
  Tunables t;
  t.cycle_time_ms = o.cycle_time_ms;
  t.fusion_threshold = o.fusion_threshold;
  t.cache_enabled = o.cache_capacity > 0;
  t.allreduce = o.allreduce;
  t.colors = o.colors;
  t.segment_bytes = o.segment_bytes;
  return t;
}

void Engine::Impl::apply(const Tunables& t) {
  override_ranges = comm::parse_override(t.allreduce);  // checked by set_tunables already
  if (t.cache_enabled != (opt.cache_capacity > 0)) {
    // A fresh cache on every rank at the same point; requests that voted under the old bits go
    // back to the coordinator.
    opt.cache_capacity = t.cache_enabled ? full_cache_capacity : 0;
    cache = ResponseCache(opt.cache_capacity);
    for (auto& kv : pending) {
      if (kv.second.state == State::kCached) {
        kv.second.state = State::kNew;
        kv.second.bit = -1;
      }
    }
  }
  opt.cycle_time_ms = t.cycle_time_ms;
  opt.fusion_threshold = t.fusion_threshold;
  opt.allreduce = t.allreduce;
  opt.colors = t.colors;
  opt.segment_bytes = t.segment_bytes;
  idle_wait_ms = opt.cycle_time_ms > 0 ? opt.cycle_time_ms : 1.0;
  std::lock_guard<std::mutex> lock(mu);
  current = tunables_of(opt);
}

comm::Algorithm Engine::Impl::algorithm_for(size_t bytes) const {
  return override_ranges.empty() ? comm::choose_allreduce(*comm, bytes, comm::Algorithm::kAuto)
                                 : comm::choose_allreduce(*comm, bytes, override_ranges);
}

void Engine::Impl::run_batch(const std::vector<Pending*>& items) {
  const TensorSpec& lead = items.front()->req.spec;
  const int n = comm->size();
  const size_t esize = dtype_size(lead.dtype);
  const auto start = Clock::now();
  if (timeline.active()) {
    for (Pending* p : items) timeline.event(p->req.spec.name, "QUEUE", p->agreed, start);
  }
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
      a += std::string(",\"algorithm\":\"") + comm::algorithm_name(algorithm_for(bytes)) + "\"";
    }
    return a + "}";
  };
  switch (lead.op) {
    case OpType::kAllreduce: {
      const bool average = lead.reduce_op == ReduceOp::kAverage;
      // Averaging and the post-scale are folded into the copy out of the fusion buffer. The
      // average is over the ranks that contributed: joined ranks add only the identity.
      auto out_factor_of = [&](const Pending* p) {
        const int contributors = p->contributors > 0 ? p->contributors : n;
        return lead.postscale * (average ? 1.0 / contributors : 1.0);
      };
      comm::AllreduceOptions o;
      o.op = average ? ReduceOp::kSum : lead.reduce_op;
      o.colors = opt.colors;
      o.segment_bytes = opt.segment_bytes;
      if (!override_ranges.empty()) {
        size_t batch_bytes = 0;
        for (Pending* p : items) batch_bytes += p->req.spec.bytes();
        o.algorithm = algorithm_for(batch_bytes);
      }
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
        const double out_factor = out_factor_of(items.front());
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
        const double out_factor = out_factor_of(p);
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
    case OpType::kJoin:
      return;  // every rank has joined: nothing moves
    case OpType::kAlltoall: {
      const Request& r = items.front()->req;
      comm::alltoall(*comm, r.input, r.output, r.spec.elements() / static_cast<size_t>(n),
                     r.spec.dtype);
      trace("ALLTOALL", start, collective_args(r.spec.bytes()));
      return;
    }
  }
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
