#include "comm/p2p.h"

#include <sched.h>

#include <atomic>
#include <chrono>

#include "comm/backoff.h"
#include "comm/mpi_internal.h"

namespace tessera {
namespace comm {
namespace {
constexpr size_t kMaxMessageBytes = size_t{1} << 30;
std::atomic<bool> g_oversubscribed{false};
}  // namespace

void set_oversubscribed(bool oversubscribed) { g_oversubscribed = oversubscribed; }
bool oversubscribed() { return g_oversubscribed.load(std::memory_order_relaxed); }

Requests::Requests(Communicator& comm, const char* what, double timeout_s)
    : comm_(comm), what_(what), timeout_s_(timeout_s) {}

Requests::~Requests() {
  if (!reqs_.empty()) {
    // Only reached when an exception unwinds: cancel receives so MPI does not write into freed
    // memory later, then release the requests.
    for (const Pending& p : pending_) {
      for (int i = p.first; i < p.first + p.count; ++i) {
        MPI_Request& r = reqs_[static_cast<size_t>(i)];
        // A nonblocking collective's request may be neither cancelled nor freed (MPI 3.1,
        // 5.12): it is left to MPI, which is what an abandoned collective costs.
        if (r == MPI_REQUEST_NULL || p.peer < 0) continue;
        if (!p.send) MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
    }
  }
}

int Requests::post(bool send, const void* buf, size_t bytes, int peer, int tag) {
  const int first = static_cast<int>(reqs_.size());
  char* p = static_cast<char*>(const_cast<void*>(buf));  // MPI_Isend takes const void*
  size_t left = bytes;
  do {
    const int n = static_cast<int>(left < kMaxMessageBytes ? left : kMaxMessageBytes);
    MPI_Request r = MPI_REQUEST_NULL;
    if (send) {
      TESSERA_MPI_CHECK(MPI_Isend(p, n, MPI_BYTE, peer, tag, mpi_comm(comm_), &r));
    } else {
      TESSERA_MPI_CHECK(MPI_Irecv(p, n, MPI_BYTE, peer, tag, mpi_comm(comm_), &r));
    }
    reqs_.push_back(r);
    p += n;
    left -= static_cast<size_t>(n);
  } while (left > 0);
  pending_.push_back({first, static_cast<int>(reqs_.size()) - first, peer, bytes, send});
  return static_cast<int>(pending_.size()) - 1;
}

int Requests::add(MPI_Request request, size_t bytes) {
  reqs_.push_back(request);
  pending_.push_back({static_cast<int>(reqs_.size()) - 1, 1, -1, bytes, false});
  return static_cast<int>(pending_.size()) - 1;
}

void Requests::wait_range(int first, int count, const Pending& p) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point deadline{};
  bool have_deadline = false;
  // A few polls before yielding even when oversubscribed: MPI's shared-memory transport
  // completes a message only while a side polls, and a yield per poll starves it.
  Backoff backoff(64);
  for (;;) {
    int done = 0;
    // Polling is what moves MPI's progress engine; between polls, back off (spin or yield).
    TESSERA_MPI_CHECK(MPI_Testall(count, reqs_.data() + first, &done, MPI_STATUSES_IGNORE));
    if (done) return;
    if ((backoff.wait() & 255) != 0) continue;
    if (!have_deadline) {
      deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(timeout_s_));
      have_deadline = true;
    } else if (Clock::now() > deadline) {
      if (p.peer < 0) {
        throw TimeoutError(detail::concat(what_, ": waited ", timeout_s_, " s for the ",
                                          comm_.size(), " ranks of ", comm_.describe(),
                                          "; one of them is dead, stuck, or running a different "
                                          "sequence of collectives"));
      }
      throw TimeoutError(
          detail::concat(what_, ": waited ", timeout_s_, " s to ", p.send ? "send " : "receive ",
                         p.bytes, " bytes ", p.send ? "to" : "from", " world rank ",
                         comm_.world_rank_of(p.peer), " (rank ", p.peer, " of ", comm_.size(),
                         "); it is dead, stuck, or running a different "
                         "sequence of collectives"));
    }
  }
}

void Requests::wait(int id) {
  const Pending& p = pending_.at(static_cast<size_t>(id));
  wait_range(p.first, p.count, p);
}

void Requests::wait_all() {
  for (const Pending& p : pending_) wait_range(p.first, p.count, p);
  reqs_.clear();
  pending_.clear();
}

}  // namespace comm
}  // namespace tessera
