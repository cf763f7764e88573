// How the device kernels cut their work, as pure functions the CPU tests check exhaustively
// (tests/unit/test_vector_plan.cc) and the kernels call (kernels.cu): 16-byte vector loads
// where every pointer of an element-wise operation shares its alignment, the misaligned head
// and tail element by element; grids sized from the GPU's SM count.
//
// 16 bytes: the widest load a thread issues (LDG.128 / uint4), so a warp reads 512 contiguous
// bytes per instruction. Aligning buffers to more (a 128-byte line) would save at most one
// partial sector per warp-load; to less forces narrower loads.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define TESSERA_HOST_DEVICE __host__ __device__
#else
#define TESSERA_HOST_DEVICE
#endif

namespace tessera {
namespace gpu {

constexpr size_t kVectorBytes = 16;

// A range of `count` elements cut for vector loads, in elements: [0, head) one at a time,
// [head, head + body) in whole 16-byte vectors, the rest (tail) one at a time.
struct VectorSplit {
  size_t head = 0;
  size_t body = 0;
  size_t tail = 0;
};

// `mask` is the OR of every pointer's address XOR the first's (so its low bits are 0 exactly
// when all share the first's misalignment), `first` the first pointer's address, `es` the
// element size (1, 2, 4 or 8; pointers element-aligned). Pointers of different misalignment
// get no body: every element one at a time.
TESSERA_HOST_DEVICE inline VectorSplit vector_split(uintptr_t first, uintptr_t mask, size_t count,
                                                    size_t es) {
  VectorSplit s;
  if ((mask & (kVectorBytes - 1)) != 0 || es == 0 || es > kVectorBytes) {
    s.head = count;
    return s;
  }
  const size_t per = kVectorBytes / es;
  const size_t mis = static_cast<size_t>(first & (kVectorBytes - 1));
  size_t head = mis == 0 ? 0 : (kVectorBytes - mis) / es;
  if (head > count) head = count;
  s.head = head;
  s.body = (count - head) / per * per;
  s.tail = count - head - s.body;
  return s;
}

// Threads per block of every kernel, and blocks per SM that keep an SM's 2048 threads busy
// (Hopper, Ampere); more blocks than the GPU runs at once only add scheduling.
constexpr unsigned kThreadsPerBlock = 256;
constexpr unsigned kBlocksPerSm = 2048 / kThreadsPerBlock;
// Vectors each thread keeps in flight in the copy and scale kernels.
constexpr unsigned kUnroll = 4;

// Blocks along x for `work` units (vectors, or elements in the scalar case) spread over
// `items` items launched together (blockIdx.y): enough for one unit per thread and kUnroll in
// flight, at most what fills the GPU once across all items, at least one.
TESSERA_HOST_DEVICE inline unsigned grid_blocks(size_t work, size_t items, int sm_count) {
  const size_t per_block = static_cast<size_t>(kThreadsPerBlock) * kUnroll;
  size_t want = (work + per_block - 1) / per_block;
  const size_t sms = sm_count > 0 ? static_cast<size_t>(sm_count) : 1;
  size_t cap = sms * kBlocksPerSm / (items > 0 ? items : 1);
  if (cap < 1) cap = 1;
  if (want > cap) want = cap;
  return static_cast<unsigned>(want < 1 ? 1 : want);
}

}  // namespace gpu
}  // namespace tessera
