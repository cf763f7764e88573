#include "comm/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "comm/backoff.h"
#include "comm/collectives.h"
#include "comm/mpi_internal.h"
#include "comm/selector.h"
#include "comm/shm_arena.h"
#include "common/activity.h"
#include "common/agreement.h"
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

// Every rank's values, serialised as name\0value\0... with its source error in front.
std::string encode(const ResolvedSettings& mine) {
  std::string out = mine.error;
  out.push_back('\0');
  for (const auto& kv : mine.values) out += kv.first + '\0' + kv.second + '\0';
  return out;
}

void decode(const std::string& text, std::string* error, SettingValues* values) {
  size_t i = text.find('\0');
  *error = text.substr(0, i);
  for (++i; i < text.size();) {
    const size_t a = text.find('\0', i);
    const size_t b = text.find('\0', a + 1);
    (*values)[text.substr(i, a - i)] = text.substr(a + 1, b - a - 1);
    i = b + 1;
  }
}

// Every rank must choose the same algorithms, segment sizes and node split: each rank's values
// are gathered and compared, and any rank's problem (a bad source, a differing value) becomes
// the same InvalidArgument on every rank, so that none is left waiting for one that threw.
SettingValues agree(const ResolvedSettings& mine, int size) {
  const std::string text = encode(mine);
  int len = static_cast<int>(text.size());
  std::vector<int> lens(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
  TESSERA_MPI_CHECK(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD));
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[static_cast<size_t>(r)] = total;
    total += lens[static_cast<size_t>(r)];
  }
  std::string all(static_cast<size_t>(total), '\0');
  TESSERA_MPI_CHECK(MPI_Allgatherv(text.data(), len, MPI_CHAR, &all[0], lens.data(), offsets.data(),
                                   MPI_CHAR, MPI_COMM_WORLD));
  std::vector<SettingValues> by_rank(static_cast<size_t>(size));
  std::map<std::string, std::vector<int>> ranks_of_error;  // the same error once, with its ranks
  for (int r = 0; r < size; ++r) {
    std::string error;
    decode(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]),
                      static_cast<size_t>(lens[static_cast<size_t>(r)])),
           &error, &by_rank[static_cast<size_t>(r)]);
    if (!error.empty()) ranks_of_error[error].push_back(r);
  }
  std::string errors;
  for (const auto& er : ranks_of_error) {
    errors += detail::concat(errors.empty() ? "" : "; ", er.second.size() == 1 ? "rank " : "ranks ",
                             rank_list(er.second), ": ", er.first);
  }
  if (!errors.empty()) throw InvalidArgument("tessera settings: " + errors);
  const std::string differ = settings_disagreement(by_rank);
  if (!differ.empty()) throw InvalidArgument("tessera settings: " + differ);
  return by_rank.front();
}

// The text of `path`, read by rank 0 and broadcast (a read error is every rank's).
std::string read_on_rank0(const std::string& path, int rank) {
  std::string text;
  std::string error;
  if (rank == 0) {
    std::ifstream in(path);
    std::stringstream buf;
    buf << in.rdbuf();
    if (!in) error = "cannot read TESSERA_COST_TABLE='" + path + "'";
    text = buf.str();
  }
  broadcast_string(error, rank);
  if (!error.empty()) throw InvalidArgument(error + " (rank 0 reads it for everyone)");
  broadcast_string(text, rank);
  return text;
}

// Rank 0 reads the cost table for everyone; a read error is every rank's. The table predicts
// with the settings' segment size, staging size and colors.
std::shared_ptr<const CostTable> load_cost_table(const std::string& path, const Settings& s,
                                                 int rank) {
  CostTable table;
  if (!path.empty()) table = cost_table_from_json(read_on_rank0(path, rank));
  table.segment_bytes = s.segment_bytes;
  table.shm_bytes = s.shm_bytes;
  table.colors = s.colors;
  return std::make_shared<const CostTable>(table);
}

// The settings init agreed on: the default of Communicator::world().
Settings g_world_settings;

}  // namespace

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

SettingValues init(int* argc, char*** argv, const ResolvedSettings& mine) {
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
  int rank = 0, size = 1;
  TESSERA_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  TESSERA_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  set_log_rank(rank);
  const SettingValues agreed = agree(mine, size);
  set_log_level(parse_log_level(kLogLevel.get(agreed)));
  if (rank == 0) {
    for (const std::string& w : mine.warnings) TESSERA_LOG(kWarning, w);
  }
  Settings world = settings_from(agreed);
  world.cost_table = load_cost_table(kCostTable.get(agreed), world, rank);
  g_world_settings = world;
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
  TESSERA_LOG(kDebug, "reduction kernels: ", reduce_isa());
  return agreed;
}

void finalize(const std::string& error) {
  activity::set_phase(error.empty() ? "its work is done; waiting in MPI_Finalize for the others"
                                    : "failed (" + error + "); in MPI_Finalize");
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_we_initialised && !finalized) MPI_Finalize();
  g_we_initialised = false;
}

int world_size() {
  int size = 1;
  TESSERA_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  return size;
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

std::unique_ptr<CommState> state_over(MPI_Comm comm, const Settings& settings) {
  auto s = std::make_unique<CommState>();
  s->settings = settings;
  s->comm = comm;
  describe_members(*s);
  return s;
}

}  // namespace

std::unique_ptr<Communicator> Communicator::from_dup(CommState&& base, bool with_nodes,
                                                     const Settings& settings) {
  std::unique_ptr<CommState> s(new CommState());
  s->settings = settings;
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
    const int per_node = settings.ranks_per_node;
    if (per_node > 0) {
      TESSERA_MPI_CHECK(MPI_Comm_split(shared, shared_rank / per_node, shared_rank, &local));
      MPI_Comm_free(&shared);
    }
    std::unique_ptr<Communicator> local_comm(new Communicator(state_over(local, settings)));
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
    s->cross.reset(new Communicator(state_over(cross, settings)));
  }
  return std::unique_ptr<Communicator>(new Communicator(std::move(s)));
}

std::unique_ptr<Communicator> Communicator::world() { return world(g_world_settings); }

std::unique_ptr<Communicator> Communicator::world(const Settings& settings) {
  TESSERA_CHECK(is_initialized(), "tessera::comm::init() must run before Communicator::world()");
  CommState base;
  TESSERA_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &base.comm));
  return from_dup(std::move(base), /*with_nodes=*/true, settings);
}

std::unique_ptr<Communicator> Communicator::dup() const { return dup(state_->settings); }

std::unique_ptr<Communicator> Communicator::dup(const Settings& settings) const {
  CommState base;
  TESSERA_MPI_CHECK(MPI_Comm_dup(state_->comm, &base.comm));
  return from_dup(std::move(base), state_->local != nullptr, settings);
}

const Settings& Communicator::settings() const { return state_->settings; }

void Communicator::set_settings(const Settings& settings) {
  state_->settings = settings;
  state_->choices = {};  // chosen under the old settings
  // The node groups keep what depends on this communicator's settings in step.
  if (state_->local) state_->local->set_settings(settings);
  if (state_->cross) state_->cross->set_settings(settings);
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) const {
  CommState base;
  TESSERA_MPI_CHECK(
      MPI_Comm_split(state_->comm, color < 0 ? MPI_UNDEFINED : color, key, &base.comm));
  if (base.comm == MPI_COMM_NULL) return nullptr;
  return from_dup(std::move(base), /*with_nodes=*/true, state_->settings);
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
    state_->arena =
        std::make_unique<ShmArena>(*state_->local, bytes_per_rank, state_->settings.timeout_s);
  }
  return *state_->arena;
}

std::string Communicator::describe() const {
  return detail::concat("communicator of ", size(), " ranks (", num_nodes(), " node",
                        num_nodes() == 1 ? "" : "s", ", ", local_size(), " per node)");
}

}  // namespace comm
}  // namespace tessera
