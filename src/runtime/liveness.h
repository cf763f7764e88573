// Liveness: every rank of the world learns, within TESSERA_HEARTBEAT_TIMEOUT seconds, that
// another rank died or stopped answering, and ends with a message that names that rank and what
// this one had in flight, instead of waiting in a collective until TESSERA_TIMEOUT.
//
// Heartbeats go around a ring on a private duplicate of MPI_COMM_WORLD (comm/heartbeat.h, the
// messages): rank r sends one to r+1 every timeout/10 and watches r-1. A thread per rank
// (started by tessera::init, or the tool that initialised comm, when the world has more than one
// rank) sends, watches and listens for notices:
//   - its predecessor silent for the timeout: it tells every rank (one message each) and ends;
//   - a notice from another rank: it ends, naming the rank the notice names;
//   - a rank that leaves with an error tells every rank, whose job would otherwise wait on it;
//   - SIGTERM (mpirun's way of ending the others when one process dies): it ends at once,
//     naming the ranks on this host that have already died (their /proc entries).
// Each ending prints one line to stderr and exits with kExitPeerLost (75) or 128+SIGTERM after a
// grace period that lets the other ranks print theirs. A rank that finishes normally says goodbye
// to its watcher first, so a rank that finishes early is never taken for dead.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "comm/heartbeat.h"
#include "common/settings.h"

namespace tessera {
namespace runtime {

using comm::PeerInfo;

inline constexpr NumberSetting kHeartbeatTimeout{
    "TESSERA_HEARTBEAT_TIMEOUT",
    10.0,
    "seconds",
    false,
    "no monitor",
    "a rank whose ring neighbour hears no heartbeat from it this long is taken for dead (killed, "
    "hung, or cut off): every rank ends with exit status 75, naming it and what it had in flight "
    "(`docs/reliability.md`)"};

// Exit status of a rank that ended because another rank died or failed.
constexpr int kExitPeerLost = 75;

// Starts the monitor (collective over MPI_COMM_WORLD) after comm::init, from the agreed
// TESSERA_HEARTBEAT_TIMEOUT. A timeout of 0, a one-rank world or a running monitor: nothing is
// started.
void start_liveness(const SettingValues& settings);
// Stops the monitor before comm::finalize. With `error` non-empty, every rank still running is
// told that this rank failed with that message and ends after a short grace period (unless it
// stops its own monitor first). Never throws.
void stop_liveness(const std::string& error = "");
bool liveness_running();
// Under an interpreter (the Python package): when this rank ends because of another rank (lost,
// failed, or the launcher's SIGTERM), it first publishes its line (lost_peer_error) and waits
// `seconds` before exiting, so that the training loop's waits raise it as an exception an
// elastic wrapper can catch; then the process ends as before, caught or not. 0 (the default):
// it ends after a one-second grace, as tessera train does.
void set_error_window(double seconds);
// The line of this rank's ending once the monitor has decided on it; "" before. Never blocks
// for long.
std::string lost_peer_error();

// Pure parts, unit-tested.

// The line printed when rank `me` ends because `dead` stopped answering (silent for
// `silent_s`, noticed by `noticed_by`).
std::string lost_peer_message(int me, const std::vector<PeerInfo>& peers, int dead, int noticed_by,
                              double silent_s, const std::string& in_flight);
// The line printed when rank `me` ends because rank `failed` left with `error`.
std::string failed_peer_message(int me, const std::vector<PeerInfo>& peers, int failed,
                                const std::string& error, const std::string& in_flight);
// The line printed when the launcher terminates rank `me`; `ended` are the ranks on this host
// found dead (empty: none).
std::string terminated_message(int me, const std::vector<PeerInfo>& peers,
                               const std::vector<int>& ended, const std::string& in_flight);
// The ranks (other than `me`) on `me`'s host whose process has ended, given a process-state
// lookup (pid -> state letter from /proc/PID/stat, '\0' if there is no such process).
std::vector<int> ended_on_this_host(int me, const std::vector<PeerInfo>& peers,
                                    const std::map<int, char>& state_of_pid);

}  // namespace runtime
}  // namespace tessera
