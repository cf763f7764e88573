// Every layer's settings in one list: what init checks names against and docs/knobs.md shows.
// Each layer declares its own beside the code that uses them; this file only collects them,
// from the top of the layers (torch/ sees them all).
#include "comm/settings.h"
#include "common/logging.h"
#include "engine/options.h"
#include "runtime/liveness.h"
#include "tessera/torch.h"
#include "torch/memory_policy.h"
#include "tune/settings.h"

namespace tessera {

std::vector<SettingInfo> declared_settings() {
  std::vector<SettingInfo> all = {kLogLevel.info(), runtime::kHeartbeatTimeout.info()};
  for (auto layer :
       {comm::declared_settings(), engine::declared_settings(),
        std::vector<SettingInfo>{detail::kMallocPolicy.info()}, tune::declared_settings()}) {
    all.insert(all.end(), layer.begin(), layer.end());
  }
  return all;
}

}  // namespace tessera
