// Communicator: tessera's handle on a group of MPI ranks.
//
// Each Communicator owns its own duplicated MPI communicator, so concurrent users (the engine,
// the spatial halo exchange, a benchmark) never match each other's messages. A communicator
// made by world() or split() also knows the node structure: local() holds the ranks on the same
// node (MPI_Comm_split_type shared, or pretend nodes of TESSERA_RANKS_PER_NODE consecutive
// ranks), cross() the ranks with the same local rank on every node.
//
// A Communicator is not thread-safe: one thread at a time issues collectives on it. Creating
// one (world, dup, split) is collective over the parent's ranks.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "comm/settings.h"
#include "common/settings.h"

namespace tessera {
namespace comm {

// Initialises MPI with MPI_THREAD_MULTIPLE (throws CommError if the library provides less), then
// agrees on `mine` with every rank: the same values everywhere, or InvalidArgument on every rank
// naming each setting that differs and the ranks (and any rank's `mine.error`). The agreed values
// give the world communicator's Settings (rank 0 reads TESSERA_COST_TABLE for everyone) and the
// log level; they are returned for the layers above to read their own. runtime::Session is the
// one caller: it resolves `mine` against every layer's settings and starts the liveness monitor.
// Safe to call twice (the second call agrees again and replaces the world's settings).
SettingValues init(int* argc, char*** argv, const ResolvedSettings& mine);
// Finalises MPI if init() initialised it; `error` (this rank is leaving because of it) is what
// this rank reports doing meanwhile. Stop the liveness monitor first (runtime/liveness.h), which
// tells the other ranks. Never throws.
void finalize(const std::string& error = "");
bool is_initialized();
// Ranks in MPI_COMM_WORLD (after init).
int world_size();

class ShmArena;
struct CommState;

class Communicator {
 public:
  // A new communicator over every rank (collective over MPI_COMM_WORLD), with the settings init
  // agreed on, or with `settings` (the same on every rank).
  static std::unique_ptr<Communicator> world();
  static std::unique_ptr<Communicator> world(const Settings& settings);

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  // This rank's rank in MPI_COMM_WORLD, and that of member `rank` (for error messages).
  int world_rank() const { return world_rank_of(rank()); }
  int world_rank_of(int rank) const;

  // Node structure. For communicators without one (those returned by local() and cross()),
  // local_size() == size() and num_nodes() == 1.
  int local_rank() const;
  int local_size() const;
  int num_nodes() const;
  int node_index() const;
  // True when every node holds the same number of ranks (hierarchical algorithms need it).
  bool uniform_nodes() const;
  // Same-node ranks / same-local-rank ranks; nullptr on communicators without node structure.
  Communicator* local() const;
  Communicator* cross() const;

  // A communicator over the same ranks with its own message space, and this one's settings or
  // `settings` (the same on every rank). Collective.
  std::unique_ptr<Communicator> dup() const;
  std::unique_ptr<Communicator> dup(const Settings& settings) const;
  // Ranks with equal `color` form one communicator (with this one's settings), ordered by
  // (key, rank). A negative color returns nullptr for that rank. Collective.
  std::unique_ptr<Communicator> split(int color, int key) const;

  // What collectives on this communicator use (timeout, segments, colors, algorithm ranges, cost
  // table). set_settings is for the thread that issues this communicator's collectives (the
  // engine switches tuned settings on its own); every rank must set the same at the same point.
  const Settings& settings() const;
  void set_settings(const Settings& settings);

  // Persistent scratch memory owned by this communicator: slot `slot` (0..3) grown to at least
  // `bytes` and kept for later calls, so collectives do not page-fault fresh memory every call.
  void* scratch(int slot, size_t bytes);

  // Node-local shared memory arena for the hierarchical algorithm with at least
  // `bytes_per_rank` per buffer, created (or grown) on first use: collective over local(),
  // guarded by a barrier with a deadline.
  ShmArena& shm_arena(size_t bytes_per_rank);

  // Describes the communicator for messages: "comm(size 4, node 0/2, local 1/2)".
  std::string describe() const;

  // Internal: the MPI side of this communicator (defined in comm/mpi_internal.h).
  CommState& state() const { return *state_; }

 private:
  explicit Communicator(std::unique_ptr<CommState> state);
  static std::unique_ptr<Communicator> from_dup(CommState&& base, bool with_nodes,
                                                const Settings& settings);
  friend struct CommState;

  std::unique_ptr<CommState> state_;
};

}  // namespace comm
}  // namespace tessera
