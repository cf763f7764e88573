// The knob registry: every TESSERA_* environment variable is declared here, once, with its
// default and meaning, and parsed once (at tessera::comm::init) into a Knobs value. Nothing
// else in tessera reads the environment. docs/knobs.md lists the same table; a test keeps the
// two in step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/logging.h"

namespace tessera {

struct Knobs {
  // Log lines below this level are dropped. TESSERA_LOG_LEVEL.
  LogLevel log_level = LogLevel::kWarning;
  // Seconds any blocking wait in tessera may take before it throws TimeoutError.
  double timeout_s = 300.0;
  // Seconds without a heartbeat after which a rank is taken for dead and every rank ends
  // (comm/liveness.h); 0 turns the monitor off.
  double heartbeat_timeout_s = 10.0;
  // Groups consecutive ranks into pretend nodes of this size (0: the real node split).
  int ranks_per_node = 0;
  // Allreduce algorithm override by size range, e.g. "dbtree:0-65536;ring:65537-max";
  // empty means auto everywhere. Parsed by comm::parse_override.
  std::string allreduce;
  // Number of colors (concurrent trees) of the multicolor algorithm.
  int colors = 4;
  // Pipelining unit of the point-to-point algorithms, in bytes.
  size_t segment_bytes = size_t{256} << 10;
  // Bytes per rank staged through node-local shared memory at a time (hierarchical).
  size_t shm_bytes = size_t{1} << 20;
  // Path of the cost table written by `tessera bench allreduce --calibrate` (empty: built in).
  std::string cost_table;

  // The engine (src/engine).
  // Milliseconds between negotiation cycles; 0: a cycle starts as soon as work arrives.
  double cycle_time_ms = 1.0;
  // While every rank's engine is idle, the wait between cycles doubles up to this many ms.
  double idle_backoff_ms = 8.0;
  // Ready tensors are packed into one fusion buffer up to this many bytes (0: no fusion).
  size_t fusion_threshold = size_t{128} << 20;
  // Entries of the response cache (0 turns it off).
  size_t cache_capacity = 1024;
  // Seconds a tensor may wait for other ranks before the stall inspector names them.
  double stall_check_s = 60.0;
  // Seconds after which a stall fails every pending handle (0: never).
  double stall_shutdown_s = 300.0;
  // Chrome trace of the engine's activity (empty: none).
  std::string timeline;

  // The libtorch binding (src/torch).
  // Process memory policy applied at tessera::init: "keep" raises glibc's mmap and trim
  // thresholds so libtorch's large buffers are reused instead of page-faulted in every step;
  // "system" leaves glibc's defaults.
  std::string malloc_policy = "keep";

  // The autotuner (src/tune).
  // Tune the engine's knobs during the first steps of training (TESSERA_AUTOTUNE=1).
  bool autotune = false;
  // JSON lines, one per configuration tried and its score (empty: no log).
  std::string autotune_log;
  // Where the best configuration is written, for `tessera train --config`.
  std::string autotune_config = "tessera-tuned.json";
  int autotune_warmup_steps = 5;      // steps at the starting settings before any sample
  int autotune_steps_per_sample = 3;  // steps per sample of the score
  int autotune_samples = 3;           // samples per configuration (the score is their median)
  int autotune_bayes_trials = 10;     // configurations proposed by expected improvement
  // Search bounds, "name=LO-HI;name=a,b,c" (empty: the defaults of src/tune/search_space.h).
  std::string autotune_bounds;

  // The TESSERA_* knobs given a value (environment or --config), by name: the autotuner leaves
  // these alone.
  std::vector<std::string> set_explicitly;
  bool is_explicit(const char* name) const;
};

struct KnobInfo {
  const char* name;
  const char* default_value;
  const char* accepted;
  const char* meaning;
};

// Every knob, in the order docs/knobs.md lists them.
const std::vector<KnobInfo>& knob_table();

// Parses the knobs from `lookup` (getenv or a test's map; nullptr means unset). Throws
// InvalidArgument naming the knob, quoting the bad value and saying what is accepted.
Knobs parse_knobs(const std::function<const char*(const char*)>& lookup);

// The process's knobs: defaults until load_knobs_from_environment() or set_knobs() runs.
const Knobs& knobs();
void set_knobs(const Knobs& knobs);
// Bumped by every set_knobs(): lets callers cache what they derive from the knobs.
uint64_t knobs_generation();
// The TESSERA_* variables set in this process's environment, by name. Read once, by
// tessera::comm::init on rank 0, which shares them so that every rank parses the same values.
std::vector<std::pair<std::string, std::string>> knob_values_from_environment();

// Parses a byte size: "4096", "64K", "64KiB", "1M", "1MiB", "2G", "2GiB" (powers of 1024).
// Throws InvalidArgument quoting the text.
size_t parse_bytes(const std::string& text);

}  // namespace tessera
