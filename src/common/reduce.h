// Elementwise reduction kernels, vectorised per instruction set and dispatched at run time.
//
// The same source (reduce_kernels.cc) is compiled once per ISA (baseline x86-64, AVX2+F16C,
// AVX-512) and the best one the CPU supports is chosen on first use; nothing that ships is
// built with -march=native. f16 and bf16 are widened to f32, combined, and rounded once
// (round to nearest even).
#pragma once

#include <cstddef>

#include "common/dtype.h"

namespace tessera {

// out[i] = a[i] (op) b[i] for i < count. out may alias a or b. kAverage reduces like kSum; the
// division happens once, in scale(), by whoever finishes the sum.
void reduce(DataType dtype, ReduceOp op, const void* a, const void* b, void* out, size_t count);

// out[i] = in[i] * factor, computed in the widened type; out may alias in. Integer dtypes are
// scaled in double and truncated toward zero (saturating at the type's range), as Horovod
// scales integer tensors on the CPU: Average over 2 ranks of a sum of 5 is 2, of -5 is -2.
void scale(DataType dtype, double factor, const void* in, void* out, size_t count);

// The instruction set the dispatcher chose: "avx512", "avx2" or "baseline".
const char* reduce_isa();

// Fills `out` with the identity of `op` (x op identity == x): 0 for sum, average and bitwise
// or; 1 for product; the largest value for min (+inf for floats); the lowest for max (-inf);
// all bits set for bitwise and. What a rank that has joined contributes (Engine::join).
void fill_identity(DataType dtype, ReduceOp op, void* out, size_t count);

}  // namespace tessera
