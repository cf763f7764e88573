#include "engine/tensor_spec.h"

#include <sstream>

#include "common/error.h"

namespace tessera {
namespace engine {

const char* op_type_name(OpType op) {
  switch (op) {
    case OpType::kAllreduce:
      return "allreduce";
    case OpType::kAllgather:
      return "allgather";
    case OpType::kBroadcast:
      return "broadcast";
    case OpType::kReduceScatter:
      return "reduce_scatter";
    case OpType::kJoin:
      return "join";
    case OpType::kAlltoall:
      return "alltoall";
  }
  return "?";
}

size_t TensorSpec::elements() const {
  size_t n = 1;
  for (int64_t d : shape) {
    TESSERA_CHECK(d >= 0, "tensor '", name, "' has a negative dimension ", d);
    const size_t u = static_cast<size_t>(d);
    TESSERA_CHECK(u == 0 || n <= SIZE_MAX / u, "tensor '", name, "': element count overflows");
    n *= u;
  }
  return n;
}

namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

// "row-major", or "dims in memory order (0, 2, 3, 1)" (channels-last).
std::string layout_string(const std::vector<uint8_t>& order) {
  if (order.empty()) return "row-major";
  std::ostringstream os;
  os << "dims in memory order (";
  for (size_t i = 0; i < order.size(); ++i) os << (i ? ", " : "") << int{order[i]};
  os << ")";
  return os.str();
}

}  // namespace

std::string spec_difference(const TensorSpec& a, const TensorSpec& b) {
  if (a.name != b.name) return "name '" + a.name + "' vs '" + b.name + "'";
  // A refusal never matches a collective, so it is never a cache hit and always meets the
  // coordinator, which reports it as such (Coordinator::take_complete).
  if (a.refusal != b.refusal) {
    return a.refusal.empty() || b.refusal.empty()
               ? "a rank refused its arguments"
               : "refusal '" + a.refusal + "' vs '" + b.refusal + "'";
  }
  if (a.op != b.op) return std::string("op ") + op_type_name(a.op) + " vs " + op_type_name(b.op);
  if (a.dtype != b.dtype)
    return std::string("dtype ") + dtype_name(a.dtype) + " vs " + dtype_name(b.dtype);
  if (a.device != b.device) {
    return std::string("device ") + gpu::device_type_name(a.device) + " vs " +
           gpu::device_type_name(b.device);
  }
  bool shapes_agree = a.shape == b.shape;
  if (!shapes_agree && a.op == OpType::kAllgather && a.shape.size() == b.shape.size() &&
      !a.shape.empty()) {
    shapes_agree = std::equal(a.shape.begin() + 1, a.shape.end(), b.shape.begin() + 1);
  }
  if (!shapes_agree) return "shape " + shape_string(a.shape) + " vs " + shape_string(b.shape);
  if (a.order != b.order) {
    return "memory layout " + layout_string(a.order) + " vs " + layout_string(b.order);
  }
  const bool reduces = a.op == OpType::kAllreduce || a.op == OpType::kReduceScatter;
  if (reduces && a.reduce_op != b.reduce_op) {
    return std::string("reduce op ") + reduce_op_name(a.reduce_op) + " vs " +
           reduce_op_name(b.reduce_op);
  }
  if (a.op == OpType::kBroadcast && a.root != b.root) {
    return "root " + std::to_string(a.root) + " vs " + std::to_string(b.root);
  }
  if (a.prescale != b.prescale || a.postscale != b.postscale) {
    std::ostringstream os;
    os << "scale factors (" << a.prescale << ", " << a.postscale << ") vs (" << b.prescale << ", "
       << b.postscale << ")";
    return os.str();
  }
  if (a.group != b.group)
    return "group " + std::to_string(a.group) + " vs " + std::to_string(b.group);
  if (a.process_set != b.process_set) {
    return "process set " + std::to_string(a.process_set) + " vs " + std::to_string(b.process_set);
  }
  return "";
}

bool fusable(const TensorSpec& a, const TensorSpec& b) {
  return a.op == OpType::kAllreduce && b.op == OpType::kAllreduce && a.dtype == b.dtype &&
         a.reduce_op == b.reduce_op && a.prescale == b.prescale && a.postscale == b.postscale &&
         a.process_set == b.process_set && a.device == b.device;
}

}  // namespace engine
}  // namespace tessera
