#include "engine/coordinator.h"

#include "common/agreement.h"
#include "common/error.h"

namespace tessera {
namespace engine {
namespace {

// The same wording as every other rank list in tessera's messages.
std::string join_ranks(const std::vector<int>& ranks) { return rank_list(ranks); }

// "" unless some rank refused `name`: then why, naming the ranks that refused (with the first
// one's reason) and those that enqueued it, the same text on every rank.
std::string refusal_error(const std::string& name,
                          const std::vector<std::optional<TensorSpec>>& by_rank) {
  std::vector<int> refused, enqueued;
  const TensorSpec* first = nullptr;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    if (!by_rank[r]) continue;
    const bool refusal = !by_rank[r]->refusal.empty();
    (refusal ? refused : enqueued).push_back(static_cast<int>(r));
    if (refusal && first == nullptr) first = &*by_rank[r];
  }
  if (refused.empty()) return "";
  std::string out = "collective '" + name +
                    "' failed: " + (refused.size() == 1 ? "rank " : "ranks ") +
                    join_ranks(refused) +
                    (refused.size() == 1 ? " refused its arguments" : " refused their arguments") +
                    " (rank " + std::to_string(refused.front()) + ": " + first->refusal + ")";
  if (!enqueued.empty()) {
    out += "; " + std::string(enqueued.size() == 1 ? "rank " : "ranks ") + join_ranks(enqueued) +
           " enqueued it";
  }
  return out;
}

}  // namespace

int last_to_arrive(const std::vector<uint64_t>& cycle_by_rank) {
  int last = -1;
  for (size_t r = 0; r < cycle_by_rank.size(); ++r) {
    if (last < 0 || cycle_by_rank[r] >= cycle_by_rank[static_cast<size_t>(last)]) {
      last = static_cast<int>(r);
    }
  }
  return last;
}

void Coordinator::add(int rank, TensorSpec spec, uint64_t cycle, Clock::time_point now) {
  TESSERA_ASSERT(rank >= 0 && rank < ranks_, "rank ", rank, " out of range");
  auto it = entries_.find(spec.name);
  if (it == entries_.end()) {
    Entry e;
    e.by_rank.resize(static_cast<size_t>(ranks_));
    e.cycle_by_rank.assign(static_cast<size_t>(ranks_), 0);
    e.first_seen = now;
    order_.push_back(spec.name);
    it = entries_.emplace(spec.name, std::move(e)).first;
  }
  Entry& e = it->second;
  if (e.by_rank[static_cast<size_t>(rank)]) return;
  if (spec.op == OpType::kJoin) joined_[static_cast<size_t>(rank)] = true;
  e.by_rank[static_cast<size_t>(rank)] = std::move(spec);
  e.cycle_by_rank[static_cast<size_t>(rank)] = cycle;
  ++e.count;
}

std::vector<Coordinator::Decision> Coordinator::take_complete() {
  std::vector<Decision> out;
  std::vector<std::string> still;
  bool join_done = false;
  for (const std::string& name : order_) {
    Entry& e = entries_.at(name);
    // Complete when every rank has sent it or joined (a join entry: when every rank joined).
    bool complete = true;
    Decision d;
    for (int r = 0; r < ranks_; ++r) {
      if (e.by_rank[static_cast<size_t>(r)]) continue;
      if (!joined_[static_cast<size_t>(r)]) complete = false;
      d.joined.push_back(r);
    }
    if (!complete) {
      still.push_back(name);
      continue;
    }
    int first = 0;
    while (!e.by_rank[static_cast<size_t>(first)]) ++first;
    d.name = name;
    d.spec = *e.by_rank[static_cast<size_t>(first)];
    d.cycle_by_rank = e.cycle_by_rank;
    d.error = refusal_error(name, e.by_rank);
    for (int r = first + 1; r < ranks_ && d.error.empty(); ++r) {
      if (!e.by_rank[static_cast<size_t>(r)]) continue;
      const std::string diff = spec_difference(d.spec, *e.by_rank[static_cast<size_t>(r)]);
      if (diff.empty()) continue;
      std::vector<int> same, other;
      for (int q = 0; q < ranks_; ++q) {
        if (!e.by_rank[static_cast<size_t>(q)]) continue;
        (spec_difference(d.spec, *e.by_rank[static_cast<size_t>(q)]).empty() ? same : other)
            .push_back(q);
      }
      d.error = "mismatch in collective '" + name + "': " + diff + " (ranks " + join_ranks(same) +
                " vs ranks " + join_ranks(other) + ")";
    }
    if (d.error.empty() && !d.joined.empty() && d.spec.op != OpType::kAllreduce) {
      d.error = "collective '" + name + "' (" + op_type_name(d.spec.op) + ") ran while ranks " +
                join_ranks(d.joined) +
                " had joined: after join() only allreduce can run (a joined rank contributes "
                "the operation's identity, zeros for a sum or an average)";
    }
    join_done |= d.spec.op == OpType::kJoin;
    out.push_back(std::move(d));
    entries_.erase(name);
  }
  order_.swap(still);
  // Every rank has joined: the next join starts afresh. After the pass, so that names
  // completed by the joined ranks in this same pass were judged with them.
  if (join_done) joined_.assign(joined_.size(), false);
  return out;
}

std::vector<Coordinator::Stall> Coordinator::stalls(double older_than_s, Clock::time_point now) {
  std::vector<Stall> out;
  for (const std::string& name : order_) {
    Entry& e = entries_.at(name);
    const double age = std::chrono::duration<double>(now - e.first_seen).count();
    if (age < older_than_s) continue;
    Stall s;
    s.name = name;
    s.waited_s = age;
    for (int q = 0; q < ranks_; ++q) {
      (e.by_rank[static_cast<size_t>(q)] ? s.present : s.missing).push_back(q);
    }
    for (int q : s.missing) {
      for (auto other = order_.rbegin(); other != order_.rend(); ++other) {
        if (*other != name && entries_.at(*other).by_rank[static_cast<size_t>(q)]) {
          s.missing_waits_on.emplace_back(q, *other);
          break;
        }
      }
    }
    s.first_report = !e.reported;
    e.reported = true;
    out.push_back(std::move(s));
  }
  return out;
}

std::string Coordinator::Stall::report() const {
  std::string out = detail::concat(
      "stall: collective '", name, "' has waited ", static_cast<int>(waited_s * 10) / 10.0,
      " s; ranks ", join_ranks(present), " enqueued it, ranks ", join_ranks(missing), " have not");
  for (const auto& w : missing_waits_on) {
    out += "; rank " + std::to_string(w.first) + " waits on '" + w.second + "' instead";
  }
  return out;
}

}  // namespace engine
}  // namespace tessera
