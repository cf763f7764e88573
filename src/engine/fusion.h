// Fusion planning: which ready tensors share one collective over a packed fusion buffer.
// Pure: every rank plans from the same agreed list and gets the same batches.
#pragma once

#include <cstddef>
#include <vector>

#include "engine/tensor_spec.h"

namespace tessera {
namespace engine {

struct FusionBatch {
  std::vector<size_t> items;  // indices into the planned list, in packing order
  size_t bytes = 0;
  bool operator==(const FusionBatch& o) const { return items == o.items && bytes == o.bytes; }
};

// Plans `ready` (in the agreed order) into batches, in execution order; every index appears in
// exactly one batch. Rules:
//  - a batch holds mutually fusable tensors (fusable()) and at most `threshold` bytes; a tensor
//    larger than the threshold, and every tensor that does not fuse (not an allreduce), runs
//    in a batch of its own;
//  - the members of a group (spec.group >= 0) stay in one batch, unless together they exceed
//    the threshold: then they fill batches of their own, in order, none over the threshold
//    except a single member that is larger by itself;
//  - each batch starts with the earliest unplaced tensor and takes the later ones that fit, so
//    a large tensor does not hold back the small ones behind it.
// threshold 0 turns fusion off (one tensor per batch; groups still run back to back).
// The engine plans over pointers, so a step does not copy every tensor's name and shape.
std::vector<FusionBatch> plan_fusion(const std::vector<const TensorSpec*>& ready, size_t threshold);
std::vector<FusionBatch> plan_fusion(const std::vector<TensorSpec>& ready, size_t threshold);

// Where each tensor of a batch goes in the device fusion buffer: packed in order, each offset
// rounded up to `align` bytes (a power of two). The device path takes gpu::kVectorBytes (16):
// every copy in and out and the reduction over the buffer then run in 16-byte vectors, where
// packing bytes end to end let one odd-sized tensor (a DeepLab-v3+ bias of 21 f32 elements)
// misalign every later one of its batch. `total` is a multiple of `align`, so a whole number of
// elements of any dtype; the padding between tensors is reduced with the rest and never read.
struct FusionLayout {
  std::vector<size_t> offsets;
  size_t total = 0;
};
FusionLayout fusion_layout(const std::vector<size_t>& bytes, size_t align);

}  // namespace engine
}  // namespace tessera
