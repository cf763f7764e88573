// tessera's collectives on raw buffers. All are blocking for the caller, collective over the
// communicator (every rank calls the same collective with matching arguments, in the same
// order), and bounded by the communicator's timeout (TESSERA_TIMEOUT): a peer that never shows up
// is a TimeoutError naming it, not a hang. In place: pass the same pointer for input and output
// (allgather: the input at the rank's block of the output).
//
// Bad arguments (a null buffer with a non-zero count, a byte size that overflows, average on
// an integer dtype, a root out of range, an algorithm that cannot run here) throw
// tessera::InvalidArgument before anything is sent.
#pragma once

#include <cstddef>
#include <vector>

#include "comm/algorithm.h"
#include "comm/communicator.h"
#include "comm/selector.h"
#include "common/dtype.h"

namespace tessera {
namespace comm {

// Segment size, colors, shared-memory staging and the timeout are the communicator's
// (comm.settings()); tests reach the multi-segment paths on a communicator with small segments.
struct AllreduceOptions {
  ReduceOp op = ReduceOp::kSum;
  // kAuto: the range of the communicator's TESSERA_ALLREDUCE that holds the size if one does,
  // else its cost table.
  Algorithm algorithm = Algorithm::kAuto;
};

// recv[i] = op over ranks of send[i], i < count, on every rank.
void allreduce(Communicator& comm, const void* send, void* recv, size_t count, DataType dtype,
               const AllreduceOptions& options = {});

// Adasum (Horovod's op=Adasum; docs/algorithms.md) in place over `buf`, the concatenation of
// tensors of counts[i] elements, each combined with its own coefficients; every rank ends with
// the same bits. Floating dtypes and a power-of-two number of ranks, else InvalidArgument.
void adasum_allreduce(Communicator& comm, void* buf, const std::vector<size_t>& counts,
                      DataType dtype);

// The algorithm allreduce() runs for `bytes` on `comm` when asked for `requested`.
Algorithm choose_allreduce(const Communicator& comm, size_t bytes, Algorithm requested);

// recv (size * count elements) = every rank's send (count elements), in rank order.
void allgather(Communicator& comm, const void* send, void* recv, size_t count, DataType dtype);
// Like allgather with counts[r] elements from rank r; recv holds their sum.
void allgatherv(Communicator& comm, const void* send, void* recv, const std::vector<size_t>& counts,
                DataType dtype);
// buf on every rank = buf on root.
void broadcast(Communicator& comm, void* buf, size_t count, DataType dtype, int root);
// recv (block elements) on rank r = op over ranks of block r of send (size * block elements).
void reduce_scatter(Communicator& comm, const void* send, void* recv, size_t block, DataType dtype,
                    ReduceOp op);
// Block j of send (block elements each) goes to rank j, landing in block r of its recv.
void alltoall(Communicator& comm, const void* send, void* recv, size_t block, DataType dtype);
// send_counts[j] elements go to rank j; recv_counts[j] come from rank j; blocks are packed in
// rank order. Counts must agree pairwise across ranks.
void alltoallv(Communicator& comm, const void* send, const std::vector<size_t>& send_counts,
               void* recv, const std::vector<size_t>& recv_counts, DataType dtype);
void barrier(Communicator& comm);

// Point-to-point exchange with chosen peers (the spatial halo exchange): every send and receive
// is posted at once, then all are waited for, bounded by TESSERA_TIMEOUT (a TimeoutError names
// the peer). A peer of -1 is skipped, like MPI_PROC_NULL. Each send must meet the peer's receive
// of the same tag and size. Not a collective: only the ranks named take part.
struct PeerBuffer {
  int peer = -1;
  int tag = 0;
  void* data = nullptr;
  size_t bytes = 0;
};
void exchange(Communicator& comm, const std::vector<PeerBuffer>& sends,
              const std::vector<PeerBuffer>& recvs);

// MPI's own blocking collectives, the reference that `tessera bench` prints beside ours.
namespace mpi_reference {
void allgather(Communicator& comm, const void* send, void* recv, size_t count, DataType dtype);
void broadcast(Communicator& comm, void* buf, size_t count, DataType dtype, int root);
void reduce_scatter(Communicator& comm, const void* send, void* recv, size_t block, DataType dtype,
                    ReduceOp op);
void alltoall(Communicator& comm, const void* send, void* recv, size_t block, DataType dtype);
}  // namespace mpi_reference

}  // namespace comm
}  // namespace tessera
