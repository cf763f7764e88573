// The autotuner's settings (src/tune), declared here once, and the options they give.
#pragma once

#include <string>
#include <vector>

#include "common/settings.h"

namespace tessera {
namespace tune {

void check_bounds(const std::string& text);  // parse_bounds, for kAutotuneBounds
inline constexpr ChoiceSetting kAutotune{
    "TESSERA_AUTOTUNE", "0", "0,1",
    "search the engine's settings during the first training steps (docs/tuning.md) and keep "
    "the best; settings given explicitly (environment, `--config` or `init`) are left alone"};
inline constexpr TextSetting kAutotuneLog{
    "TESSERA_AUTOTUNE_LOG", "", "none", "a path",
    "JSON lines written by rank 0: every configuration the autotuner tried, its samples and its "
    "score"};
inline constexpr TextSetting kAutotuneConfig{
    "TESSERA_AUTOTUNE_CONFIG", "tessera-tuned.json", "", "a path",
    "where rank 0 writes the best configuration found, read by `tessera train --config`"};
inline constexpr IntSetting kAutotuneWarmupSteps{
    "TESSERA_AUTOTUNE_WARMUP_STEPS", 5, 0, 100000,
    "training steps at the starting settings before the first sample"};
inline constexpr IntSetting kAutotuneStepsPerSample{
    "TESSERA_AUTOTUNE_STEPS_PER_SAMPLE", 3, 1, 100000,
    "training steps per sample of the score (bytes allreduced per second of wall time, the "
    "slowest rank's)"};
inline constexpr IntSetting kAutotuneSamples{
    "TESSERA_AUTOTUNE_SAMPLES", 3, 1, 1000, "samples per configuration; its score is their median"};
inline constexpr IntSetting kAutotuneBayesTrials{
    "TESSERA_AUTOTUNE_BAYES_TRIALS", 10, 0, 1000,
    "configurations of the continuous settings proposed by Bayesian optimisation after the "
    "discrete search"};
inline constexpr TextSetting kAutotuneBounds{
    "TESSERA_AUTOTUNE_BOUNDS",
    "",
    "defaults",
    "`name=LO-HI` or `name=a,b,...` clauses separated by `;`: `fusion_threshold`, "
    "`segment_bytes` (byte sizes), `cycle_time_ms` (numbers), `colors` (integers), `algorithm` "
    "(`auto ring rhd dbtree multicolor hierarchical mpi`), `cache` (`on`, `off`)",
    "the autotuner's search space (docs/tuning.md lists the defaults); a bound that excludes "
    "every value is an error naming the field",
    check_bounds};

// Whether TESSERA_AUTOTUNE asks for the autotuner.
bool autotune_requested(const SettingValues& values);

// tune's declarations, for docs/knobs.md and the unknown-name check.
std::vector<SettingInfo> declared_settings();

}  // namespace tune
}  // namespace tessera
