// The device kernels' cuts (gpu/vector_plan.h), the fusion buffer's layout (engine/fusion.h)
// and the IPC backend's chunks (comm/topology.h): exhaustive over alignments, element sizes and
// small counts, so that every offset the planners produce is a 16-byte boundary and every
// element is covered exactly once.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "comm/topology.h"
#include "engine/fusion.h"
#include "gpu/vector_plan.h"

namespace tessera {
namespace gpu {
namespace {

TEST(VectorPlan, SplitCoversEveryElementAndAlignsTheBody) {
  for (size_t es : {1, 2, 4, 8}) {
    for (uintptr_t mis = 0; mis < 16; mis += es) {
      for (size_t count = 0; count <= 80; ++count) {
        const uintptr_t first = 4096 + mis;
        const VectorSplit s = vector_split(first, /*same alignment*/ 0, count, es);
        SCOPED_TRACE(testing::Message() << "es " << es << " mis " << mis << " count " << count);
        ASSERT_EQ(s.head + s.body + s.tail, count);
        ASSERT_EQ(s.body % (kVectorBytes / es), 0u);
        if (s.body > 0) {
          ASSERT_EQ((first + s.head * es) % kVectorBytes, 0u);
        }
        ASSERT_LT(s.tail, kVectorBytes / es);  // only what is left after the last vector
        ASSERT_LT(s.head * es, kVectorBytes);
        if (mis == 0) {
          ASSERT_EQ(s.head, 0u);
        }
        // Nothing is left to the scalar loops that a vector could take.
        if (count * es >= s.head * es + 2 * kVectorBytes) {
          ASSERT_GT(s.body, 0u);
        }
      }
    }
  }
}

TEST(VectorPlan, PointersOfDifferentAlignmentGoOneElementAtATime) {
  for (size_t es : {1, 2, 4, 8}) {
    for (uintptr_t other = es; other < 16; other += es) {
      const VectorSplit s = vector_split(4096, 4096 ^ (8192 + other), 1000, es);
      EXPECT_EQ(s.head, 1000u);
      EXPECT_EQ(s.body + s.tail, 0u);
    }
  }
}

TEST(VectorPlan, GridFillsTheGpuOnceAtMost) {
  for (int sms : {1, 8, 114, 132}) {
    for (size_t items : {1, 2, 7, 160}) {
      for (size_t work : {0ul, 1ul, 1023ul, 1024ul, 1025ul, 1ul << 20, 1ul << 26}) {
        const unsigned g = grid_blocks(work, items, sms);
        const size_t per_block = kThreadsPerBlock * kUnroll;
        ASSERT_GE(g, 1u);
        const size_t cap = std::max<size_t>(1, static_cast<size_t>(sms) * kBlocksPerSm / items);
        ASSERT_LE(g, cap) << sms << " SMs, " << items << " items, " << work;
        // As many blocks as the work needs, up to the cap.
        ASSERT_EQ(g, std::max<size_t>(1, std::min(cap, (work + per_block - 1) / per_block)));
      }
    }
  }
  // A 256 MiB copy on an H100/H200 (132 SMs): the whole GPU, where the old cap was 64 blocks.
  EXPECT_EQ(grid_blocks((256u << 20) / 16, 1, 132), 132u * kBlocksPerSm);
}

// Every tensor of a fusion batch starts on a 16-byte boundary, in order, without overlap, and
// the buffer holds a whole number of elements of every dtype; DeepLab-v3+'s 21-element bias
// among them.
TEST(VectorPlan, EveryFusionOffsetIsAligned) {
  std::mt19937 rng(7);
  std::vector<std::vector<size_t>> batches = {{84, 4, 1024, 2}, {}, {16}, {1, 1, 1}};
  for (int k = 0; k < 500; ++k) {
    std::vector<size_t> b(1 + rng() % 40);
    const size_t es = size_t{1} << (rng() % 4);
    for (size_t& x : b) x = es * (rng() % 3000);
    batches.push_back(b);
  }
  for (const auto& bytes : batches) {
    const engine::FusionLayout l = engine::fusion_layout(bytes, kVectorBytes);
    ASSERT_EQ(l.offsets.size(), bytes.size());
    size_t end = 0;
    for (size_t i = 0; i < bytes.size(); ++i) {
      ASSERT_EQ(l.offsets[i] % kVectorBytes, 0u) << "tensor " << i;
      ASSERT_GE(l.offsets[i], end) << "overlap at tensor " << i;
      ASSERT_LT(l.offsets[i], end + kVectorBytes) << "more padding than alignment needs";
      end = l.offsets[i] + bytes[i];
    }
    ASSERT_GE(l.total, end);
    ASSERT_EQ(l.total % kVectorBytes, 0u);
  }
}

TEST(VectorPlan, FusionAlignmentMustBeAPowerOfTwo) {
  EXPECT_THROW(engine::fusion_layout({4}, 12), std::exception);
}

// The IPC backend's chunks: in order, covering every element, each starting 16-byte aligned.
TEST(VectorPlan, EveryIpcChunkStartsAligned) {
  for (size_t es : {1, 2, 4, 8}) {
    const size_t unit = kVectorBytes / es;
    for (int n = 1; n <= 16; ++n) {
      for (size_t count = 0; count <= 300; ++count) {
        size_t next = 0;
        for (int r = 0; r < n; ++r) {
          const comm::Range c = comm::aligned_chunk_range(count, n, r, unit);
          ASSERT_EQ(c.begin, next) << "es " << es << " n " << n << " count " << count;
          ASSERT_EQ(c.begin * es % kVectorBytes, 0u);
          ASSERT_LE(c.begin, c.end);
          // Balanced to a unit, the last part taking the remainder.
          ASSERT_LE(c.size(), (count / unit + n - 1) / n * unit + (r == n - 1 ? unit - 1 : 0));
          next = c.end;
        }
        ASSERT_EQ(next, count);
      }
    }
  }
}

}  // namespace
}  // namespace gpu
}  // namespace tessera
