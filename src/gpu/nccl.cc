// NcclComm over NCCL's C API. Every call checks its result; an asynchronous error found while
// waiting for initialisation aborts the communicator. The communicator is nonblocking, so a
// collective may answer ncclInProgress before its kernel is on the stream: each one waits
// (gpu/nonblocking.h) until NCCL has enqueued it, or the communicator's timeout.
#include "gpu/nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <thread>

#include "common/error.h"
#include "gpu/cuda_check.h"
#include "gpu/nonblocking.h"

namespace tessera {
namespace gpu {

#define TESSERA_NCCL_CHECK(call)                                                                 \
  do {                                                                                           \
    const ncclResult_t tessera_r_ = (call);                                                      \
    if (tessera_r_ != ncclSuccess && tessera_r_ != ncclInProgress) {                             \
      throw DeviceError(detail::concat(#call, " failed: ", ncclGetErrorString(tessera_r_), " (", \
                                       ncclGetLastError(nullptr), ")"));                         \
    }                                                                                            \
  } while (0)

namespace {

ncclDataType_t nccl_type(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kUInt8:
      return ncclUint8;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kInt16:
      break;
  }
  throw InvalidArgument("NCCL has no int16: this collective takes the staged backend");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAverage:
      return ncclAvg;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kProduct:
      return ncclProd;
    default:
      break;
  }
  throw InvalidArgument("NCCL has no bitwise reductions: this collective takes the staged backend");
}

cudaStream_t native(Stream& stream) {
  auto* s = static_cast<cudaStream_t>(stream.native_handle());
  TESSERA_CHECK(s != nullptr, "NCCL needs a CUDA stream");
  return s;
}

}  // namespace

bool nccl_built() { return true; }

bool nccl_supports(DataType dtype, ReduceOp op) {
  return dtype != DataType::kInt16 && op != ReduceOp::kBitAnd && op != ReduceOp::kBitOr;
}

struct NcclComm::Impl {
  ncclComm_t comm = nullptr;
  int size = 0;
  int device = 0;
  std::chrono::steady_clock::duration timeout{};  // the communicator's, from the constructor

  // After a call on the nonblocking communicator: its work is on the stream when this returns.
  void enqueued(ncclResult_t r, const char* what) {
    if (r != ncclSuccess && r != ncclInProgress) {
      throw DeviceError(detail::concat(what, " failed: ", ncclGetErrorString(r), " (",
                                       ncclGetLastError(comm), ")"));
    }
    auto poll = [this](std::string& error) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(comm, &state);
      if (q != ncclSuccess) state = q;
      if (state == ncclInProgress) return CallState::kInProgress;
      if (state == ncclSuccess) return CallState::kDone;
      error = detail::concat(ncclGetErrorString(state), " (", ncclGetLastError(comm), ")");
      return CallState::kFailed;
    };
    wait_until_enqueued(r == ncclInProgress ? CallState::kInProgress : CallState::kDone, poll,
                        Clock::now() + timeout, what);
  }
};

std::vector<char> NcclComm::unique_id() {
  ncclUniqueId id;
  TESSERA_NCCL_CHECK(ncclGetUniqueId(&id));
  return std::vector<char>(id.internal, id.internal + sizeof(id.internal));
}

NcclComm::NcclComm(const std::vector<char>& id, int size, int rank, Device& device,
                   std::chrono::steady_clock::time_point deadline)
    : impl_(std::make_unique<Impl>()) {
  TESSERA_CHECK(device.type() == DeviceType::kCuda && device.name().rfind("cuda:", 0) == 0,
                "NCCL needs a CUDA device, got ", device.name());
  ncclUniqueId uid;
  TESSERA_CHECK_EQ(id.size(), sizeof(uid.internal), "an NCCL unique id");
  std::memcpy(uid.internal, id.data(), id.size());
  impl_->size = size;
  impl_->device = device.index();
  impl_->timeout = deadline - std::chrono::steady_clock::now();
  const DeviceScope on(device.index());
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // polled below, so a missing rank cannot hang us
  TESSERA_NCCL_CHECK(ncclCommInitRankConfig(&impl_->comm, size, uid, rank, &config));
  for (;;) {
    ncclResult_t state = ncclSuccess;
    TESSERA_NCCL_CHECK(ncclCommGetAsyncError(impl_->comm, &state));
    if (state == ncclSuccess) break;
    if (state != ncclInProgress || std::chrono::steady_clock::now() > deadline) {
      ncclCommAbort(impl_->comm);
      impl_->comm = nullptr;
      if (state != ncclInProgress) {
        throw DeviceError(detail::concat("NCCL communicator of ", size, " ranks on ", device.name(),
                                         " failed: ", ncclGetErrorString(state)));
      }
      throw TimeoutError(detail::concat("timed out creating the NCCL communicator of ", size,
                                        " ranks (rank ", rank, "): a rank did not join"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

NcclComm::~NcclComm() {
  if (impl_ && impl_->comm != nullptr) ncclCommDestroy(impl_->comm);
}

void NcclComm::allreduce(Stream& stream, const void* send, void* recv, size_t count, DataType dtype,
                         ReduceOp op) {
  const DeviceScope on(impl_->device);
  impl_->enqueued(
      ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op), impl_->comm, native(stream)),
      "ncclAllReduce");
}

void NcclComm::broadcast(Stream& stream, void* buf, size_t count, DataType dtype, int root) {
  const DeviceScope on(impl_->device);
  impl_->enqueued(
      ncclBroadcast(buf, buf, count, nccl_type(dtype), root, impl_->comm, native(stream)),
      "ncclBroadcast");
}

void NcclComm::reduce_scatter(Stream& stream, const void* send, void* recv, size_t block,
                              DataType dtype, ReduceOp op) {
  const DeviceScope on(impl_->device);
  impl_->enqueued(ncclReduceScatter(send, recv, block, nccl_type(dtype), nccl_op(op), impl_->comm,
                                    native(stream)),
                  "ncclReduceScatter");
}

void NcclComm::allgatherv(Stream& stream, const void* send, void* recv,
                          const std::vector<size_t>& counts, DataType dtype) {
  const size_t es = dtype_size(dtype);
  const ncclDataType_t t = nccl_type(dtype);
  int rank = 0;
  TESSERA_NCCL_CHECK(ncclCommUserRank(impl_->comm, &rank));
  const DeviceScope on(impl_->device);
  TESSERA_NCCL_CHECK(ncclGroupStart());
  size_t off = 0;
  for (int r = 0; r < impl_->size; ++r) {
    TESSERA_NCCL_CHECK(
        ncclSend(send, counts[static_cast<size_t>(rank)], t, r, impl_->comm, native(stream)));
    TESSERA_NCCL_CHECK(ncclRecv(static_cast<char*>(recv) + off * es, counts[static_cast<size_t>(r)],
                                t, r, impl_->comm, native(stream)));
    off += counts[static_cast<size_t>(r)];
  }
  impl_->enqueued(ncclGroupEnd(), "an NCCL group of sends and receives");
}

void NcclComm::alltoallv(Stream& stream, const void* send, const std::vector<size_t>& send_counts,
                         void* recv, const std::vector<size_t>& recv_counts, DataType dtype) {
  const size_t es = dtype_size(dtype);
  const ncclDataType_t t = nccl_type(dtype);
  const DeviceScope on(impl_->device);
  TESSERA_NCCL_CHECK(ncclGroupStart());
  size_t soff = 0, roff = 0;
  for (int r = 0; r < impl_->size; ++r) {
    const auto i = static_cast<size_t>(r);
    TESSERA_NCCL_CHECK(ncclSend(static_cast<const char*>(send) + soff * es, send_counts[i], t, r,
                                impl_->comm, native(stream)));
    TESSERA_NCCL_CHECK(ncclRecv(static_cast<char*>(recv) + roff * es, recv_counts[i], t, r,
                                impl_->comm, native(stream)));
    soff += send_counts[i];
    roff += recv_counts[i];
  }
  impl_->enqueued(ncclGroupEnd(), "an NCCL group of sends and receives");
}

}  // namespace gpu
}  // namespace tessera
