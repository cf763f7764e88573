#include "comm/shm_arena.h"

#include <sched.h>

#include <chrono>
#include <new>

#include "comm/backoff.h"
#include "comm/mpi_internal.h"
#include "comm/p2p.h"
#include "common/logging.h"

namespace tessera {
namespace comm {
namespace {

constexpr size_t kControlBytes = 256;  // epoch counter alone on its cache lines

}  // namespace

ShmArena::ShmArena(Communicator& local, size_t bytes_per_rank, double timeout_s)
    : local_(local), bytes_per_rank_(bytes_per_rank) {
  const int n = local.size();
  // MPI_Win_allocate_shared is a collective without a deadline: meet first in a barrier that
  // has one, so a missing rank is a TimeoutError here instead of a hang inside MPI.
  {
    Requests reqs(local, "creating the node-local shared memory window", timeout_s);
    MPI_Request r = MPI_REQUEST_NULL;
    TESSERA_MPI_CHECK(MPI_Ibarrier(mpi_comm(local), &r));
    reqs.add(r, 0);
    reqs.wait_all();
  }
  const MPI_Aint mine = static_cast<MPI_Aint>(kControlBytes + 2 * bytes_per_rank);
  MPI_Info info = MPI_INFO_NULL;
  TESSERA_MPI_CHECK(MPI_Info_create(&info));
  // Each rank's part on its own pages (first touch by its owner), not one contiguous block.
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  char* base = nullptr;
  MPI_Win win = MPI_WIN_NULL;
  const int rc = MPI_Win_allocate_shared(mine, 1, info, mpi_comm(local), &base, &win);
  MPI_Info_free(&info);
  TESSERA_MPI_CHECK(rc);
  window_ = new MPI_Win(win);
  epochs_.resize(static_cast<size_t>(n));
  buffers_.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    MPI_Aint size = 0;
    int disp = 0;
    char* p = nullptr;
    TESSERA_MPI_CHECK(MPI_Win_shared_query(win, r, &size, &disp, &p));
    TESSERA_ASSERT(static_cast<size_t>(size) >= kControlBytes + 2 * bytes_per_rank);
    epochs_[static_cast<size_t>(r)] = reinterpret_cast<std::atomic<uint64_t>*>(p);
    buffers_[static_cast<size_t>(r)][0] = p + kControlBytes;
    buffers_[static_cast<size_t>(r)][1] = p + kControlBytes + bytes_per_rank;
  }
  static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared epochs need lock-free atomics");
  new (epochs_[static_cast<size_t>(local.rank())]) std::atomic<uint64_t>(0);
  // Every epoch is constructed before anyone reads one.
  TESSERA_MPI_CHECK(MPI_Barrier(mpi_comm(local)));
}

ShmArena::~ShmArena() {
  if (window_ == nullptr) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    // No rank may unmap while a peer still reads its last step: meet first, with a deadline.
    // If a peer never comes (it died), leak the window rather than hang in MPI_Win_free.
    try {
      Requests reqs(local_, "freeing the node-local shared memory window", 30.0);
      MPI_Request r = MPI_REQUEST_NULL;
      TESSERA_MPI_CHECK(MPI_Ibarrier(mpi_comm(local_), &r));
      reqs.add(r, 0);
      reqs.wait_all();
      MPI_Win_free(static_cast<MPI_Win*>(window_));
    } catch (const std::exception& e) {
      TESSERA_LOG(kWarning, "shared memory window not freed: ", e.what());
    }
  }
  delete static_cast<MPI_Win*>(window_);
}

void ShmArena::arrive() {
  ++my_epoch_;
  epochs_[static_cast<size_t>(local_.rank())]->store(my_epoch_, std::memory_order_release);
}

void ShmArena::wait_all(double timeout_s, const char* what) {
  const int n = static_cast<int>(epochs_.size());
  using Clock = std::chrono::steady_clock;
  Clock::time_point deadline{};
  bool have_deadline = false;
  for (int r = 0; r < n; ++r) {
    std::atomic<uint64_t>* e = epochs_[static_cast<size_t>(r)];
    Backoff backoff;
    while (e->load(std::memory_order_acquire) < my_epoch_) {
      if ((backoff.wait() & 1023) != 0) continue;
      if (!have_deadline) {
        deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(timeout_s));
        have_deadline = true;
      } else if (Clock::now() > deadline) {
        std::string late;
        for (int q = 0; q < n; ++q) {
          if (epochs_[static_cast<size_t>(q)]->load() < my_epoch_) {
            late += (late.empty() ? "" : ", ") + std::to_string(local_.world_rank_of(q));
          }
        }
        throw TimeoutError(detail::concat(what, ": waited ", timeout_s,
                                          " s in node-local shared memory for rank(s) ", late,
                                          " (world ranks) at step ", my_epoch_,
                                          "; they are dead, stuck or running a different "
                                          "sequence of collectives"));
      }
    }
  }
}

}  // namespace comm
}  // namespace tessera
