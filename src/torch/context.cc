// init / shutdown / rank queries of include/tessera/torch.h: init opens the process's
// runtime::Session, shutdown ends it.
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
#include "runtime/session.h"
#include "tessera/torch.h"

namespace tessera {
namespace detail {
namespace {

std::mutex g_mu;
std::unique_ptr<Context> g_context;

}  // namespace

runtime::SessionOptions session_options(const InitOptions& options) {
  runtime::SessionOptions o;
  o.settings = options.settings;
  o.read_environment = options.read_environment;
  o.config_file = options.config_file;
  o.raise_on_peer_loss = options.raise_on_peer_loss;
  return o;
}

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
  for (const std::string& n : names) context().engine().refuse(n, process_set, reason);
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
  context().engine().process_set_size(process_set);  // throws for a set this rank is not in
  const std::string lost = lost_peer_error();
  if (!lost.empty()) throw Error(lost);  // the job is ending: no new collective
  return take_name(kind, name, process_set);
}

int set_rank_of(int global_root, int process_set, const std::string& name) {
  const std::vector<int> ranks = context().engine().process_set_ranks(process_set);
  const auto it = std::find(ranks.begin(), ranks.end(), global_root);
  if (it != ranks.end()) return static_cast<int>(it - ranks.begin());
  std::string list;
  for (int r : ranks) list += (list.empty() ? "" : ", ") + std::to_string(r);
  throw InvalidArgument(concat("broadcast '", name, "': root rank ", global_root,
                               " is not in process set ", process_set, " (its ranks: ", list,
                               "); the root is a rank of the whole job, as in Horovod"));
}

}  // namespace detail

ResolvedSettings resolve_init_options(const InitOptions& options) {
  return runtime::resolve_session_settings(detail::session_options(options));
}

std::vector<SettingInfo> declared_settings() { return runtime::declared_settings(); }

void init(const InitOptions& options) {
  std::lock_guard<std::mutex> lock(detail::g_mu);
  if (detail::g_context) return;
  auto ctx = std::make_unique<detail::Context>();
  ctx->session = std::make_unique<runtime::Session>(detail::session_options(options));
  detail::g_context = std::move(ctx);
}

void shutdown() { shutdown(std::string()); }

void shutdown(const std::string& error) {
  std::unique_ptr<detail::Context> ctx;
  {
    std::lock_guard<std::mutex> lock(detail::g_mu);
    ctx = std::move(detail::g_context);
  }
  if (ctx) ctx->session->end(error);  // with an error, the ranks still running learn it
}

std::string lost_peer_error() { return runtime::lost_peer_error(); }
bool nccl_built() { return gpu::nccl_built(); }
bool cuda_built() { return gpu::cuda_built(); }
std::string cuda_unavailable_reason() { return gpu::cuda_unavailable_reason(); }

void step_done() { detail::context().session->step_done(); }

bool is_initialized() {
  std::lock_guard<std::mutex> lock(detail::g_mu);
  return detail::g_context != nullptr;
}

namespace {
const runtime::Place& place() { return detail::context().session->place(); }
}  // namespace

int rank() { return place().rank; }
int size() { return place().size; }
int local_rank() { return place().local_rank; }
int local_size() { return place().local_size; }
int cross_rank() { return place().cross_rank; }
int cross_size() { return place().cross_size; }
bool is_homogeneous() { return place().uniform_nodes; }
engine::Engine& global_engine() { return detail::context().engine(); }
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
  return detail::g_context ? detail::g_context->session->settings() : SettingValues{};
}

double timeout_s() { return runtime::timeout_s(settings()); }

void start_timeline(const std::string& path) { global_engine().start_timeline(path); }
void stop_timeline() { global_engine().stop_timeline(); }
bool timeline_active() { return global_engine().tracing(); }
void trace(const std::string& row, const std::string& name,
           std::chrono::steady_clock::time_point begin, std::chrono::steady_clock::time_point end) {
  global_engine().trace(row, name, begin, end);
}

}  // namespace tessera
