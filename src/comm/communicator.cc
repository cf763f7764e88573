#include "comm/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "comm/backoff.h"
#include "comm/collectives.h"
#include "comm/liveness.h"
#include "comm/mpi_internal.h"
#include "comm/selector.h"
#include "comm/shm_arena.h"
#include "common/activity.h"
#include "common/knobs.h"
#include "common/logging.h"
#include "common/reduce.h"

namespace tessera {
namespace comm {
namespace {
bool g_we_initialised = false;

// Broadcasts `text` from rank 0 of MPI_COMM_WORLD.
void broadcast_string(std::string& text, int rank) {
  unsigned long long n = text.size();
  TESSERA_MPI_CHECK(MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD));
  if (rank != 0) text.assign(static_cast<size_t>(n), '\0');
  if (n > 0) {
    TESSERA_MPI_CHECK(MPI_Bcast(&text[0], static_cast<int>(n), MPI_CHAR, 0, MPI_COMM_WORLD));
  }
}

// Every rank must choose the same algorithms, segment sizes and node split, so rank 0's
// TESSERA_* values and cost table are used everywhere (mpirun -x or Slurm pass the same
// environment to all ranks anyway). A bad value fails on every rank with the same message.
void share_configuration(int rank) {
  std::string values;
  if (rank == 0) {
    for (const auto& kv : knob_values_from_environment()) {
      values += kv.first + '\0' + kv.second + '\0';
    }
  }
  broadcast_string(values, rank);
  std::vector<std::pair<std::string, std::string>> parsed;
  for (size_t i = 0; i < values.size();) {
    const size_t a = values.find('\0', i);
    const size_t b = values.find('\0', a + 1);
    parsed.emplace_back(values.substr(i, a - i), values.substr(a + 1, b - a - 1));
    i = b + 1;
  }
  const Knobs k = parse_knobs([&](const char* name) -> const char* {
    for (const auto& kv : parsed) {
      if (kv.first == name) return kv.second.c_str();
    }
    return nullptr;
  });
  set_knobs(k);
  CostTable table;
  table.segment_bytes = k.segment_bytes;
  table.shm_bytes = k.shm_bytes;
  table.colors = k.colors;
  if (!k.cost_table.empty()) {
    std::string text;
    std::string error;
    if (rank == 0) {
      std::ifstream in(k.cost_table);
      std::stringstream buf;
      buf << in.rdbuf();
      if (!in) error = "cannot read TESSERA_COST_TABLE='" + k.cost_table + "'";
      text = buf.str();
    }
    broadcast_string(error, rank);
    if (!error.empty()) throw InvalidArgument(error + " (rank 0 reads it for everyone)");
    broadcast_string(text, rank);
    table = cost_table_from_json(text);
    table.segment_bytes = k.segment_bytes;
    table.shm_bytes = k.shm_bytes;
    table.colors = k.colors;
  }
  set_cost_table(table);
}

}  // namespace

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

void init(int* argc, char*** argv) {
  int already = 0;
  TESSERA_MPI_CHECK(MPI_Initialized(&already));
  int provided = MPI_THREAD_SINGLE;
  if (already) {
    TESSERA_MPI_CHECK(MPI_Query_thread(&provided));
  } else {
    TESSERA_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    g_we_initialised = true;
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    throw CommError(
        "the MPI library provides thread level " + std::to_string(provided) +
        " but tessera needs MPI_THREAD_MULTIPLE (" + std::to_string(MPI_THREAD_MULTIPLE) +
        "): its engine thread and the training thread both call MPI. Use an MPI built with "
        "thread support (Debian's Open MPI has it), or initialise MPI with MPI_Init_thread.");
  }
  int rank = 0;
  TESSERA_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  set_log_rank(rank);
  share_configuration(rank);
  {
    // Ranks on this node against its cores decides how waits back off (backoff.h).
    MPI_Comm node = MPI_COMM_NULL;
    TESSERA_MPI_CHECK(
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
    int node_ranks = 1;
    TESSERA_MPI_CHECK(MPI_Comm_size(node, &node_ranks));
    MPI_Comm_free(&node);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    set_oversubscribed(cores > 0 && node_ranks > cores);
  }
  start_liveness(knobs().heartbeat_timeout_s);
  TESSERA_LOG(kDebug, "reduction kernels: ", reduce_isa());
}

void finalize(const std::string& error) {
  activity::set_phase(error.empty() ? "its work is done; waiting in MPI_Finalize for the others"
                                    : "failed (" + error + "); in MPI_Finalize");
  stop_liveness(error);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_we_initialised && !finalized) MPI_Finalize();
  g_we_initialised = false;
}

bool is_initialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  int finalized = 0;
  MPI_Finalized(&finalized);
  return flag != 0 && finalized == 0;
}

CommState::~CommState() {
  // Children and the arena go first: they hold communicators derived from this one.
  arena.reset();
  local.reset();
  cross.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm);
}

Communicator::Communicator(std::unique_ptr<CommState> state) : state_(std::move(state)) {}
Communicator::~Communicator() = default;

namespace {

// Fills rank, size and world ranks of a state whose comm is set; sets errors to return.
void describe_members(CommState& s) {
  TESSERA_MPI_CHECK(MPI_Comm_set_errhandler(s.comm, MPI_ERRORS_RETURN));
  TESSERA_MPI_CHECK(MPI_Comm_rank(s.comm, &s.rank));
  TESSERA_MPI_CHECK(MPI_Comm_size(s.comm, &s.size));
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  TESSERA_MPI_CHECK(MPI_Comm_group(s.comm, &group));
  TESSERA_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  std::vector<int> mine(static_cast<size_t>(s.size));
  for (int i = 0; i < s.size; ++i) mine[static_cast<size_t>(i)] = i;
  s.world_ranks.assign(static_cast<size_t>(s.size), -1);
  TESSERA_MPI_CHECK(
      MPI_Group_translate_ranks(group, s.size, mine.data(), world, s.world_ranks.data()));
  MPI_Group_free(&group);
  MPI_Group_free(&world);
}

std::unique_ptr<CommState> state_over(MPI_Comm comm) {
  auto s = std::make_unique<CommState>();
  s->comm = comm;
  describe_members(*s);
  return s;
}

}  // namespace

std::unique_ptr<Communicator> Communicator::from_dup(CommState&& base, bool with_nodes) {
  std::unique_ptr<CommState> s(new CommState());
  s->comm = base.comm;
  base.comm = MPI_COMM_NULL;
  describe_members(*s);
  if (with_nodes) {
    // Real nodes: ranks that can share memory. Pretend nodes: consecutive groups of
    // TESSERA_RANKS_PER_NODE within a real node, so that hierarchy is testable on one machine.
    MPI_Comm shared = MPI_COMM_NULL;
    TESSERA_MPI_CHECK(
        MPI_Comm_split_type(s->comm, MPI_COMM_TYPE_SHARED, s->rank, MPI_INFO_NULL, &shared));
    int shared_rank = 0;
    TESSERA_MPI_CHECK(MPI_Comm_rank(shared, &shared_rank));
    MPI_Comm local = shared;
    const int per_node = knobs().ranks_per_node;
    if (per_node > 0) {
      TESSERA_MPI_CHECK(MPI_Comm_split(shared, shared_rank / per_node, shared_rank, &local));
      MPI_Comm_free(&shared);
    }
    std::unique_ptr<Communicator> local_comm(new Communicator(state_over(local)));
    const int local_rank = local_comm->rank();
    const int local_size = local_comm->size();
    // Node index: the number of node leaders (local rank 0) with a lower world position.
    const int leader = local_rank == 0 ? 1 : 0;
    int leaders_before = 0;
    TESSERA_MPI_CHECK(MPI_Exscan(&leader, &leaders_before, 1, MPI_INT, MPI_SUM, s->comm));
    if (s->rank == 0) leaders_before = 0;  // MPI_Exscan leaves rank 0's result undefined
    int node = leaders_before;
    TESSERA_MPI_CHECK(MPI_Bcast(&node, 1, MPI_INT, 0, local_comm->state().comm));
    int total_leaders = 0;
    TESSERA_MPI_CHECK(MPI_Allreduce(&leader, &total_leaders, 1, MPI_INT, MPI_SUM, s->comm));
    int sizes[2] = {local_size, -local_size};
    TESSERA_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, s->comm));
    s->node_index = node;
    s->num_nodes = total_leaders;
    s->uniform_nodes = sizes[0] == -sizes[1];
    MPI_Comm cross = MPI_COMM_NULL;
    TESSERA_MPI_CHECK(MPI_Comm_split(s->comm, local_rank, s->rank, &cross));
    s->local = std::move(local_comm);
    s->cross.reset(new Communicator(state_over(cross)));
  }
  return std::unique_ptr<Communicator>(new Communicator(std::move(s)));
}

std::unique_ptr<Communicator> Communicator::world() {
  TESSERA_CHECK(is_initialized(), "tessera::comm::init() must run before Communicator::world()");
  CommState base;
  TESSERA_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &base.comm));
  return from_dup(std::move(base), /*with_nodes=*/true);
}

std::unique_ptr<Communicator> Communicator::dup() const {
  CommState base;
  TESSERA_MPI_CHECK(MPI_Comm_dup(state_->comm, &base.comm));
  return from_dup(std::move(base), state_->local != nullptr);
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) const {
  CommState base;
  TESSERA_MPI_CHECK(
      MPI_Comm_split(state_->comm, color < 0 ? MPI_UNDEFINED : color, key, &base.comm));
  if (base.comm == MPI_COMM_NULL) return nullptr;
  return from_dup(std::move(base), /*with_nodes=*/true);
}

int Communicator::rank() const { return state_->rank; }
int Communicator::size() const { return state_->size; }
int Communicator::world_rank_of(int r) const {
  return state_->world_ranks.at(static_cast<size_t>(r));
}
int Communicator::local_rank() const { return state_->local ? state_->local->rank() : rank(); }
int Communicator::local_size() const { return state_->local ? state_->local->size() : size(); }
int Communicator::num_nodes() const { return state_->num_nodes; }
int Communicator::node_index() const { return state_->node_index; }
bool Communicator::uniform_nodes() const { return state_->uniform_nodes; }
Communicator* Communicator::local() const { return state_->local.get(); }
Communicator* Communicator::cross() const { return state_->cross.get(); }

void* Communicator::scratch(int slot, size_t bytes) {
  TESSERA_ASSERT(slot >= 0 && slot < 4);
  CommState::Scratch& s = state_->scratch[slot];
  if (s.bytes < bytes) {
    // Grow geometrically so that a slowly growing size does not reallocate every call.
    const size_t want = std::max(bytes, s.bytes * 2);
    void* p = nullptr;
    if (posix_memalign(&p, 64, want) != 0) {
      throw Error(detail::concat("cannot allocate ", want, " bytes of scratch memory"));
    }
    s.data.reset(static_cast<char*>(p));
    s.bytes = want;
  }
  return s.data.get();
}

ShmArena& Communicator::shm_arena(size_t bytes_per_rank) {
  TESSERA_ASSERT(state_->local != nullptr, "shm_arena needs a communicator with nodes");
  // Grow only: a smaller request reuses the arena (every rank asks for the same sizes in the
  // same order, so every rank grows at the same call).
  if (!state_->arena || state_->arena->bytes_per_rank() < bytes_per_rank) {
    state_->arena.reset();
    state_->arena = std::make_unique<ShmArena>(*state_->local, bytes_per_rank, knobs().timeout_s);
  }
  return *state_->arena;
}

std::string Communicator::describe() const {
  return detail::concat("communicator of ", size(), " ranks (", num_nodes(), " node",
                        num_nodes() == 1 ? "" : "s", ", ", local_size(), " per node)");
}

}  // namespace comm
}  // namespace tessera
