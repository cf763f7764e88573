// `mpi`: MPI_Allreduce as the MPI library implements it. It is the reference every benchmark
// compares against, and the fallback that is always correct. Counts above INT_MAX go through
// in several calls. Note: MPI_Allreduce has no deadline of its own; a dead peer is detected by
// the MPI runtime, not by tessera's timeout.
#include <climits>

#include "comm/algorithms.h"
#include "comm/mpi_internal.h"
#include "comm/mpi_types.h"

namespace tessera {
namespace comm {

void mpi_allreduce(Communicator& comm, const AllreduceArgs& a) {
  const size_t esize = dtype_size(a.dtype);
  const size_t max_count = static_cast<size_t>(INT_MAX);
  for (size_t base = 0; base < a.count; base += max_count) {
    const size_t n = std::min(max_count, a.count - base);
    const void* in =
        a.send == a.recv ? MPI_IN_PLACE : static_cast<const char*>(a.send) + base * esize;
    TESSERA_MPI_CHECK(MPI_Allreduce(in, static_cast<char*>(a.recv) + base * esize,
                                    static_cast<int>(n), mpi_datatype(a.dtype),
                                    mpi_op(a.dtype, a.op), mpi_comm(comm)));
  }
  finish_average(a, comm.size(), a.recv, a.count);
}

}  // namespace comm
}  // namespace tessera
