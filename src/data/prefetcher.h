// The pipeline's engine room: N worker threads produce batches 0, 1, 2, ... ahead of the
// training thread into a bounded window of `depth` batches (depth 2 = double buffering: the
// next batch is being made while a step runs), and next() hands them over in order. A worker's
// exception reaches the caller of next() for that batch, with its type. Every wait has a
// deadline (TimeoutError), so a stuck worker never hangs the job.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/error.h"

namespace tessera {
namespace data {

template <typename Batch>
class Prefetcher {
 public:
  // make(i) builds batch i; it runs on the workers, several at once, so it must be
  // thread-safe. Batches are numbered from `first` to `end` (exclusive).
  Prefetcher(std::function<Batch(int64_t)> make, int workers, int depth, int64_t first, int64_t end,
             double timeout_s)
      : make_(std::move(make)),
        depth_(depth),
        next_(first),
        end_(end),
        claim_(first),
        timeout_s_(timeout_s) {
    TESSERA_CHECK(workers >= 1, "the pipeline needs at least one worker, got ", workers);
    TESSERA_CHECK(depth >= 1, "the pipeline needs a queue depth >= 1, got ", depth);
    for (int w = 0; w < workers; ++w) threads_.emplace_back([this] { work(); });
  }
  ~Prefetcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // The next batch in order; blocks until it is ready. Rethrows the worker's exception.
  Batch next() {
    std::unique_lock<std::mutex> lock(mu_);
    TESSERA_CHECK(next_ < end_, "the pipeline has delivered all its batches");
    const auto t0 = std::chrono::steady_clock::now();
    if (done_.count(next_) == 0) ++waits_;
    const bool ready = cv_.wait_for(lock, std::chrono::duration<double>(timeout_s_),
                                    [&] { return done_.count(next_) > 0; });
    if (!ready) {
      throw TimeoutError("the input pipeline produced no batch " + std::to_string(next_) +
                         " within " + std::to_string(timeout_s_) + " s");
    }
    waited_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    Slot slot = std::move(done_.at(next_));
    done_.erase(next_++);
    lock.unlock();
    cv_.notify_all();  // a window slot is free
    if (slot.error) std::rethrow_exception(slot.error);
    return std::move(slot.batch);
  }

  // Seconds next() has spent waiting for batches so far.
  double waited_seconds() const {
    std::lock_guard<std::mutex> lock(mu_);
    return waited_s_;
  }
  // How many next() calls found their batch not made yet and had to wait for it.
  int64_t waits() const {
    std::lock_guard<std::mutex> lock(mu_);
    return waits_;
  }
  // Batches made and not yet taken by next().
  int64_t ready() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(done_.size());
  }
  // Most batches ever made ahead of the consumer at once (never more than depth).
  int64_t max_ahead() const {
    std::lock_guard<std::mutex> lock(mu_);
    return max_ahead_;
  }

 private:
  struct Slot {
    Batch batch{};
    std::exception_ptr error;
  };

  void work() {
    for (;;) {
      int64_t i;
      {
        std::unique_lock<std::mutex> lock(mu_);
        // Claim the next index only inside the window [next_, next_ + depth).
        cv_.wait(lock, [&] { return stop_ || (claim_ < end_ && claim_ < next_ + depth_); });
        if (stop_) return;
        i = claim_++;
        max_ahead_ = std::max(max_ahead_, claim_ - next_);
      }
      Slot slot;
      try {
        slot.batch = make_(i);
      } catch (...) {
        slot.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        done_.emplace(i, std::move(slot));
      }
      cv_.notify_all();
    }
  }

  std::function<Batch(int64_t)> make_;
  const int64_t depth_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t next_;  // the batch next() returns
  int64_t end_;
  int64_t claim_;  // the batch the next free worker makes
  std::map<int64_t, Slot> done_;
  bool stop_ = false;
  double waited_s_ = 0;
  int64_t waits_ = 0;
  int64_t max_ahead_ = 0;
  double timeout_s_;
  std::vector<std::thread> threads_;
};

}  // namespace data
}  // namespace tessera
