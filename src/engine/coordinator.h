// The coordinator's table: which rank has sent which spec, and what follows from it. Every rank
// feeds the same gathered messages in the same order, so every rank's table, decisions and
// stall reports are identical without any reply being sent. Pure (time is passed in), so the
// negotiation logic is unit-tested without MPI.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/tensor_spec.h"

namespace tessera {
namespace engine {

// The rank whose request arrived in the latest cycle, the highest such rank on a tie: join()'s
// "last rank to join", the same on every rank since every rank holds the same table.
int last_to_arrive(const std::vector<uint64_t>& cycle_by_rank);

class Coordinator {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Coordinator(int ranks) : ranks_(ranks), joined_(static_cast<size_t>(ranks), false) {}

  // Rank `rank` has sent `spec` in cycle `cycle`. A second spec of the same name from the same
  // rank, while the first is pending, is ignored. A join (OpType::kJoin) marks the rank as
  // joined until every rank has joined: from then on every other name counts it as present.
  void add(int rank, TensorSpec spec, uint64_t cycle, Clock::time_point now);

  struct Decision {
    std::string name;
    TensorSpec spec;                      // rank 0's
    std::string error;                    // empty: every rank agrees
    std::vector<uint64_t> cycle_by_rank;  // when each rank's spec arrived
    std::vector<int> joined;              // ranks that joined instead of sending it
  };
  // The names every rank has sent (or joined instead), in first-arrival order, validated and
  // removed from the table. A disagreement reads "mismatch in collective 'x': dtype f32 vs f64
  // (ranks 0, 1 vs ranks 2)", naming every rank on each side of the first differing field.
  // With joined ranks only an allreduce can complete (they contribute the operation's
  // identity); anything else is an error naming the collective and the joined ranks.
  std::vector<Decision> take_complete();

  struct Stall {
    std::string name;
    double waited_s = 0;
    std::vector<int> present, missing;
    // For each missing rank that has other names pending here: the newest of them (what it
    // waits on instead: a name that differs between ranks shows up on both sides).
    std::vector<std::pair<int, std::string>> missing_waits_on;
    bool first_report = false;  // true the first time this name is reported
    std::string report() const;
  };
  // The pending names older than `older_than_s` at `now`, in first-arrival order.
  std::vector<Stall> stalls(double older_than_s, Clock::time_point now);

  size_t pending() const { return entries_.size(); }
  bool joined(int rank) const { return joined_[static_cast<size_t>(rank)]; }

 private:
  struct Entry {
    std::vector<std::optional<TensorSpec>> by_rank;
    std::vector<uint64_t> cycle_by_rank;
    int count = 0;
    Clock::time_point first_seen;
    bool reported = false;
  };
  int ranks_;
  std::vector<bool> joined_;
  std::map<std::string, Entry> entries_;
  std::vector<std::string> order_;  // first-arrival order of the pending names
};

}  // namespace engine
}  // namespace tessera
