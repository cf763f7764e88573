// Pure parts of the liveness monitor (runtime/liveness.h) and the activity registry.
#include <gtest/gtest.h>

#include <set>

#include "common/activity.h"
#include "common/agreement.h"
#include "runtime/liveness.h"

namespace tessera {
namespace runtime {
namespace {

using comm::watched_peer;
using comm::watcher_of;

TEST(Liveness, EveryRankIsWatchedByExactlyOneOtherRank) {
  for (int size = 2; size <= 64; ++size) {
    std::set<int> watched;
    for (int r = 0; r < size; ++r) {
      const int w = watched_peer(r, size);
      EXPECT_NE(w, r);
      EXPECT_EQ(watcher_of(w, size), r) << "size " << size << " rank " << r;
      watched.insert(w);
    }
    EXPECT_EQ(watched.size(), static_cast<size_t>(size));
  }
}

std::vector<PeerInfo> two_hosts() { return {{"a", 100}, {"a", 101}, {"b", 100}, {"b", 102}}; }

TEST(Liveness, EndedRanksAreThoseOfThisHostWithoutALiveProcess) {
  const auto peers = two_hosts();
  // Rank 1's process is a zombie; rank 3 (other host, pid 102 absent here) is not ours to judge.
  std::map<int, char> state{{100, 'S'}, {101, 'Z'}};
  EXPECT_EQ(ended_on_this_host(0, peers, state), std::vector<int>{1});
  EXPECT_EQ(ended_on_this_host(1, peers, state), std::vector<int>{});
  // On host b, pid 100 is rank 2 itself and pid 102 is gone: rank 3 ended.
  EXPECT_EQ(ended_on_this_host(2, peers, state), std::vector<int>{3});
  state[101] = 'R';
  EXPECT_TRUE(ended_on_this_host(0, peers, state).empty());
  state[101] = 'X';
  EXPECT_EQ(ended_on_this_host(0, peers, state), std::vector<int>{1});
  state.erase(101);
  EXPECT_EQ(ended_on_this_host(0, peers, state), std::vector<int>{1});
  EXPECT_TRUE(ended_on_this_host(7, peers, state).empty());
}

TEST(Liveness, MessagesNameTheRankItsHostAndWhatWasInFlight) {
  const auto peers = two_hosts();
  const std::string lost = lost_peer_message(0, peers, 3, 0, 10.25, "step 5/9: backward");
  EXPECT_NE(lost.find("rank 0 (host a, pid 100) ends the job"), std::string::npos) << lost;
  EXPECT_NE(lost.find("rank 3 (host b, pid 102) stopped answering"), std::string::npos) << lost;
  EXPECT_NE(lost.find("10.2 s"), std::string::npos) << lost;
  EXPECT_EQ(lost.find("noticed by"), std::string::npos) << lost;
  EXPECT_NE(lost.find("In flight here: step 5/9: backward"), std::string::npos) << lost;
  EXPECT_NE(lost.find("--resume"), std::string::npos) << lost;
  const std::string relayed = lost_peer_message(1, peers, 3, 0, 10.0, "x");
  EXPECT_NE(relayed.find("noticed by rank 0"), std::string::npos) << relayed;

  const std::string failed = failed_peer_message(2, peers, 1, "bad batch size", "idle");
  EXPECT_NE(failed.find("rank 1 (host a, pid 101) failed: bad batch size"), std::string::npos)
      << failed;

  std::string t = terminated_message(0, peers, {1}, "y");
  EXPECT_NE(t.find("rank 1 on this host has died"), std::string::npos) << t;
  t = terminated_message(0, peers, {1, 3}, "y");
  EXPECT_NE(t.find("ranks 1 and 3 on this host have died"), std::string::npos) << t;
  t = terminated_message(0, peers, {}, "y");
  EXPECT_NE(t.find("another host"), std::string::npos) << t;
}

TEST(Activity, DescribesThePhaseAndEveryReporterUntilRemoved) {
  activity::set_phase("");
  EXPECT_EQ(activity::describe(), "nothing (idle)");
  activity::set_phase("step 2/4: forward");
  const int a = activity::add_reporter([] { return std::string("engine: 1 collective"); });
  const int b = activity::add_reporter([] { return std::string(); });
  EXPECT_EQ(activity::describe(), "step 2/4: forward; engine: 1 collective");
  activity::remove_reporter(a);
  activity::remove_reporter(b);
  EXPECT_EQ(activity::describe(), "step 2/4: forward");
  activity::set_phase("");
}

}  // namespace
}  // namespace runtime
}  // namespace tessera

namespace tessera {
namespace {

TEST(Agreement, NamesTheFirstDifferenceAndBothGroupsOfRanks) {
  const std::string a = "conv1.weight: [64, 3, 7, 7] f32\nfc.weight: [10, 512] f32\n";
  const std::string b = "conv1.weight: [64, 3, 3, 3] f32\nfc.weight: [10, 512] f32\n";
  EXPECT_EQ(describe_disagreement({a, a, a}), "");
  EXPECT_EQ(describe_disagreement({}), "");
  EXPECT_EQ(
      describe_disagreement({a, a, b, b}),
      "'conv1.weight' is [64, 3, 7, 7] f32 on ranks 0, 1 but [64, 3, 3, 3] f32 on ranks 2, 3");
  EXPECT_EQ(describe_disagreement({b, a}),
            "'conv1.weight' is [64, 3, 3, 3] f32 on rank 0 but [64, 3, 7, 7] f32 on rank 1");
  // A missing entry, on either side, with the counts.
  const std::string shorter = "conv1.weight: [64, 3, 7, 7] f32\n";
  EXPECT_EQ(describe_disagreement({a, shorter}),
            "'fc.weight' is on rank 0 but not on rank 1 (2 entries vs 1)");
  EXPECT_EQ(describe_disagreement({shorter, a, a}),
            "'fc.weight' is on ranks 1, 2 but not on rank 0 (2 entries vs 1)");
  // Three groups: each other group against rank 0's.
  const std::string c = "conv1.weight: [64, 3, 7, 7] f32\nfc.weight: [10, 512] f64\n";
  EXPECT_EQ(describe_disagreement({a, b, c}),
            "'conv1.weight' is [64, 3, 7, 7] f32 on rank 0 but [64, 3, 3, 3] f32 on rank 1; "
            "'fc.weight' is [10, 512] f32 on rank 0 but [10, 512] f64 on rank 2");
  // Same entries in another order.
  const std::string swapped = "fc.weight: [10, 512] f32\nconv1.weight: [64, 3, 7, 7] f32\n";
  EXPECT_EQ(describe_disagreement({a, swapped}),
            "entry 0 is 'conv1.weight' on rank 0 but 'fc.weight' on rank 1");
}

}  // namespace
}  // namespace tessera
