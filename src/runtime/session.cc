// runtime::Session (session.h): the one place a tessera process starts and ends.
#include "runtime/session.h"

#include <utility>

#include "comm/communicator.h"
#include "comm/settings.h"
#include "common/error.h"
#include "common/logging.h"
#include "engine/engine.h"
#include "engine/options.h"
#include "runtime/elastic.h"
#include "runtime/liveness.h"
#include "runtime/memory_policy.h"
#include "tune/config_file.h"
#include "tune/settings.h"
#include "tune/step_tuner.h"

namespace tessera {
namespace runtime {
namespace {

Place place_of(const comm::Communicator& w) {
  Place p;
  p.rank = w.rank();
  p.size = w.size();
  p.local_rank = w.local_rank();
  p.local_size = w.local_size();
  if (const comm::Communicator* cross = w.cross()) {
    p.cross_rank = cross->rank();
    p.cross_size = cross->size();
  }
  p.uniform_nodes = w.uniform_nodes();
  return p;
}

}  // namespace

std::vector<SettingInfo> declared_settings() {
  // In the order of docs/knobs.md's table.
  std::vector<SettingInfo> all = {kLogLevel.info(), kHeartbeatTimeout.info(), kElasticDir.info(),
                                  kElasticGeneration.info(), kElasticSnapshotEvery.info()};
  for (const auto& layer :
       {comm::declared_settings(), engine::declared_settings(),
        std::vector<SettingInfo>{kMallocPolicy.info()}, tune::declared_settings()}) {
    all.insert(all.end(), layer.begin(), layer.end());
  }
  return all;
}

// A config file that cannot be read is this rank's error, reported by every rank once they
// agree (a file present on some hosts only fails everywhere, naming the ranks that lack it).
ResolvedSettings resolve_session_settings(const SessionOptions& options) {
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

struct Session::State {
  bool owns_mpi = false;       // this session initialised MPI, so it finalises it
  bool owns_liveness = false;  // this session started the monitor (a second one finds it running)
  bool ended = false;
  SettingValues settings;
  std::string memory_policy;
  // Declared in the order they are made: destroyed in reverse (the tuner uses the engine, the
  // engine the world).
  std::unique_ptr<comm::Communicator> world;
  Place place;  // of `world`, which does not move
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<tune::StepTuner> tuner;
};

Session::Session(const SessionOptions& options) : s_(std::make_unique<State>()) {
  s_->owns_mpi = !comm::is_initialized();
  try {
    s_->settings = comm::init(options.argc, options.argv, resolve_session_settings(options));
    configure_elastic(s_->settings);
    const bool running = liveness_running();
    start_liveness(s_->settings);
    s_->owns_liveness = !running && liveness_running();
    if (options.raise_on_peer_loss) set_error_window(kHeartbeatTimeout.get(s_->settings));
    s_->memory_policy = apply_malloc_policy(parse_malloc_policy(kMallocPolicy.get(s_->settings)));
    s_->world = comm::Communicator::world();
    s_->place = place_of(*s_->world);
    if (options.engine) {
      s_->engine = std::make_unique<engine::Engine>(*s_->world, engine::options_from(s_->settings));
      if (tune::autotune_requested(s_->settings)) {
        s_->tuner = std::make_unique<tune::StepTuner>(*s_->engine, *s_->world, s_->settings);
      }
    }
  } catch (const std::exception& e) {
    end(e.what());  // the other ranks learn it instead of waiting on this one
    throw;
  }
  TESSERA_LOG(kInfo, "tessera session: ", s_->world->describe(), ", memory policy ",
              s_->memory_policy, ", heartbeat timeout ", kHeartbeatTimeout.get(s_->settings), " s",
              liveness_running() ? "" : " (no monitor)");
}

Session::~Session() { end(""); }

void Session::end(const std::string& error) {
  if (s_->ended) return;
  s_->ended = true;
  s_->tuner.reset();
  // An elastic job's supervisor must learn that this rank failed of itself, unless the error is
  // another rank's failure reaching this one (the engine already shut down by it, or the
  // liveness monitor ending this rank for a peer): then that rank's own record names it.
  if (!error.empty() && s_->world && !(s_->engine && s_->engine->is_shut_down()) &&
      lost_peer_error().empty()) {
    record_own_failure(s_->world->rank(), error);
  }
  if (s_->engine && !error.empty()) {
    try {
      s_->engine->shutdown("rank " + std::to_string(s_->world->rank()) + " failed: " + error);
    } catch (...) {
    }
  }
  try {
    s_->engine.reset();  // its destructor agrees on shutdown with the other ranks
  } catch (...) {
  }
  s_->world.reset();
  // With an error, the ranks still running learn it (whoever started the monitor).
  if (s_->owns_liveness || !error.empty()) stop_liveness(error);
  // MPI initialised by someone else (the application) stays theirs to finalise.
  if (s_->owns_mpi) comm::finalize(error);
}

const SettingValues& Session::settings() const { return s_->settings; }
comm::Communicator& Session::world() const { return *s_->world; }

engine::Engine& Session::engine() const {
  TESSERA_CHECK(s_->engine != nullptr, "this tessera session was opened without an engine");
  return *s_->engine;
}

const Place& Session::place() const { return s_->place; }

double timeout_s(const SettingValues& values) { return comm::kTimeout.get(values); }

void Session::step_done() {
  if (s_->tuner) s_->tuner->after_step();
}
const std::string& Session::memory_policy() const { return s_->memory_policy; }

}  // namespace runtime
}  // namespace tessera
