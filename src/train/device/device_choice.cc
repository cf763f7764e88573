#include "train/device/device_choice.h"

#include <vector>

#include "common/error.h"

namespace tessera {
namespace train {
namespace {

const char* const kAccepted = "cpu, cuda, cuda:I[,J...] or auto";

// Why `spec` cannot run on a GPU here, or "" when it can.
std::string missing_gpu(const std::string& spec, const DeviceFacts& facts) {
  if (!facts.build_missing.empty()) {
    return detail::concat("--device ", spec, " needs a CUDA build, and ", facts.build_missing,
                          ": use --device cpu");
  }
  if (facts.device_count <= 0) {
    return detail::concat("--device ", spec, " needs a GPU, and this process sees none (",
                          facts.unavailable_reason,
                          "): use --device cpu, or check the driver and "
                          "CUDA_VISIBLE_DEVICES");
  }
  return "";
}

// "0,2,3" -> {0, 2, 3}; each must be a visible GPU.
std::vector<int> parse_list(const std::string& spec, const std::string& list, int count) {
  std::vector<int> out;
  for (size_t begin = 0, end = 0; end != std::string::npos; begin = end + 1) {
    end = list.find(',', begin);
    const std::string item = list.substr(begin, end == std::string::npos ? end : end - begin);
    int index = -1;
    try {
      size_t used = 0;
      index = std::stoi(item, &used);
      if (used != item.size()) index = -1;
    } catch (const std::exception&) {
      index = -1;
    }
    TESSERA_CHECK(index >= 0, "--device ", spec, ": '", item,
                  "' is not a GPU index (a number from 0); accepted: ", kAccepted);
    TESSERA_CHECK(index < count, "--device ", spec, ": GPU ", index, " does not exist here (",
                  count, " visible: 0 to ", count - 1, ")");
    out.push_back(index);
  }
  return out;
}

}  // namespace

std::string DeviceChoice::name() const {
  return cuda ? detail::concat("cuda:", index) : std::string("cpu");
}

DeviceChoice choose_device(const std::string& spec, int local_rank, const DeviceFacts& facts) {
  TESSERA_CHECK(local_rank >= 0, "choose_device: local rank ", local_rank, " is negative");
  DeviceChoice c;
  if (spec == "cpu") return c;
  if (spec == "auto") {
    if (!missing_gpu(spec, facts).empty()) return c;
    c.cuda = true;
    c.index = local_rank % facts.device_count;
    return c;
  }
  const bool listed = spec.rfind("cuda:", 0) == 0;
  TESSERA_CHECK(spec == "cuda" || listed, "--device '", spec,
                "' is not a device; accepted: ", kAccepted);
  const std::string missing = missing_gpu(spec, facts);
  TESSERA_CHECK(missing.empty(), missing);
  c.cuda = true;
  if (!listed) {
    c.index = local_rank % facts.device_count;
    return c;
  }
  const std::vector<int> list = parse_list(spec, spec.substr(5), facts.device_count);
  c.index = list[static_cast<size_t>(local_rank) % list.size()];
  return c;
}

}  // namespace train
}  // namespace tessera
