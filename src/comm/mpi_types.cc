#include "comm/mpi_types.h"

#include "comm/mpi_internal.h"
#include "common/reduce.h"

namespace tessera {
namespace comm {
namespace {

template <DataType D, ReduceOp O>
void user_op(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce(D, O, inout, in, inout, static_cast<size_t>(*len));
}

template <DataType D>
MPI_Op half_op(ReduceOp op) {
  // Created once per process on first use; MPI frees them at MPI_Finalize.
  static MPI_Op ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  static const bool created = [] {
    MPI_Op_create(&user_op<D, ReduceOp::kSum>, 1, &ops[0]);
    MPI_Op_create(&user_op<D, ReduceOp::kMin>, 1, &ops[1]);
    MPI_Op_create(&user_op<D, ReduceOp::kMax>, 1, &ops[2]);
    MPI_Op_create(&user_op<D, ReduceOp::kProduct>, 1, &ops[3]);
    return true;
  }();
  (void)created;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return ops[0];
    case ReduceOp::kMin:
      return ops[1];
    case ReduceOp::kMax:
      return ops[2];
    case ReduceOp::kProduct:
      return ops[3];
    case ReduceOp::kBitAnd:
    case ReduceOp::kBitOr:
    case ReduceOp::kAdasum:
      break;  // not defined on half floats (check_op_supported); Adasum is not MPI's
  }
  return MPI_OP_NULL;
}

}  // namespace

MPI_Datatype mpi_datatype(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kFloat16:
      return MPI_UINT16_T;
    case DataType::kBFloat16:
      return MPI_UINT16_T;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kUInt8:
      return MPI_UINT8_T;
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kInt16:
      return MPI_INT16_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(DataType dtype, ReduceOp op) {
  if (dtype == DataType::kFloat16) return half_op<DataType::kFloat16>(op);
  if (dtype == DataType::kBFloat16) return half_op<DataType::kBFloat16>(op);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return MPI_SUM;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kProduct:
      return MPI_PROD;
    case ReduceOp::kBitAnd:
      return MPI_BAND;
    case ReduceOp::kBitOr:
      return MPI_BOR;
    case ReduceOp::kAdasum:
      break;  // the engine runs it (comm::adasum_allreduce), never MPI
  }
  return MPI_OP_NULL;
}

}  // namespace comm
}  // namespace tessera
