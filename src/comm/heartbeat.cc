#include "comm/heartbeat.h"

#include <unistd.h>

#include <cstdio>
#include <thread>

#include "comm/mpi_internal.h"

namespace tessera {
namespace comm {

int watched_peer(int rank, int size) { return (rank + size - 1) % size; }
int watcher_of(int rank, int size) { return (rank + 1) % size; }

namespace {

constexpr int kTagBeat = 1;
constexpr int kTagNotice = 2;
constexpr int32_t kBeat = 0;
constexpr int32_t kBye = 1;

struct HostRecord {
  int32_t pid = 0;
  char host[64] = {};
};

bool test(MPI_Request& r) {
  if (r == MPI_REQUEST_NULL) return false;
  int done = 0;
  if (MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
  return done != 0;
}

void cancel(MPI_Request& r) {
  if (r == MPI_REQUEST_NULL) return;
  MPI_Cancel(&r);
  MPI_Request_free(&r);
}

// Waits up to `limit` for a send; past it the request is released (MPI completes it later, or
// never if the peer is dead).
void finish_or_free(MPI_Request& r, std::chrono::milliseconds limit) {
  if (r == MPI_REQUEST_NULL) return;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int done = 0;
    if (MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      MPI_Request_free(&r);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  r = MPI_REQUEST_NULL;
}

}  // namespace

struct HeartbeatChannel::Mpi {
  MPI_Comm comm = MPI_COMM_NULL;
  int32_t beat_in = 0, beat_out = 0;
  MPI_Request beat_recv = MPI_REQUEST_NULL, beat_send = MPI_REQUEST_NULL;
  Notice notice_in;
  MPI_Request notice_recv = MPI_REQUEST_NULL;
  bool listening = true;

  void post_beat_receive(int from) {
    MPI_Irecv(&beat_in, 1, MPI_INT32_T, from, kTagBeat, comm, &beat_recv);
  }
  void post_notice_receive() {
    MPI_Irecv(&notice_in, sizeof(Notice), MPI_BYTE, MPI_ANY_SOURCE, kTagNotice, comm, &notice_recv);
  }
};

HeartbeatChannel::HeartbeatChannel() : mpi_(new Mpi()) {
  TESSERA_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &mpi_->comm));
  TESSERA_MPI_CHECK(MPI_Comm_set_errhandler(mpi_->comm, MPI_ERRORS_RETURN));
  TESSERA_MPI_CHECK(MPI_Comm_rank(mpi_->comm, &rank_));
  TESSERA_MPI_CHECK(MPI_Comm_size(mpi_->comm, &size_));
  HostRecord mine;
  mine.pid = static_cast<int32_t>(getpid());
  gethostname(mine.host, sizeof(mine.host) - 1);
  std::vector<HostRecord> all(static_cast<size_t>(size_));
  TESSERA_MPI_CHECK(MPI_Allgather(&mine, sizeof(HostRecord), MPI_BYTE, all.data(),
                                  sizeof(HostRecord), MPI_BYTE, mpi_->comm));
  for (const HostRecord& h : all) peers_.push_back({std::string(h.host), h.pid});
  mpi_->post_beat_receive(watched_peer(rank_, size_));
  mpi_->post_notice_receive();
}

// The duplicate is left to MPI_Finalize: freeing it could wait on messages to dead peers.
HeartbeatChannel::~HeartbeatChannel() { delete mpi_; }

void HeartbeatChannel::send_beat() {
  if (mpi_->beat_send != MPI_REQUEST_NULL && !test(mpi_->beat_send)) return;
  mpi_->beat_out = kBeat;
  MPI_Isend(&mpi_->beat_out, 1, MPI_INT32_T, watcher_of(rank_, size_), kTagBeat, mpi_->comm,
            &mpi_->beat_send);
}

HeartbeatChannel::Heard HeartbeatChannel::poll_beat() {
  if (!mpi_->listening || !test(mpi_->beat_recv)) return Heard::kNothing;
  if (mpi_->beat_in == kBye) return Heard::kGoodbye;  // it finished normally: no more beats
  mpi_->post_beat_receive(watched_peer(rank_, size_));
  return Heard::kBeat;
}

bool HeartbeatChannel::poll_notice(Notice* out) {
  if (!mpi_->listening || !test(mpi_->notice_recv)) return false;
  *out = mpi_->notice_in;
  out->error[sizeof(out->error) - 1] = '\0';
  mpi_->post_notice_receive();
  return true;
}

void HeartbeatChannel::send_notice(const Notice& n, int skip, std::chrono::milliseconds limit) {
  std::vector<MPI_Request> sends;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || r == skip) continue;
    sends.push_back(MPI_REQUEST_NULL);
    MPI_Isend(&n, sizeof(Notice), MPI_BYTE, r, kTagNotice, mpi_->comm, &sends.back());
  }
  for (MPI_Request& r : sends) finish_or_free(r, limit);
}

void HeartbeatChannel::leave(const std::string& error) {
  mpi_->listening = false;
  cancel(mpi_->beat_recv);
  cancel(mpi_->notice_recv);
  finish_or_free(mpi_->beat_send, std::chrono::milliseconds(0));
  int32_t bye = kBye;
  MPI_Request bye_send = MPI_REQUEST_NULL;
  MPI_Isend(&bye, 1, MPI_INT32_T, watcher_of(rank_, size_), kTagBeat, mpi_->comm, &bye_send);
  if (!error.empty()) {
    Notice failed;
    failed.kind = Notice::kFailed;
    failed.rank = rank_;
    failed.noticed_by = rank_;
    std::snprintf(failed.error, sizeof(failed.error), "%s", error.c_str());
    send_notice(failed, -1, std::chrono::milliseconds(1000));
  }
  finish_or_free(bye_send, std::chrono::milliseconds(1000));
}

}  // namespace comm
}  // namespace tessera
