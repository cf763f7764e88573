// Internal to src/comm: tessera dtypes and ops as MPI datatypes and ops. f16 and bf16 have no
// MPI type: they travel as MPI_UINT16_T and reduce through user-defined ops that call
// tessera::reduce (so they accumulate in f32 like everything else).
#pragma once

#include <mpi.h>

#include "common/dtype.h"

namespace tessera {
namespace comm {

MPI_Datatype mpi_datatype(DataType dtype);
// kAverage maps to the sum; the caller divides.
MPI_Op mpi_op(DataType dtype, ReduceOp op);

}  // namespace comm
}  // namespace tessera
