#include "comm/liveness.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "comm/mpi_internal.h"
#include "common/activity.h"
#include "common/logging.h"

namespace tessera {
namespace comm {

int watched_peer(int rank, int size) { return (rank + size - 1) % size; }
int watcher_of(int rank, int size) { return (rank + 1) % size; }

namespace {

std::string who(int rank, const std::vector<PeerInfo>& peers) {
  std::ostringstream s;
  s << "rank " << rank;
  if (rank >= 0 && static_cast<size_t>(rank) < peers.size()) {
    const PeerInfo& p = peers[static_cast<size_t>(rank)];
    s << " (host " << p.host << ", pid " << p.pid << ")";
  }
  return s.str();
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += ranks.size() == 2 ? " and " : (i + 1 == ranks.size() ? " and " : ", ");
    out += std::to_string(ranks[i]);
  }
  return out;
}

}  // namespace

std::string lost_peer_message(int me, const std::vector<PeerInfo>& peers, int dead, int noticed_by,
                              double silent_s, const std::string& in_flight) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(1);
  s << "tessera: " << who(me, peers) << " ends the job: " << who(dead, peers)
    << " stopped answering (no heartbeat for " << silent_s << " s";
  if (noticed_by != me) s << ", noticed by rank " << noticed_by;
  s << "; it died, hung or lost its network). In flight here: " << in_flight
    << ". Continue from the last checkpoint with --resume.";
  return s.str();
}

std::string failed_peer_message(int me, const std::vector<PeerInfo>& peers, int failed,
                                const std::string& error, const std::string& in_flight) {
  return "tessera: " + who(me, peers) + " ends the job: " + who(failed, peers) +
         " failed: " + error + ". In flight here: " + in_flight + ".";
}

std::string terminated_message(int me, const std::vector<PeerInfo>& peers,
                               const std::vector<int>& ended, const std::string& in_flight) {
  std::string cause;
  if (ended.empty()) {
    cause =
        "no other rank on this host has ended, so it was one on another host (the "
        "launcher's message names it) or the job was cancelled";
  } else {
    cause = (ended.size() == 1 ? "rank " : "ranks ") + join_ranks(ended) + " on this host " +
            (ended.size() == 1 ? "has" : "have") + " died";
  }
  return "tessera: " + who(me, peers) + " was terminated by the launcher: " + cause +
         ". In flight here: " + in_flight + ". Continue from the last checkpoint with --resume.";
}

std::vector<int> ended_on_this_host(int me, const std::vector<PeerInfo>& peers,
                                    const std::map<int, char>& state_of_pid) {
  std::vector<int> ended;
  if (me < 0 || static_cast<size_t>(me) >= peers.size()) return ended;
  const std::string& host = peers[static_cast<size_t>(me)].host;
  for (size_t r = 0; r < peers.size(); ++r) {
    if (static_cast<int>(r) == me || peers[r].host != host) continue;
    const auto it = state_of_pid.find(peers[r].pid);
    const char state = it == state_of_pid.end() ? '\0' : it->second;
    // Gone, a zombie not yet reaped by its parent, or dead (Linux's 'X').
    if (state == '\0' || state == 'Z' || state == 'X') ended.push_back(static_cast<int>(r));
  }
  return ended;
}

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTagBeat = 1;
constexpr int kTagNotice = 2;
constexpr int32_t kBeat = 0;
constexpr int32_t kBye = 1;
constexpr int32_t kNoticeLost = 1;
constexpr int32_t kNoticeFailed = 2;
constexpr int kExitTerminated = 128 + SIGTERM;
// Time a rank that ends waits before exiting, so that the launcher does not kill the other
// ranks (on the first abnormal exit) before they have printed their own line.
constexpr std::chrono::milliseconds kGrace{1000};
// A rank told that another rank failed waits this long for its own error (the same bad input
// usually fails every rank) before ending with the other rank's.
constexpr std::chrono::milliseconds kFailedGrace{2000};

struct Notice {
  int32_t kind = 0;
  int32_t rank = -1;        // the rank that died or failed
  int32_t noticed_by = -1;  // the rank that noticed
  double silent_s = 0.0;
  char error[1000] = {};
};

struct HostRecord {
  int32_t pid = 0;
  char host[64] = {};
};

volatile sig_atomic_t g_sigterm = 0;

extern "C" void on_sigterm(int) {
  g_sigterm = 1;
  // Should the monitor thread never get to it, the default action of SIGALRM ends the process.
  alarm(5);
}

char process_state(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in.is_open()) return '\0';
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // "PID (COMMAND) STATE ...": the command may hold spaces and parentheses.
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 >= text.size()) return '\0';
  return text[paren + 2];
}

[[noreturn]] void end_process(const std::string& line, int code) {
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  std::this_thread::sleep_for(kGrace);
  // Not exit(): other threads are inside MPI and libtorch; destructors would wait on them.
  _exit(code);
}

class Monitor {
 public:
  Monitor(double timeout_s) : timeout_s_(timeout_s) {
    TESSERA_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    TESSERA_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    TESSERA_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    TESSERA_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    HostRecord mine;
    mine.pid = static_cast<int32_t>(getpid());
    gethostname(mine.host, sizeof(mine.host) - 1);
    std::vector<HostRecord> all(static_cast<size_t>(size_));
    TESSERA_MPI_CHECK(MPI_Allgather(&mine, sizeof(HostRecord), MPI_BYTE, all.data(),
                                    sizeof(HostRecord), MPI_BYTE, comm_));
    for (const HostRecord& h : all) peers_.push_back({std::string(h.host), h.pid});
    interval_ = std::chrono::duration<double>(std::max(0.01, std::min(1.0, timeout_s / 10)));
    poll_ = std::chrono::duration<double>(std::min(0.05, interval_.count()));
    last_heard_ = Clock::now();
    post_beat_receive();
    post_notice_receive();
    struct sigaction old {};
    sigaction(SIGTERM, nullptr, &old);
    if (old.sa_handler == SIG_DFL) {
      struct sigaction sa {};
      sa.sa_handler = on_sigterm;
      sigemptyset(&sa.sa_mask);
      sigaction(SIGTERM, &sa, nullptr);
      handles_sigterm_ = true;
    }
    thread_ = std::thread([this] { run(); });
  }

  // Stops the thread, says goodbye to the watcher and, after an error, tells every rank.
  void stop(const std::string& error) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    if (handles_sigterm_) {
      // MPI_Finalize waits for every rank; if one dies meanwhile, the launcher terminates this
      // one too. A watcher without MPI stays until exit, so that ending is explained as well.
      const int me = rank_;
      const std::vector<PeerInfo> peers = peers_;
      std::thread([me, peers] {
        for (;;) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          if (!g_sigterm) continue;
          std::map<int, char> states;
          for (const PeerInfo& p : peers) states[p.pid] = process_state(p.pid);
          end_process(terminated_message(me, peers, ended_on_this_host(me, peers, states),
                                         activity::describe()),
                      kExitTerminated);
        }
      }).detach();
    }
    cancel(beat_recv_);
    cancel(notice_recv_);
    finish_or_free(beat_send_, std::chrono::milliseconds(0));
    std::vector<MPI_Request> sends;
    int32_t bye = kBye;
    sends.push_back(MPI_REQUEST_NULL);
    MPI_Isend(&bye, 1, MPI_INT32_T, watcher_of(rank_, size_), kTagBeat, comm_, &sends.back());
    Notice failed;
    if (!error.empty()) {
      failed.kind = kNoticeFailed;
      failed.rank = rank_;
      failed.noticed_by = rank_;
      std::snprintf(failed.error, sizeof(failed.error), "%s", error.c_str());
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        sends.push_back(MPI_REQUEST_NULL);
        MPI_Isend(&failed, sizeof(Notice), MPI_BYTE, r, kTagNotice, comm_, &sends.back());
      }
    }
    for (MPI_Request& r : sends) finish_or_free(r, std::chrono::milliseconds(1000));
    // The duplicate is left to MPI_Finalize: freeing it could wait on the messages above.
  }

 private:
  void post_beat_receive() {
    MPI_Irecv(&beat_in_, 1, MPI_INT32_T, watched_peer(rank_, size_), kTagBeat, comm_, &beat_recv_);
  }
  void post_notice_receive() {
    MPI_Irecv(&notice_in_, sizeof(Notice), MPI_BYTE, MPI_ANY_SOURCE, kTagNotice, comm_,
              &notice_recv_);
  }
  static bool test(MPI_Request& r) {
    if (r == MPI_REQUEST_NULL) return false;
    int done = 0;
    if (MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    return done != 0;
  }
  static void cancel(MPI_Request& r) {
    if (r == MPI_REQUEST_NULL) return;
    MPI_Cancel(&r);
    MPI_Request_free(&r);
  }
  // Waits up to `limit` for a send; past it the request is released (MPI completes it later,
  // or never if the peer is dead).
  static void finish_or_free(MPI_Request& r, std::chrono::milliseconds limit) {
    if (r == MPI_REQUEST_NULL) return;
    const auto deadline = Clock::now() + limit;
    for (;;) {
      int done = 0;
      if (MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done) break;
      if (Clock::now() >= deadline) {
        MPI_Request_free(&r);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    r = MPI_REQUEST_NULL;
  }

  void run() {
    auto next_beat = Clock::now();
    bool failed_pending = false;
    Notice failed;
    Clock::time_point failed_deadline;
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, poll_);
      if (stop_) break;
      lock.unlock();
      if (g_sigterm) end_terminated();
      const auto now = Clock::now();
      if (now >= next_beat) {
        // One beat in flight at most: a peer that stopped receiving must not pile them up.
        if (beat_send_ == MPI_REQUEST_NULL || test(beat_send_)) {
          beat_out_ = kBeat;
          MPI_Isend(&beat_out_, 1, MPI_INT32_T, watcher_of(rank_, size_), kTagBeat, comm_,
                    &beat_send_);
        }
        next_beat = now + std::chrono::duration_cast<Clock::duration>(interval_);
      }
      while (watching_ && test(beat_recv_)) {
        last_heard_ = now;
        if (beat_in_ == kBye) {
          watching_ = false;  // it finished normally
        } else {
          post_beat_receive();
        }
      }
      const double silent = std::chrono::duration<double>(now - last_heard_).count();
      if (watching_ && silent > timeout_s_) end_lost(watched_peer(rank_, size_), silent);
      if (test(notice_recv_)) {
        if (notice_in_.kind == kNoticeLost) {
          end_process(lost_peer_message(rank_, peers_, notice_in_.rank, notice_in_.noticed_by,
                                        notice_in_.silent_s, activity::describe()),
                      kExitPeerLost);
        }
        if (notice_in_.kind == kNoticeFailed && !failed_pending) {
          failed = notice_in_;
          failed_pending = true;
          failed_deadline = now + kFailedGrace;
        }
        post_notice_receive();
      }
      if (failed_pending && now >= failed_deadline) {
        failed.error[sizeof(failed.error) - 1] = '\0';
        end_process(
            failed_peer_message(rank_, peers_, failed.rank, failed.error, activity::describe()),
            kExitPeerLost);
      }
      lock.lock();
    }
  }

  [[noreturn]] void end_lost(int dead, double silent) {
    Notice n;
    n.kind = kNoticeLost;
    n.rank = dead;
    n.noticed_by = rank_;
    n.silent_s = silent;
    std::vector<MPI_Request> sends;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_ || r == dead) continue;
      sends.push_back(MPI_REQUEST_NULL);
      MPI_Isend(&n, sizeof(Notice), MPI_BYTE, r, kTagNotice, comm_, &sends.back());
    }
    const std::string line =
        lost_peer_message(rank_, peers_, dead, rank_, silent, activity::describe());
    for (MPI_Request& r : sends) finish_or_free(r, std::chrono::milliseconds(1000));
    end_process(line, kExitPeerLost);
  }

  [[noreturn]] void end_terminated() {
    // No MPI here: the launcher is tearing the job down.
    std::map<int, char> states;
    for (const PeerInfo& p : peers_) states[p.pid] = process_state(p.pid);
    end_process(terminated_message(rank_, peers_, ended_on_this_host(rank_, peers_, states),
                                   activity::describe()),
                kExitTerminated);
  }

  double timeout_s_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::vector<PeerInfo> peers_;
  std::chrono::duration<double> interval_{1.0};
  std::chrono::duration<double> poll_{0.05};
  bool handles_sigterm_ = false;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;

  // Monitor thread only (and stop() after the join).
  int32_t beat_in_ = 0;
  int32_t beat_out_ = 0;
  MPI_Request beat_recv_ = MPI_REQUEST_NULL;
  MPI_Request beat_send_ = MPI_REQUEST_NULL;
  Notice notice_in_;
  MPI_Request notice_recv_ = MPI_REQUEST_NULL;
  bool watching_ = true;
  Clock::time_point last_heard_;
};

std::unique_ptr<Monitor> g_monitor;

}  // namespace

void start_liveness(double timeout_s) {
  if (g_monitor || timeout_s <= 0) return;
  int size = 1;
  TESSERA_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  if (size < 2) return;
  g_monitor = std::make_unique<Monitor>(timeout_s);
}

void stop_liveness(const std::string& error) {
  if (!g_monitor) return;
  try {
    g_monitor->stop(error);
  } catch (...) {
  }
  g_monitor.reset();
}

bool liveness_running() { return g_monitor != nullptr; }

}  // namespace comm
}  // namespace tessera
