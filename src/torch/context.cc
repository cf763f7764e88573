// init / shutdown / rank queries of include/tessera/torch.h.
#include "torch/context.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

#include "common/error.h"
#include "common/logging.h"
#include "common/settings.h"
#include "gpu/nccl.h"
#include "runtime/liveness.h"
#include "tessera/torch.h"
#include "torch/memory_policy.h"
#include "tune/config_file.h"
#include "tune/settings.h"

namespace tessera {
namespace detail {
namespace {

std::mutex g_mu;
std::unique_ptr<Context> g_context;
bool g_owns_mpi = false;  // init() initialised MPI, so shutdown() finalises it

}  // namespace

Context& context() {
  std::lock_guard<std::mutex> lock(g_mu);
  TESSERA_CHECK(g_context != nullptr,
                "tessera is not initialised: call tessera::init() first (under mpirun)");
  return *g_context;
}

namespace {
// The first name this thread's last refusal covered ("" once it took another name).
thread_local std::string t_last_refused;
}  // namespace

void refuse(const std::vector<std::string>& names, int process_set, const std::string& reason) {
  if (names.empty()) return;
  if (t_last_refused == names.front()) {
    t_last_refused.clear();
    return;
  }
  for (const std::string& n : names) context().engine->refuse(n, process_set, reason);
  t_last_refused = names.front();
}

void refuse(const std::string& name, int process_set, const std::string& reason, size_t members) {
  std::vector<std::string> names;
  if (members == 0) names.push_back(name);
  for (size_t i = 0; i < members; ++i) names.push_back(name + "." + std::to_string(i));
  refuse(names, process_set, reason);
}

std::string take_name(const std::string& kind, const std::string& name, int process_set) {
  t_last_refused.clear();
  if (!name.empty()) return name;
  static std::mutex mu;
  static std::map<std::pair<std::string, int>, uint64_t> counters;
  std::lock_guard<std::mutex> lock(mu);
  const uint64_t n = counters[{kind, process_set}]++;
  return kind + ".set" + std::to_string(process_set) + ".noname." + std::to_string(n);
}

std::string begin_op(const std::string& kind, const std::string& name, int process_set) {
  context().engine->process_set_size(process_set);  // throws for a set this rank is not in
  const std::string lost = lost_peer_error();
  if (!lost.empty()) throw Error(lost);  // the job is ending: no new collective
  return take_name(kind, name, process_set);
}

int set_rank_of(int global_root, int process_set, const std::string& name) {
  const std::vector<int> ranks = context().engine->process_set_ranks(process_set);
  const auto it = std::find(ranks.begin(), ranks.end(), global_root);
  if (it != ranks.end()) return static_cast<int>(it - ranks.begin());
  std::string list;
  for (int r : ranks) list += (list.empty() ? "" : ", ") + std::to_string(r);
  throw InvalidArgument(concat("broadcast '", name, "': root rank ", global_root,
                               " is not in process set ", process_set, " (its ranks: ", list,
                               "); the root is a rank of the whole job, as in Horovod"));
}

}  // namespace detail

// A config file that cannot be read is this rank's error, reported by every rank once they
// agree (a file present on some hosts only fails everywhere, naming the ranks that lack it).
ResolvedSettings resolve_init_options(const InitOptions& options) {
  SettingSources sources;
  sources.explicit_values = options.settings;
  if (options.read_environment) sources.environment = environment_settings();
  std::string config_error;
  if (!options.config_file.empty()) {
    try {
      sources.config_file = tune::read_config(options.config_file);
    } catch (const std::exception& e) {
      config_error = e.what();
    }
  }
  ResolvedSettings r = resolve_settings(sources, declared_settings());
  if (!config_error.empty()) r.error += (r.error.empty() ? "" : "; ") + config_error;
  return r;
}

void init(const InitOptions& options) {
  std::lock_guard<std::mutex> lock(detail::g_mu);
  if (detail::g_context) return;
  detail::g_owns_mpi = !comm::is_initialized();
  auto ctx = std::make_unique<detail::Context>();
  ctx->settings = comm::init(nullptr, nullptr, resolve_init_options(options));
  const SettingValues& agreed = ctx->settings;
  runtime::start_liveness(agreed);
  if (options.raise_on_peer_loss) {
    runtime::set_error_window(runtime::kHeartbeatTimeout.get(agreed));
  }
  const std::string policy =
      detail::apply_malloc_policy(detail::parse_malloc_policy(detail::kMallocPolicy.get(agreed)));
  ctx->world = comm::Communicator::world();
  ctx->engine = std::make_unique<engine::Engine>(*ctx->world, engine::options_from(agreed));
  if (tune::autotune_requested(agreed)) {
    ctx->tuner = std::make_unique<tune::StepTuner>(*ctx->engine, *ctx->world, agreed);
  }
  TESSERA_LOG(kInfo, "tessera::init: ", ctx->world->describe(), ", memory policy ", policy);
  detail::g_context = std::move(ctx);
}

void shutdown() { shutdown(std::string()); }

void shutdown(const std::string& error) {
  std::unique_ptr<detail::Context> ctx;
  {
    std::lock_guard<std::mutex> lock(detail::g_mu);
    ctx = std::move(detail::g_context);
  }
  if (ctx) ctx->tuner.reset();
  if (ctx && !error.empty()) {
    try {
      ctx->engine->shutdown("rank " + std::to_string(ctx->world->rank()) + " failed: " + error);
    } catch (...) {
    }
  }
  ctx.reset();  // the engine's destructor agrees on shutdown with the other ranks
  // With an error, the ranks still running learn it (and end) instead of waiting on this one.
  runtime::stop_liveness(error);
  // MPI initialised by someone else (the application, a test main) stays theirs to finalise.
  if (detail::g_owns_mpi) comm::finalize(error);
  detail::g_owns_mpi = false;
}

std::string lost_peer_error() { return runtime::lost_peer_error(); }
bool nccl_built() { return gpu::nccl_built(); }

void step_done() {
  detail::Context& ctx = detail::context();
  if (ctx.tuner) ctx.tuner->after_step();
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(detail::g_mu);
  return detail::g_context != nullptr;
}

int rank() { return detail::context().world->rank(); }
int size() { return detail::context().world->size(); }
int local_rank() { return detail::context().world->local_rank(); }
int local_size() { return detail::context().world->local_size(); }
int cross_rank() {
  const comm::Communicator* cross = detail::context().world->cross();
  return cross ? cross->rank() : 0;
}
int cross_size() {
  const comm::Communicator* cross = detail::context().world->cross();
  return cross ? cross->size() : 1;
}
bool is_homogeneous() { return detail::context().world->uniform_nodes(); }
engine::Engine& global_engine() { return *detail::context().engine; }
int add_process_set(std::vector<int> ranks) {
  return global_engine().add_process_set(std::move(ranks));
}
void remove_process_set(int id) { global_engine().remove_process_set(id); }
int process_set_rank(int id) { return global_engine().process_set_rank(id); }
int process_set_size(int id) { return global_engine().process_set_size(id); }
bool in_process_set(int id) { return global_engine().in_process_set(id); }
std::vector<int> process_set_ranks(int id) { return global_engine().process_set_ranks(id); }

SettingValues settings() {
  std::lock_guard<std::mutex> lock(detail::g_mu);
  return detail::g_context ? detail::g_context->settings : SettingValues{};
}

double timeout_s() { return comm::kTimeout.get(settings()); }

std::unique_ptr<comm::Communicator> new_world_communicator() {
  return detail::context().world->dup();
}

void start_timeline(const std::string& path) { global_engine().start_timeline(path); }
void stop_timeline() { global_engine().stop_timeline(); }
bool timeline_active() { return global_engine().tracing(); }
void trace(const std::string& row, const std::string& name,
           std::chrono::steady_clock::time_point begin, std::chrono::steady_clock::time_point end) {
  global_engine().trace(row, name, begin, end);
}

}  // namespace tessera
