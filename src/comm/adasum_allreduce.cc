// Adasum (Maleki et al., "Scaling Distributed Training with Adaptive Summation", MLSys 2021),
// the combination Horovod's op=Adasum computes for CPU tensors:
//
//   adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
//
// (a coefficient stays 1 where its vector's squared norm is below 1e-8): the sum of orthogonal
// vectors, the average of parallel ones. P = 2^k ranks combine by recursive doubling, neighbours
// first, as Horovod's vector-halving distance-doubling pairs them:
//
//   step d = 1, 2, 4, ... P/2:  rank r exchanges its whole vector with rank r ^ d and both
//                               compute adasum(lower rank's, higher rank's)
//
// so after step d every rank of each block of 2d ranks holds adasum over that block, the same
// bits on each. Each tensor of a fused buffer (`counts`) has its own dot product and norms.
// Dot products and norms accumulate in double; f16 and bf16 are combined in double too.
// Bytes sent per rank: N log2 P (Horovod's halving variant sends about 2N; this plain form
// keeps every rank's arithmetic identical, which is what makes the bits agree).
#include <cstring>
#include <vector>

#include "comm/algorithms.h"
#include "comm/collectives.h"
#include "comm/communicator.h"
#include "comm/p2p.h"
#include "common/error.h"

namespace tessera {
namespace comm {
namespace {

constexpr int kTagAdasum = 31;
// Horovod's threshold below which a vector counts as zero (its coefficient stays 1).
constexpr double kZeroNormSquared = 1e-8;

// In place on `a` (the lower rank's part): a = adasum(a, b), element range [begin, end).
void combine(DataType dtype, void* a, const void* b, size_t begin, size_t end) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = begin; i < end; ++i) {
    const double x = load_as_double(dtype, a, i), y = load_as_double(dtype, b, i);
    dot += x * y;
    aa += x * x;
    bb += y * y;
  }
  const double ca = aa >= kZeroNormSquared ? 1.0 - dot / aa * 0.5 : 1.0;
  const double cb = bb >= kZeroNormSquared ? 1.0 - dot / bb * 0.5 : 1.0;
  for (size_t i = begin; i < end; ++i) {
    const double x = load_as_double(dtype, a, i), y = load_as_double(dtype, b, i);
    store_from_double(dtype, a, i, ca * x + cb * y);
  }
}

bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

}  // namespace

void adasum_allreduce(Communicator& comm, void* buf, const std::vector<size_t>& counts,
                      DataType dtype) {
  const int n = comm.size();
  TESSERA_CHECK(is_floating(dtype),
                "Adasum combines floating-point tensors (f32 f64 f16 bf16), "
                "not ",
                dtype_name(dtype));
  TESSERA_CHECK(is_power_of_two(n),
                "Adasum needs a power-of-two number of ranks, as Horovod's "
                "on the CPU; this set has ",
                n);
  size_t total = 0;
  for (size_t c : counts) total += c;
  const size_t bytes = checked_bytes(total, dtype);
  if (n == 1 || total == 0) return;
  const int r = comm.rank();
  std::vector<char> other(bytes);
  for (int d = 1; d < n; d <<= 1) {
    const int peer = r ^ d;
    Requests reqs(comm, "adasum allreduce", comm.settings().timeout_s);
    reqs.irecv(other.data(), bytes, peer, kTagAdasum);
    reqs.isend(buf, bytes, peer, kTagAdasum);
    reqs.wait_all();
    // Both sides compute adasum(lower, higher): the higher rank first takes the lower's
    // vector as its `a`, so the two results are the same bits.
    if (r > peer) {
      std::vector<char> mine(static_cast<const char*>(buf), static_cast<const char*>(buf) + bytes);
      std::memcpy(buf, other.data(), bytes);
      other.swap(mine);
    }
    size_t begin = 0;
    for (size_t c : counts) {
      combine(dtype, buf, other.data(), begin, begin + c);
      begin += c;
    }
  }
}

}  // namespace comm
}  // namespace tessera
