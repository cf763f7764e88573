// What every rank must agree on about one named collective before it runs: the coordinator
// compares these field by field, the response cache keys on them, fusion groups by them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "gpu/device.h"

namespace tessera {
namespace engine {

// kJoin: this rank has no more work (Engine::join): it completes once every rank has joined.
enum class OpType : uint8_t {
  kAllreduce,
  kAllgather,
  kBroadcast,
  kReduceScatter,
  kAlltoall,
  kJoin
};

// The name of Engine::join's request (one join at a time per process set).
constexpr const char* kJoinName = "tessera.join";

const char* op_type_name(OpType op);

struct TensorSpec {
  std::string name;
  OpType op = OpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  ReduceOp reduce_op = ReduceOp::kSum;  // allreduce, reduce-scatter
  int root = 0;                         // broadcast
  double prescale = 1.0;                // multiplied in before the reduction
  double postscale = 1.0;               // multiplied in after it
  int group = -1;                       // grouped collectives: released together; -1 none
  int group_size = 0;                   // members of the group
  int process_set = 0;                  // 0: the global set
  // Where input and output live (set by the engine from Request::device): ranks must agree,
  // since a host buffer on one rank and a device buffer on another take different paths.
  gpu::DeviceType device = gpu::DeviceType::kCpu;
  // The element-wise collectives (allreduce, broadcast) take a dense tensor in its own memory
  // order (a channels-last gradient without a copy): then its dimensions, outermost in memory
  // first; empty: row-major. Ranks must agree, since element i of one rank's buffer meets
  // element i of every other's.
  std::vector<uint8_t> order;
  // Non-empty: this rank refused its arguments for this name (why, in its words). A refusal
  // carries no data: it lets the coordinator fail the name on every rank that enqueued it
  // within a cycle, instead of the others stalling on a rank that will never send it.
  std::string refusal;

  // Elements and bytes of this rank's input.
  size_t elements() const;
  size_t bytes() const { return checked_bytes(elements(), dtype); }
};

// Describes the first field where a and b differ ("dtype f32 vs f16"), or "" when they agree.
// allgather may differ in the first dimension (each rank contributes its own rows).
std::string spec_difference(const TensorSpec& a, const TensorSpec& b);

// Fusion compatibility: same op, dtype, reduce op, scale factors, process set and device (such
// tensors can share one collective over a packed buffer). Only allreduce fuses today.
bool fusable(const TensorSpec& a, const TensorSpec& b);

}  // namespace engine
}  // namespace tessera
