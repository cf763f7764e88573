#include "train/on_root.h"

#include "common/error.h"
#include "tessera/torch.h"

namespace tessera {
namespace train {

std::string on_root(bool dist, const std::string& name, const std::function<std::string()>& work) {
  std::string status;
  if (!dist || rank() == 0) {
    try {
      status = "1" + work();
    } catch (const Error& e) {
      status = std::string("0") + e.what();
    }
  }
  if (dist) status = broadcast_bytes(status, 0, name);
  if (status.empty() || status[0] != '1') throw InvalidArgument(status.substr(1));
  return status.substr(1);
}

}  // namespace train
}  // namespace tessera
