// Internal to src/comm: the MPI side of a Communicator and the error macro for MPI calls.
#pragma once

#include <mpi.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"

namespace tessera {
namespace comm {

// Turns an MPI return code into tessera::CommError with MPI_Error_string.
std::string mpi_error_string(int code);

#define TESSERA_MPI_CHECK(call)                                                \
  do {                                                                         \
    const int tessera_rc_ = (call);                                            \
    if (tessera_rc_ != MPI_SUCCESS) {                                          \
      throw ::tessera::CommError(::tessera::detail::concat(                    \
          #call " failed: ", ::tessera::comm::mpi_error_string(tessera_rc_))); \
    }                                                                          \
  } while (0)

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// The last algorithm choices of a communicator, so that a steady stream of allreduces pays a
// hash lookup, not a walk over the cost table (collectives.cc). Emptied when settings change.
struct ChoiceCache {
  static constexpr size_t kSlots = 64;
  struct Entry {
    bool used = false;
    size_t bytes = 0;
    Algorithm requested = Algorithm::kAuto;
    Algorithm algorithm = Algorithm::kAuto;
    Algorithm cross_algorithm = Algorithm::kRing;
  };
  Entry slots[kSlots];
};

struct CommState {
  MPI_Comm comm = MPI_COMM_NULL;
  Settings settings;
  ChoiceCache choices;
  int rank = 0;
  int size = 1;
  std::vector<int> world_ranks;  // world rank of each member
  int node_index = 0;
  int num_nodes = 1;
  bool uniform_nodes = true;
  std::unique_ptr<Communicator> local;
  std::unique_ptr<Communicator> cross;
  std::unique_ptr<ShmArena> arena;
  struct Scratch {
    std::unique_ptr<char, FreeDeleter> data;
    size_t bytes = 0;
  };
  Scratch scratch[4];

  ~CommState();
};

inline MPI_Comm mpi_comm(const Communicator& c) { return c.state().comm; }

}  // namespace comm
}  // namespace tessera
