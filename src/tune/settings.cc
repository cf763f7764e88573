#include "tune/settings.h"

#include "tune/search_space.h"

namespace tessera {
namespace tune {

void check_bounds(const std::string& text) { parse_bounds(text); }

bool autotune_requested(const SettingValues& values) { return kAutotune.get(values) == "1"; }

std::vector<SettingInfo> declared_settings() {
  return {kAutotune.info(),
          kAutotuneLog.info(),
          kAutotuneConfig.info(),
          kAutotuneWarmupSteps.info(),
          kAutotuneStepsPerSample.info(),
          kAutotuneSamples.info(),
          kAutotuneBayesTrials.info(),
          kAutotuneBounds.info()};
}

}  // namespace tune
}  // namespace tessera
