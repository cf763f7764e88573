// Internal to src/comm: the allreduce algorithms, one file each. allreduce() in collectives.cc
// validates arguments, handles size 1 and count 0, picks the algorithm and calls one of these.
#pragma once

#include <cstddef>

#include "comm/algorithm.h"
#include "common/dtype.h"

namespace tessera {
namespace comm {

class Communicator;

struct AllreduceArgs {
  const void* send = nullptr;  // may equal recv (in place)
  void* recv = nullptr;
  size_t count = 0;  // > 0
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  size_t segment_bytes = 0;  // pipelining unit (ring, trees)
  int colors = 2;            // trees of the multicolor algorithm
  size_t shm_bytes = 0;      // hierarchical: bytes per rank per shared-memory step
  double timeout_s = 300;
  // Divisor for kAverage; 0 means the communicator size. The hierarchical algorithm runs the
  // cross-node phase with the world size here.
  int average_over = 0;
  // hierarchical: the algorithm of the cross-node phase (never kAuto or kHierarchical).
  Algorithm cross_algorithm = Algorithm::kRing;
};

void ring_allreduce(Communicator& comm, const AllreduceArgs& a);
void rhd_allreduce(Communicator& comm, const AllreduceArgs& a);
void dbtree_allreduce(Communicator& comm, const AllreduceArgs& a);
void multicolor_allreduce(Communicator& comm, const AllreduceArgs& a);
void hierarchical_allreduce(Communicator& comm, const AllreduceArgs& a);
void mpi_allreduce(Communicator& comm, const AllreduceArgs& a);

// The pipelined executor behind dbtree (2 trees) and multicolor (k trees).
void tree_allreduce(Communicator& comm, const AllreduceArgs& a, int trees, const char* what);

// Ring reduce-scatter: `send` holds size * block elements; rank r receives the reduction of
// block r in `recv` (block elements). Shared by reduce_scatter() and ring_allreduce.
void ring_reduce_scatter(Communicator& comm, const void* send, void* recv, size_t block,
                         DataType dtype, ReduceOp op, size_t segment_bytes, double timeout_s);

// Runs one concrete algorithm.
void run_allreduce(Algorithm algorithm, Communicator& comm, const AllreduceArgs& a);

// Divides the finished sum by the divisor when op is kAverage; no-op otherwise.
void finish_average(const AllreduceArgs& a, int comm_size, void* data, size_t count);

}  // namespace comm
}  // namespace tessera
