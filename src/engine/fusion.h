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

}  // namespace engine
}  // namespace tessera
