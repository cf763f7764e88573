#include "comm/settings.h"

namespace tessera {
namespace comm {

void check_override(const std::string& text) { parse_override(text); }
void check_device_backend(const std::string& text) { parse_device_backend(text); }

void Settings::set_allreduce(const std::string& text) {
  allreduce_ranges = parse_override(text);
  allreduce = text;
}

Settings settings_from(const SettingValues& values) {
  Settings s;
  s.timeout_s = kTimeout.get(values);
  s.ranks_per_node = static_cast<int>(kRanksPerNode.get(values));
  s.set_allreduce(kAllreduce.get(values));
  s.colors = static_cast<int>(kColors.get(values));
  s.segment_bytes = kSegmentBytes.get(values);
  s.shm_bytes = kShmBytes.get(values);
  s.device_backend = parse_device_backend(kDeviceBackend.get(values));
  return s;
}

std::vector<SettingInfo> declared_settings() {
  return {kTimeout.info(),      kRanksPerNode.info(), kAllreduce.info(), kColors.info(),
          kSegmentBytes.info(), kShmBytes.info(),     kCostTable.info(), kDeviceBackend.info()};
}

}  // namespace comm
}  // namespace tessera
