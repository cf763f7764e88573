// The prefetcher: batches in order whatever the workers' speeds, never more than `depth`
// ahead, workers' exceptions delivered with their type, deadlines instead of hangs, and the
// consumer stops waiting once the workers are ahead.
#include <gtest/gtest.h>

#include <atomic>
#include <random>

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

TEST(Prefetcher, ConsumerWaitsOnlyForTheFirstBatchWhenWorkersKeepUp) {
  Prefetcher<int> p(
      [](int64_t i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        return static_cast<int>(i);
      },
      2, 2, 0, 20, 30.0);
  p.next();
  const double first = p.waited_seconds();
  for (int i = 1; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(15));  // a "step" longer than a batch
    p.next();
  }
  EXPECT_LT(p.waited_seconds() - first, 0.15) << "waited after the first batch";
}

}  // namespace
}  // namespace data
}  // namespace tessera
