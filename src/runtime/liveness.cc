#include "runtime/liveness.h"

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

#include "comm/communicator.h"
#include "common/activity.h"
#include "common/logging.h"
#include "runtime/elastic.h"

namespace tessera {
namespace runtime {

using comm::HeartbeatChannel;
using comm::Notice;

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

constexpr int kExitTerminated = 128 + SIGTERM;
// Time a rank that ends waits before exiting, so that the launcher does not kill the other
// ranks (on the first abnormal exit) before they have printed their own line.
constexpr std::chrono::milliseconds kGrace{1000};
// A rank told that another rank failed waits this long for its own error (the same bad input
// usually fails every rank) before ending with the other rank's.
constexpr std::chrono::milliseconds kFailedGrace{2000};

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

// set_error_window's: how long a rank that ends first shows the loss as an error to the
// waits in progress (lost_peer_error), and the line they raise.
std::atomic<double> g_error_window_s{0.0};
std::mutex g_lost_mu;
std::string g_lost_line;
std::atomic<bool> g_lost{false};  // set once g_lost_line is: every op reads it, without a lock

// The supervisor's record of this ending (runtime/elastic.h; nothing outside an elastic job):
// this rank, its host and the ranks `lost` it names, with their hosts.
void leave_record(int me, const std::vector<PeerInfo>& peers, const std::string& line,
                  const std::vector<int>& lost) {
  std::vector<std::pair<int, std::string>> named;
  for (int r : lost) {
    if (r >= 0 && r < static_cast<int>(peers.size())) named.emplace_back(r, peers[r].host);
  }
  const std::string host = me >= 0 && me < static_cast<int>(peers.size()) ? peers[me].host : "";
  record_failure(me, host, line, named);
}

[[noreturn]] void end_process(const std::string& line, int code) {
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  const double window = g_error_window_s.load();
  if (window > 0) {
    {
      std::lock_guard<std::mutex> lock(g_lost_mu);
      g_lost_line = line;
    }
    g_lost = true;
    std::this_thread::sleep_for(std::chrono::duration<double>(window));
  } else {
    std::this_thread::sleep_for(kGrace);
  }
  // Not exit(): other threads are inside MPI and libtorch; destructors would wait on them.
  _exit(code);
}

// The monitor thread: beats, watches, listens for notices, and ends this process when a peer is
// lost, failed, or the launcher terminates the job. Messages go through `channel_`.
class Monitor {
 public:
  explicit Monitor(double timeout_s) : timeout_s_(timeout_s) {
    interval_ = std::chrono::duration<double>(std::max(0.01, std::min(1.0, timeout_s / 10)));
    poll_ = std::chrono::duration<double>(std::min(0.05, interval_.count()));
    last_heard_ = Clock::now();
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
    if (handles_sigterm_) watch_for_termination();
    channel_.leave(error);
  }

 private:
  // MPI_Finalize waits for every rank; if one dies meanwhile, the launcher terminates this one
  // too. A watcher without MPI stays until exit, so that ending is explained as well.
  void watch_for_termination() const {
    const int me = channel_.rank();
    const std::vector<PeerInfo> peers = channel_.peers();
    std::thread([me, peers] {
      for (;;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (!g_sigterm) continue;
        std::map<int, char> states;
        for (const PeerInfo& p : peers) states[p.pid] = process_state(p.pid);
        const std::vector<int> ended = ended_on_this_host(me, peers, states);
        const std::string line = terminated_message(me, peers, ended, activity::describe());
        leave_record(me, peers, line, ended);
        end_process(line, kExitTerminated);
      }
    }).detach();
  }

  void run() {
    auto next_beat = Clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, poll_);
      if (stop_) break;
      lock.unlock();
      if (g_sigterm) end_terminated();
      const auto now = Clock::now();
      if (now >= next_beat) {
        channel_.send_beat();
        next_beat = now + std::chrono::duration_cast<Clock::duration>(interval_);
      }
      watch(now);
      listen(now);
      lock.lock();
    }
  }

  // The watched peer: a beat or goodbye resets the clock; silence past the timeout ends the job.
  void watch(Clock::time_point now) {
    for (HeartbeatChannel::Heard h;
         watching_ && (h = channel_.poll_beat()) != HeartbeatChannel::Heard::kNothing;) {
      last_heard_ = now;
      if (h == HeartbeatChannel::Heard::kGoodbye) watching_ = false;  // it finished normally
    }
    const double silent = std::chrono::duration<double>(now - last_heard_).count();
    const int peer = comm::watched_peer(channel_.rank(), channel_.size());
    if (watching_ && silent > timeout_s_) end_lost(peer, silent);
  }

  // Notices: a lost rank ends this one at once; a failed one after a grace period that lets
  // this rank fail with its own error (the same bad input usually fails every rank).
  void listen(Clock::time_point now) {
    Notice n;
    if (channel_.poll_notice(&n)) {
      if (n.kind == Notice::kLost) {
        const std::string line = lost_peer_message(channel_.rank(), channel_.peers(), n.rank,
                                                   n.noticed_by, n.silent_s, activity::describe());
        leave_record(channel_.rank(), channel_.peers(), line, {n.rank});
        end_process(line, kExitPeerLost);
      }
      if (n.kind == Notice::kFailed && !failed_pending_) {
        failed_ = n;
        failed_pending_ = true;
        failed_deadline_ = now + kFailedGrace;
      }
    }
    if (failed_pending_ && now >= failed_deadline_) {
      const std::string line = failed_peer_message(channel_.rank(), channel_.peers(), failed_.rank,
                                                   failed_.error, activity::describe());
      leave_record(channel_.rank(), channel_.peers(), line, {failed_.rank});
      end_process(line, kExitPeerLost);
    }
  }

  [[noreturn]] void end_lost(int dead, double silent) {
    Notice n;
    n.kind = Notice::kLost;
    n.rank = dead;
    n.noticed_by = channel_.rank();
    n.silent_s = silent;
    const std::string line = lost_peer_message(channel_.rank(), channel_.peers(), dead,
                                               channel_.rank(), silent, activity::describe());
    channel_.send_notice(n, dead, std::chrono::milliseconds(1000));
    leave_record(channel_.rank(), channel_.peers(), line, {dead});
    end_process(line, kExitPeerLost);
  }

  [[noreturn]] void end_terminated() {
    // No MPI here: the launcher is tearing the job down.
    std::map<int, char> states;
    for (const PeerInfo& p : channel_.peers()) states[p.pid] = process_state(p.pid);
    const std::vector<int> ended = ended_on_this_host(channel_.rank(), channel_.peers(), states);
    const std::string line =
        terminated_message(channel_.rank(), channel_.peers(), ended, activity::describe());
    leave_record(channel_.rank(), channel_.peers(), line, ended);
    end_process(line, kExitTerminated);
  }

  double timeout_s_;
  HeartbeatChannel channel_;  // collective: every rank constructs it at start_liveness
  std::chrono::duration<double> interval_{1.0};
  std::chrono::duration<double> poll_{0.05};
  bool handles_sigterm_ = false;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;

  // Monitor thread only.
  bool watching_ = true;
  Clock::time_point last_heard_;
  bool failed_pending_ = false;
  Notice failed_;
  Clock::time_point failed_deadline_;
};

std::unique_ptr<Monitor> g_monitor;

}  // namespace

void start_liveness(const SettingValues& settings) {
  const double timeout_s = kHeartbeatTimeout.get(settings);
  if (g_monitor || timeout_s <= 0 || !comm::is_initialized()) return;
  if (comm::world_size() < 2) return;
  g_monitor = std::make_unique<Monitor>(timeout_s);
  // What tests/session_entry_points.sh reads: the timeout each entry point's session started.
  TESSERA_LOG(kInfo, "liveness: a rank silent for ", timeout_s, " s is taken for dead");
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

void set_error_window(double seconds) { g_error_window_s = seconds > 0 ? seconds : 0.0; }

std::string lost_peer_error() {
  if (!g_lost.load(std::memory_order_acquire)) return "";
  std::lock_guard<std::mutex> lock(g_lost_mu);
  return g_lost_line;
}

}  // namespace runtime
}  // namespace tessera
