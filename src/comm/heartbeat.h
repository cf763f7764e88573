// comm's part of the liveness monitor (runtime/liveness.h): the messages, and nothing else. On a
// private duplicate of MPI_COMM_WORLD each rank sends a beat to its watcher (the next rank on a
// ring), listens for its watched peer's beats, and exchanges notices (a rank lost, a rank
// failed) with every rank. Every call returns at once or within the limit it is given: the
// thread that polls, the deadlines and the process's ending are the runtime's.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace tessera {
namespace comm {

// Who rank r watches and who watches it, on a ring of `size`.
int watched_peer(int rank, int size);
int watcher_of(int rank, int size);

struct PeerInfo {
  std::string host;
  int pid = 0;
};

struct Notice {
  enum Kind : int32_t { kNone = 0, kLost = 1, kFailed = 2 };
  int32_t kind = kNone;
  int32_t rank = -1;        // the rank that died or failed
  int32_t noticed_by = -1;  // the rank that noticed
  double silent_s = 0.0;
  char error[1000] = {};
};

class HeartbeatChannel {
 public:
  // Collective over MPI_COMM_WORLD: duplicates it and gathers every rank's host and pid.
  HeartbeatChannel();
  ~HeartbeatChannel();
  HeartbeatChannel(const HeartbeatChannel&) = delete;
  HeartbeatChannel& operator=(const HeartbeatChannel&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::vector<PeerInfo>& peers() const { return peers_; }

  // A beat to the watcher, unless the last one is still in flight (a peer that stopped
  // receiving must not pile them up).
  void send_beat();
  enum class Heard { kNothing, kBeat, kGoodbye };
  // What arrived from the watched peer since the last call (a goodbye ends its beats).
  Heard poll_beat();
  // A notice from any rank, if one arrived.
  bool poll_notice(Notice* out);
  // `n` to every rank but this one and `skip`, each send given up to `limit` to complete.
  void send_notice(const Notice& n, int skip, std::chrono::milliseconds limit);
  // This rank leaves normally (tells its watcher), or with `error` non-empty, failed (tells
  // every rank). Stops listening. Sends are given a second each.
  void leave(const std::string& error);

 private:
  struct Mpi;  // the MPI handles (heartbeat.cc)
  Mpi* mpi_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<PeerInfo> peers_;
};

}  // namespace comm
}  // namespace tessera
