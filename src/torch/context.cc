// init / shutdown / rank queries of include/tessera/torch.h.
#include "torch/context.h"

#include <atomic>
#include <map>
#include <mutex>

#include "common/error.h"
#include "common/knobs.h"
#include "common/logging.h"
#include "tessera/torch.h"
#include "torch/memory_policy.h"

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

std::string auto_name(const char* kind) {
  static std::mutex mu;
  static std::map<std::string, uint64_t> counters;
  std::lock_guard<std::mutex> lock(mu);
  return std::string(kind) + ".noname." + std::to_string(counters[kind]++);
}

}  // namespace detail

void init() {
  std::lock_guard<std::mutex> lock(detail::g_mu);
  if (detail::g_context) return;
  detail::g_owns_mpi = !comm::is_initialized();
  comm::init(nullptr, nullptr);
  const std::string policy =
      detail::apply_malloc_policy(detail::parse_malloc_policy(knobs().malloc_policy));
  auto ctx = std::make_unique<detail::Context>();
  ctx->world = comm::Communicator::world();
  ctx->engine = std::make_unique<engine::Engine>(*ctx->world);
  if (knobs().autotune) {
    ctx->tuner = std::make_unique<tune::StepTuner>(*ctx->engine, *ctx->world, knobs());
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
  // MPI initialised by someone else (the application, a test main) stays theirs to finalise.
  if (detail::g_owns_mpi) comm::finalize(error);
  detail::g_owns_mpi = false;
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(detail::g_mu);
  return detail::g_context != nullptr;
}

int rank() { return detail::context().world->rank(); }
int size() { return detail::context().world->size(); }
int local_rank() { return detail::context().world->local_rank(); }
int local_size() { return detail::context().world->local_size(); }
engine::Engine& global_engine() { return *detail::context().engine; }

}  // namespace tessera
