// The prefetcher: batches in order whatever the workers' speeds, never more than `depth`
// ahead, workers' exceptions delivered with their type, deadlines instead of hangs, and the
// workers running ahead so that a consumer that keeps up never waits (counted, not timed).
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "data/prefetcher.h"

namespace tessera {
namespace data {
namespace {

TEST(Prefetcher, InOrderAndBoundedWithUnevenWorkers) {
  for (int workers : {1, 2, 4}) {
    for (int depth : {1, 2, 3}) {
      std::atomic<int> in_flight{0}, most{0};
      Prefetcher<int64_t> p(
          [&](int64_t i) {
            const int now = ++in_flight;
            int seen = most.load();
            while (now > seen && !most.compare_exchange_weak(seen, now)) {
            }
            // Uneven work: later batches are sometimes faster than earlier ones.
            std::this_thread::sleep_for(std::chrono::microseconds((i * 7919) % 5 * 300));
            --in_flight;
            return i * i;
          },
          workers, depth, 3, 40, 30.0);
      for (int64_t i = 3; i < 40; ++i) ASSERT_EQ(p.next(), i * i) << workers << " " << depth;
      EXPECT_LE(p.max_ahead(), depth);
      EXPECT_LE(most.load(), std::min(workers, depth));
      EXPECT_THROW(p.next(), InvalidArgument);  // all delivered
    }
  }
}

TEST(Prefetcher, WorkerErrorsReachTheConsumerWithTheirType) {
  Prefetcher<int> p(
      [](int64_t i) -> int {
        if (i == 2) throw InvalidArgument("image 'x.jpg' is corrupt");
        return static_cast<int>(i);
      },
      2, 2, 0, 5, 30.0);
  EXPECT_EQ(p.next(), 0);
  EXPECT_EQ(p.next(), 1);
  EXPECT_THROW(p.next(), InvalidArgument);
  EXPECT_EQ(p.next(), 3);  // the pipeline goes on; the caller decides what an error means
}

TEST(Prefetcher, AStuckWorkerIsATimeoutNotAHang) {
  std::atomic<bool> release{false};
  {
    Prefetcher<int> p(
        [&](int64_t) {
          while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          return 1;
        },
        1, 1, 0, 1, 0.2);
    EXPECT_THROW(p.next(), TimeoutError);
    release = true;  // lets the destructor join
  }
}

// Polls `done` until it holds, failing after 30 s: a deadline, not a duration the test relies on.
template <typename F>
void wait_until(F done, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done()) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << what;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// The workers make batches ahead of the consumer, up to `depth`, without being asked: a consumer
// whose "step" lasts until the window ahead of it is full finds every batch made and never waits.
// Counted by the prefetcher, not timed, so a slow machine cannot fail it.
TEST(Prefetcher, WorkersRunAheadSoAConsumerThatKeepsUpNeverWaits) {
  for (int depth : {1, 2, 3}) {
    Prefetcher<int> p([](int64_t i) { return static_cast<int>(i); }, 2, depth, 0, 20, 30.0);
    for (int i = 0; i < 20; ++i) {
      wait_until([&] { return p.ready() >= std::min<int64_t>(depth, 20 - i); },
                 "the workers did not fill the window ahead of the consumer");
      EXPECT_EQ(p.ready(), std::min<int64_t>(depth, 20 - i)) << "never more than depth ahead";
      EXPECT_EQ(p.next(), i);
    }
    EXPECT_EQ(p.waits(), 0) << "depth " << depth;
  }
}

// A consumer ahead of the workers waits, and is counted: the count above can tell.
TEST(Prefetcher, AConsumerAheadOfTheWorkersWaitsAndIsCounted) {
  std::atomic<bool> release{false};
  Prefetcher<int> p(
      [&](int64_t i) {
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return static_cast<int>(i);
      },
      1, 1, 0, 2, 30.0);
  std::thread consumer([&] { EXPECT_EQ(p.next(), 0); });
  wait_until([&] { return p.waits() == 1; }, "next() did not count its wait");
  release = true;
  consumer.join();
  wait_until([&] { return p.ready() == 1; }, "batch 1 was not made");
  EXPECT_EQ(p.next(), 1);
  EXPECT_EQ(p.waits(), 1);
}

}  // namespace
}  // namespace data
}  // namespace tessera
