#include "common/knobs.h"

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <mutex>

#include "common/error.h"

namespace tessera {
namespace {

Knobs& current() {
  static Knobs k;
  return k;
}

[[noreturn]] void bad_knob(const char* name, const std::string& value, const std::string& why) {
  for (const KnobInfo& info : knob_table()) {
    if (std::string(info.name) == name) {
      throw InvalidArgument(detail::concat(name, "='", value, "' is not accepted: ", why,
                                           "; accepted: ", info.accepted));
    }
  }
  throw InvalidArgument(detail::concat(name, "='", value, "': ", why));
}

long parse_int(const char* name, const std::string& text, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0) bad_knob(name, text, "not an integer");
  if (v < lo || v > hi) bad_knob(name, text, "out of range");
  return v;
}

}  // namespace

const std::vector<KnobInfo>& knob_table() {
  static const std::vector<KnobInfo> table = {
      {"TESSERA_LOG_LEVEL", "warning", "debug, info, warning, error",
       "log lines below this level are dropped"},
      {"TESSERA_TIMEOUT", "300", "seconds, a number > 0",
       "longest any blocking wait may take before it fails with TimeoutError"},
      {"TESSERA_HEARTBEAT_TIMEOUT", "10", "seconds, a number >= 0 (0: no monitor)",
       "a rank silent this long (no heartbeat on its ring neighbour) is taken for dead: every "
       "rank ends naming it and what it had in flight"},
      {"TESSERA_RANKS_PER_NODE", "0", "an integer >= 0",
       "groups consecutive ranks into pretend nodes of this size so that hierarchical "
       "algorithms are testable on one machine; 0 uses the real node split"},
      {"TESSERA_ALLREDUCE", "(empty: auto)",
       "ALGO or ALGO:LO-HI[;ALGO:LO-HI...] with ALGO one of auto ring rhd dbtree multicolor "
       "hierarchical mpi, LO and HI byte sizes (K/M/G suffixes) or max",
       "allreduce algorithm by message size; sizes outside every range use auto"},
      {"TESSERA_COLORS", "4", "an integer from 1 to 16",
       "number of colors (concurrent trees) of the multicolor algorithm"},
      {"TESSERA_SEGMENT_BYTES", "256KiB", "a byte size from 1KiB to 1GiB",
       "pipelining unit of the point-to-point algorithms (ring, dbtree, multicolor)"},
      {"TESSERA_SHM_BYTES", "1MiB", "a byte size from 4KiB to 1GiB",
       "bytes per rank staged through node-local shared memory at a time (hierarchical)"},
      {"TESSERA_COST_TABLE", "(empty: built in)", "a path to a JSON file",
       "cost table written by `tessera bench allreduce --calibrate`, used by auto"},
      {"TESSERA_CYCLE_TIME", "1", "milliseconds, a number >= 0",
       "time between the engine's negotiation cycles; 0 starts a cycle as soon as work arrives"},
      {"TESSERA_IDLE_BACKOFF", "8", "milliseconds, a number >= 0",
       "while every rank is idle the wait between cycles doubles up to this; at most this much "
       "latency is added to the first collective after a quiet spell"},
      {"TESSERA_FUSION_THRESHOLD", "128MiB", "a byte size (K/M/G suffixes), 0 turns fusion off",
       "ready tensors are packed into one fusion buffer up to this size"},
      {"TESSERA_CACHE_CAPACITY", "1024", "an integer from 0 to 1048576",
       "entries of the engine's response cache; 0 turns it off"},
      {"TESSERA_STALL_CHECK_TIME", "60", "seconds, a number > 0",
       "a tensor waiting longer than this for other ranks is reported with the ranks it waits on"},
      {"TESSERA_STALL_SHUTDOWN_TIME", "300", "seconds, a number >= 0 (0: never)",
       "a stall longer than this fails every pending handle with the stall report"},
      {"TESSERA_TIMELINE", "(empty: none)", "a path to a JSON file",
       "Chrome/Perfetto trace of the engine: negotiation, queue, fusion copies, collectives"},
      {"TESSERA_MALLOC_POLICY", "keep", "keep, system",
       "process memory policy set at tessera::init: keep freed buffers for reuse, or glibc's "
       "defaults"},
      {"TESSERA_AUTOTUNE", "0", "0, 1",
       "search the engine's knobs during the first training steps and keep the best"},
      {"TESSERA_AUTOTUNE_LOG", "(empty: none)", "a path",
       "JSON lines: every configuration the autotuner tried, with its samples and score"},
      {"TESSERA_AUTOTUNE_CONFIG", "tessera-tuned.json", "a path",
       "where the autotuner writes the best configuration, for `tessera train --config`"},
      {"TESSERA_AUTOTUNE_WARMUP_STEPS", "5", "an integer from 0 to 100000",
       "training steps before the autotuner's first sample"},
      {"TESSERA_AUTOTUNE_STEPS_PER_SAMPLE", "3", "an integer from 1 to 100000",
       "training steps per sample of the autotuner's score"},
      {"TESSERA_AUTOTUNE_SAMPLES", "3", "an integer from 1 to 1000",
       "samples per configuration; the score is their median"},
      {"TESSERA_AUTOTUNE_BAYES_TRIALS", "10", "an integer from 0 to 1000",
       "configurations of the continuous knobs proposed by Bayesian optimisation"},
      {"TESSERA_AUTOTUNE_BOUNDS", "(empty: defaults)",
       "name=LO-HI or name=a,b,... clauses separated by ';' (fusion_threshold, cycle_time_ms, "
       "segment_bytes, colors, algorithm, cache)",
       "the autotuner's search space"},
  };
  return table;
}

size_t parse_bytes(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i > 19) {
    throw InvalidArgument("byte size '" + text +
                          "' is not a number; accepted: digits with an optional K, KiB, M, MiB, "
                          "G or GiB suffix");
  }
  const unsigned long long value = std::strtoull(text.substr(0, i).c_str(), nullptr, 10);
  const std::string suffix = text.substr(i);
  unsigned shift = 0;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else if (suffix == "K" || suffix == "KiB" || suffix == "k") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MiB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GiB") {
    shift = 30;
  } else {
    throw InvalidArgument("byte size '" + text + "' has unknown suffix '" + suffix +
                          "'; accepted: K, KiB, M, MiB, G, GiB or none");
  }
  if (value > (std::numeric_limits<size_t>::max() >> shift)) {
    throw InvalidArgument("byte size '" + text + "' overflows");
  }
  return static_cast<size_t>(value) << shift;
}

Knobs parse_knobs(const std::function<const char*(const char*)>& lookup) {
  Knobs k;
  auto get = [&](const char* name) -> const char* { return lookup(name); };
  if (const char* v = get("TESSERA_LOG_LEVEL")) {
    const std::string s = v;
    if (s == "debug")
      k.log_level = LogLevel::kDebug;
    else if (s == "info")
      k.log_level = LogLevel::kInfo;
    else if (s == "warning")
      k.log_level = LogLevel::kWarning;
    else if (s == "error")
      k.log_level = LogLevel::kError;
    else
      bad_knob("TESSERA_LOG_LEVEL", s, "unknown level");
  }
  if (const char* v = get("TESSERA_TIMEOUT")) {
    char* end = nullptr;
    const double t = std::strtod(v, &end);
    if (*v == '\0' || *end != '\0' || !(t > 0)) bad_knob("TESSERA_TIMEOUT", v, "not a number > 0");
    k.timeout_s = t;
  }
  if (const char* v = get("TESSERA_RANKS_PER_NODE")) {
    k.ranks_per_node = static_cast<int>(parse_int("TESSERA_RANKS_PER_NODE", v, 0, 1 << 20));
  }
  if (const char* v = get("TESSERA_ALLREDUCE")) k.allreduce = v;
  if (const char* v = get("TESSERA_COLORS")) {
    k.colors = static_cast<int>(parse_int("TESSERA_COLORS", v, 1, 16));
  }
  auto bytes_knob = [&](const char* name, size_t lo, size_t hi, size_t* out) {
    const char* v = get(name);
    if (v == nullptr) return;
    size_t b = 0;
    try {
      b = parse_bytes(v);
    } catch (const InvalidArgument& e) {
      bad_knob(name, v, e.what());
    }
    if (b < lo || b > hi) bad_knob(name, v, "out of range");
    *out = b;
  };
  bytes_knob("TESSERA_SEGMENT_BYTES", size_t{1} << 10, size_t{1} << 30, &k.segment_bytes);
  bytes_knob("TESSERA_SHM_BYTES", size_t{4} << 10, size_t{1} << 30, &k.shm_bytes);
  if (const char* v = get("TESSERA_COST_TABLE")) k.cost_table = v;
  auto seconds_knob = [&](const char* name, bool allow_zero, double* out) {
    const char* v = get(name);
    if (v == nullptr) return;
    char* end = nullptr;
    const double t = std::strtod(v, &end);
    if (*v == '\0' || *end != '\0' || !(allow_zero ? t >= 0 : t > 0) || !(t < 1e9)) {
      bad_knob(name, v, allow_zero ? "not a number >= 0" : "not a number > 0");
    }
    *out = t;
  };
  seconds_knob("TESSERA_HEARTBEAT_TIMEOUT", true, &k.heartbeat_timeout_s);
  seconds_knob("TESSERA_CYCLE_TIME", true, &k.cycle_time_ms);
  seconds_knob("TESSERA_IDLE_BACKOFF", true, &k.idle_backoff_ms);
  seconds_knob("TESSERA_STALL_CHECK_TIME", false, &k.stall_check_s);
  seconds_knob("TESSERA_STALL_SHUTDOWN_TIME", true, &k.stall_shutdown_s);
  bytes_knob("TESSERA_FUSION_THRESHOLD", 0, size_t{1} << 40, &k.fusion_threshold);
  if (const char* v = get("TESSERA_CACHE_CAPACITY")) {
    k.cache_capacity = static_cast<size_t>(parse_int("TESSERA_CACHE_CAPACITY", v, 0, 1 << 20));
  }
  if (const char* v = get("TESSERA_TIMELINE")) k.timeline = v;
  if (const char* v = get("TESSERA_MALLOC_POLICY")) {
    const std::string s = v;
    if (s != "keep" && s != "system") {
      throw InvalidArgument("TESSERA_MALLOC_POLICY='" + s +
                            "' is not a memory policy; accepted: keep, system");
    }
    k.malloc_policy = s;
  }
  if (const char* v = get("TESSERA_AUTOTUNE")) {
    k.autotune = parse_int("TESSERA_AUTOTUNE", v, 0, 1) == 1;
  }
  if (const char* v = get("TESSERA_AUTOTUNE_LOG")) k.autotune_log = v;
  if (const char* v = get("TESSERA_AUTOTUNE_CONFIG")) k.autotune_config = v;
  auto int_knob = [&](const char* name, long lo, long hi, int* out) {
    if (const char* v = get(name)) *out = static_cast<int>(parse_int(name, v, lo, hi));
  };
  int_knob("TESSERA_AUTOTUNE_WARMUP_STEPS", 0, 100000, &k.autotune_warmup_steps);
  int_knob("TESSERA_AUTOTUNE_STEPS_PER_SAMPLE", 1, 100000, &k.autotune_steps_per_sample);
  int_knob("TESSERA_AUTOTUNE_SAMPLES", 1, 1000, &k.autotune_samples);
  int_knob("TESSERA_AUTOTUNE_BAYES_TRIALS", 0, 1000, &k.autotune_bayes_trials);
  if (const char* v = get("TESSERA_AUTOTUNE_BOUNDS")) k.autotune_bounds = v;
  for (const KnobInfo& info : knob_table()) {
    if (get(info.name) != nullptr) k.set_explicitly.emplace_back(info.name);
  }
  return k;
}

bool Knobs::is_explicit(const char* name) const {
  for (const std::string& s : set_explicitly) {
    if (s == name) return true;
  }
  return false;
}

const Knobs& knobs() { return current(); }

namespace {
std::atomic<uint64_t> g_generation{1};
}  // namespace

uint64_t knobs_generation() { return g_generation.load(std::memory_order_acquire); }

void set_knobs(const Knobs& k) {
  current() = k;
  g_generation.fetch_add(1, std::memory_order_acq_rel);
  set_log_level(k.log_level);
}

std::vector<std::pair<std::string, std::string>> knob_values_from_environment() {
  // Called once from init, before any thread of ours exists: getenv is safe here.
  std::vector<std::pair<std::string, std::string>> out;
  for (const KnobInfo& info : knob_table()) {
    if (const char* v = std::getenv(info.name)) out.emplace_back(info.name, v);  // NOLINT
  }
  return out;
}

}  // namespace tessera
