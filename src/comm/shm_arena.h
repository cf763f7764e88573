// Node-local shared memory (an MPI-3 shared window) through which the ranks of one node reduce
// straight from each other's memory instead of sending messages.
//
// Every rank owns a control line and two data buffers of `bytes_per_rank` each. Operations on
// the arena are a sequence of *steps* that every local rank takes in the same order; step s
// writes only this rank's buffer s % 2. A rank announces that it has written its part by
// arrive(), which bumps its own epoch counter (release), and wait_all() waits until every
// rank's epoch has caught up (acquire). Because a rank reads step s's buffers only before it
// arrives at step s + 1, and step s + 2 writes them again only after everybody has arrived at
// step s + 1, two buffers are enough and no step needs a second barrier.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessera {
namespace comm {

class Communicator;

class ShmArena {
 public:
  // Collective over `local`, whose ranks must share memory. Throws TimeoutError if a rank
  // does not join within timeout_s.
  ShmArena(Communicator& local, size_t bytes_per_rank, double timeout_s);
  ~ShmArena();
  ShmArena(const ShmArena&) = delete;
  ShmArena& operator=(const ShmArena&) = delete;

  size_t bytes_per_rank() const { return bytes_per_rank_; }

  // Starts the next step and returns its buffer parity.
  int begin_step() { return static_cast<int>(step_++ & 1); }
  // Rank `rank`'s data buffer of parity `parity`.
  char* buffer(int rank, int parity) const { return buffers_[rank][parity]; }

  // Publishes this rank's writes so far.
  void arrive();
  // Blocks until every rank has arrived as often as this one; spins briefly, then yields.
  // Throws TimeoutError naming the ranks that did not arrive within `timeout_s`.
  void wait_all(double timeout_s, const char* what);

 private:
  Communicator& local_;
  size_t bytes_per_rank_;
  void* window_ = nullptr;  // MPI_Win, kept opaque here
  std::vector<std::atomic<uint64_t>*> epochs_;
  std::vector<std::array<char*, 2>> buffers_;
  uint64_t my_epoch_ = 0;
  uint64_t step_ = 0;
};

}  // namespace comm
}  // namespace tessera
