// NcclComm in a build without NCCL: nothing to run, and a message that says so.
#include "common/error.h"
#include "gpu/nccl.h"

namespace tessera {
namespace gpu {
namespace {
[[noreturn]] void missing() {
  throw DeviceError(
      "this build of tessera has no NCCL (configure with CUDA where nccl.h and libnccl are "
      "found): use the staged or ipc device backend");
}
}  // namespace

struct NcclComm::Impl {};
bool nccl_built() { return false; }
bool nccl_supports(DataType, ReduceOp) { return false; }
std::vector<char> NcclComm::unique_id() { missing(); }
NcclComm::NcclComm(const std::vector<char>&, int, int, Device&,
                   std::chrono::steady_clock::time_point) {
  missing();
}
NcclComm::~NcclComm() = default;
void NcclComm::allreduce(Stream&, const void*, void*, size_t, DataType, ReduceOp) { missing(); }
void NcclComm::broadcast(Stream&, void*, size_t, DataType, int) { missing(); }
void NcclComm::reduce_scatter(Stream&, const void*, void*, size_t, DataType, ReduceOp) {
  missing();
}
void NcclComm::allgatherv(Stream&, const void*, void*, const std::vector<size_t>&, DataType) {
  missing();
}
void NcclComm::alltoallv(Stream&, const void*, const std::vector<size_t>&, void*,
                         const std::vector<size_t>&, DataType) {
  missing();
}

}  // namespace gpu
}  // namespace tessera
