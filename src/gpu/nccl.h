// An NCCL communicator on one device, for comm's NCCL backend. No MPI here: comm sends the
// unique id to the other ranks. Built with NCCL only (nccl_built() says whether); without it
// every constructor throws DeviceError saying so.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "gpu/device.h"

namespace tessera {
namespace gpu {

bool nccl_built();
// Whether NCCL reduces this dtype with this op (NCCL has no int16 and no bitwise ops): the
// caller takes another backend where it does not.
bool nccl_supports(DataType dtype, ReduceOp op);

class NcclComm {
 public:
  // ncclGetUniqueId on one rank; every rank passes the same bytes to the constructor.
  static std::vector<char> unique_id();
  // Joins the communicator of `size` ranks as `rank` on `device` (a CUDA device). Nonblocking
  // initialisation polled until `deadline`: a rank that never joins is a TimeoutError, not a
  // hang. Throws DeviceError with NCCL's message ("Duplicate GPU detected" for two ranks on one
  // GPU).
  NcclComm(const std::vector<char>& id, int size, int rank, Device& device,
           std::chrono::steady_clock::time_point deadline);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // Enqueued on `stream` (a CUDA stream of the same device); results ready for later work on
  // it. kAverage is NCCL's own average.
  void allreduce(Stream& stream, const void* send, void* recv, size_t count, DataType dtype,
                 ReduceOp op);
  void broadcast(Stream& stream, void* buf, size_t count, DataType dtype, int root);
  void reduce_scatter(Stream& stream, const void* send, void* recv, size_t block, DataType dtype,
                      ReduceOp op);
  // counts[r] elements from rank r, packed in rank order (grouped sends and receives).
  void allgatherv(Stream& stream, const void* send, void* recv, const std::vector<size_t>& counts,
                  DataType dtype);
  void alltoallv(Stream& stream, const void* send, const std::vector<size_t>& send_counts,
                 void* recv, const std::vector<size_t>& recv_counts, DataType dtype);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpu
}  // namespace tessera
