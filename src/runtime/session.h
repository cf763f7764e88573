// The process's tessera session (DESIGN.md: runtime owns the process). Every entry point opens
// one and nothing else starts or ends the process: tessera::init (and so the Python
// extension), the `tessera` and `tessera-bench` binaries, and the multi-rank test main (whose
// libtorch tests then open a second through tessera::init: it finds MPI and the monitor
// running and leaves them to the first).
//
// Opening one, collective over MPI_COMM_WORLD: resolves the options against every declared
// setting (explicit > environment > config file; an unknown name is named with the nearest
// known one), initialises MPI and agrees the values across ranks, sets the process memory
// policy, starts the liveness monitor from the agreed TESSERA_HEARTBEAT_TIMEOUT, and makes the
// world communicator, the engine and, with TESSERA_AUTOTUNE=1, the tuner (fed by step_done).
// Ending it (end() or the destructor) undoes that in reverse and finalises MPI if the session
// initialised it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/settings.h"

namespace tessera {
namespace comm {
class Communicator;
}
namespace engine {
class Engine;
}
namespace runtime {

// TESSERA_TIMEOUT in seconds among `values` (its default when absent): how long any wait of
// this process may last.
double timeout_s(const SettingValues& values);

// Where this process sits: in the world, on its node (local) and among the ranks of its local
// rank across nodes (cross); what Horovod's rank(), local_rank(), cross_rank() ... report.
struct Place {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;
  int cross_rank = 0, cross_size = 1;
  bool uniform_nodes = true;  // every node runs as many ranks
};

// Every layer's settings in one list: what a session checks names against and docs/knobs.md
// shows. Each layer declares its own beside the code that uses them; this only collects them.
std::vector<SettingInfo> declared_settings();

struct SessionOptions {
  // Explicit values (a command line's, init's `settings`): over the environment and the file.
  SettingValues settings;
  bool read_environment = true;
  // A file `tessera tune` wrote: below the environment. One a rank cannot read fails on every
  // rank, naming the ranks that lack it.
  std::string config_file;
  // Under an interpreter (the Python package): a lost rank is first an exception in the
  // training loop (liveness.h's set_error_window, for TESSERA_HEARTBEAT_TIMEOUT seconds).
  bool raise_on_peer_loss = false;
  // Whether to make the engine (and the tuner): the collective benchmarks measure comm and
  // bare engines of their own, the multi-rank test main leaves it to the tests.
  bool engine = true;
  // main()'s arguments, for MPI_Init_thread (null: none).
  int* argc = nullptr;
  char*** argv = nullptr;
};

// This rank's settings from `options` before the ranks agree: what a session hands to comm's
// agreement. A config file that cannot be read is this rank's error.
ResolvedSettings resolve_session_settings(const SessionOptions& options);

class Session {
 public:
  explicit Session(const SessionOptions& options);
  // end(""): never throws.
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Ends the session: the tuner, the engine (agreed with the other ranks; with an error, its
  // pending work fails on every rank with "rank R failed: <error>"), the liveness monitor (with
  // an error, the ranks still running learn it and end), then MPI if this session initialised
  // it. Never throws; a second call does nothing.
  void end(const std::string& error = "");

  // The values every rank agreed on.
  const SettingValues& settings() const;
  comm::Communicator& world() const;
  const Place& place() const;
  // InvalidArgument when the session was opened without one (options.engine false).
  engine::Engine& engine() const;
  // One training step is done (collective: every rank after each optimizer step): the tuner,
  // when there is one, counts it and may move to its next configuration.
  void step_done();
  // What the memory policy set ("keep (...)" or "system (glibc defaults)").
  const std::string& memory_policy() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace runtime
}  // namespace tessera
