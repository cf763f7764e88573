// One fused batch of one process set: the collective that carries it out, with the copies into
// and out of the fusion buffer (scaling folded into them) and the batch's trace events.
#include <cstring>

#include "comm/collectives.h"
#include "common/reduce.h"
#include "engine/process_set.h"

namespace tessera {
namespace engine {
namespace {

// out = in * factor; a plain copy at factor 1 (any dtype, and no rounding through a wider type).
void copy_scaled(DataType dtype, double factor, const void* in, void* out, size_t bytes) {
  if (factor != 1.0) {
    scale(dtype, factor, in, out, bytes / dtype_size(dtype));
  } else if (bytes > 0) {
    std::memcpy(out, in, bytes);
  }
}

}  // namespace

// As an allreduce: the prescale on a copy of the input (the caller's stays as it was), an
// average as the sum scaled after it, so that integer tensors average as Horovod's do.
void Engine::Impl::run_reduce_scatter(Pending& p, size_t block) {
  const TensorSpec& s = p.req.spec;
  const void* in = p.req.input;
  std::vector<char> scaled;
  if (s.prescale != 1.0) {
    scaled.resize(s.bytes());
    scale(s.dtype, s.prescale, in, scaled.data(), s.elements());
    in = scaled.data();
  }
  const bool average = s.reduce_op == ReduceOp::kAverage;
  comm::reduce_scatter(*comm, in, p.req.output, block, s.dtype,
                       average ? ReduceOp::kSum : s.reduce_op);
  const double post = s.postscale * (average ? 1.0 / comm->size() : 1.0);
  if (post != 1.0) scale(s.dtype, post, p.req.output, p.req.output, block);
}

// One trace event per tensor of the batch for `phase`, from `begin` to now.
void Engine::Impl::trace_batch(const std::vector<Pending*>& items, const char* phase,
                               Clock::time_point begin, size_t bytes) {
  if (!timeline.active()) return;
  const auto end = Clock::now();
  nlohmann::json args = nlohmann::json::object();
  if (bytes > 0) args = {{"bytes", bytes}, {"tensors", items.size()}};
  const TensorSpec& lead = items.front()->req.spec;
  if (bytes > 0 && lead.op == OpType::kAllreduce) {
    args["algorithm"] =
        comm::algorithm_name(comm::choose_allreduce(*comm, bytes, comm::Algorithm::kAuto));
  }
  for (Pending* p : items) timeline.event(p->req.spec.name, phase, begin, end, args);
}

void Engine::Impl::run_batch(const std::vector<Pending*>& items) {
  const Request& r = items.front()->req;
  if (r.spec.device != gpu::DeviceType::kCpu && r.spec.op != OpType::kJoin) {
    return run_device_batch(items);
  }
  const size_t block = r.spec.elements() / static_cast<size_t>(comm->size());
  if (timeline.active()) {
    const auto start = Clock::now();
    for (Pending* p : items) timeline.event(p->req.spec.name, "QUEUE", p->agreed, start);
  }
  const auto start = Clock::now();
  switch (r.spec.op) {
    case OpType::kAllreduce:
      return run_allreduce(items);
    case OpType::kAllgather:
      return run_allgather(*items.front());
    case OpType::kBroadcast:
      comm::broadcast(*comm, r.output, r.spec.elements(), r.spec.dtype, r.spec.root);
      return trace_batch(items, "BROADCAST", start, r.spec.bytes());
    case OpType::kReduceScatter:
      run_reduce_scatter(*items.front(), block);
      return trace_batch(items, "REDUCE_SCATTER", start, r.spec.bytes());
    case OpType::kJoin:
      return;  // every rank has joined: nothing moves
    case OpType::kAlltoall:
      comm::alltoall(*comm, r.input, r.output, block, r.spec.dtype);
      return trace_batch(items, "ALLTOALL", start, r.spec.bytes());
  }
}

// Averaging and the post-scale are folded into the copy out of the fusion buffer (or applied
// in place for a batch of one). The average is over the ranks that contributed: joined ranks
// add only the identity.
void Engine::Impl::run_allreduce(const std::vector<Pending*>& items) {
  const TensorSpec& lead = items.front()->req.spec;
  if (lead.reduce_op == ReduceOp::kAdasum) return run_adasum(items);
  const size_t esize = dtype_size(lead.dtype);
  const bool average = lead.reduce_op == ReduceOp::kAverage;
  auto out_factor_of = [&](const Pending* p) {
    const int contributors = p->contributors > 0 ? p->contributors : comm->size();
    return lead.postscale * (average ? 1.0 / contributors : 1.0);
  };
  comm::AllreduceOptions o;
  o.op = average ? ReduceOp::kSum : lead.reduce_op;
  if (items.size() == 1) {
    Request& r = items.front()->req;
    const size_t count = r.spec.elements();
    const void* src = r.input;
    if (lead.prescale != 1.0) {
      scale(lead.dtype, lead.prescale, r.input, r.output, count);
      src = r.output;
    }
    const auto t = Clock::now();
    comm::allreduce(*comm, src, r.output, count, lead.dtype, o);
    trace_batch(items, "ALLREDUCE", t, count * esize);
    const double out_factor = out_factor_of(items.front());
    if (out_factor != 1.0) scale(lead.dtype, out_factor, r.output, r.output, count);
    return;
  }
  size_t total = 0;
  for (Pending* p : items) total += p->req.spec.bytes();
  if (fusion.size() < total) fusion.resize(total);
  auto t = Clock::now();
  size_t off = 0;
  for (Pending* p : items) {
    const size_t bytes = p->req.spec.bytes();
    copy_scaled(lead.dtype, lead.prescale, p->req.input, fusion.data() + off, bytes);
    off += bytes;
  }
  trace_batch(items, "MEMCPY_IN_FUSION_BUFFER", t, 0);
  t = Clock::now();
  comm::allreduce(*comm, fusion.data(), fusion.data(), total / esize, lead.dtype, o);
  trace_batch(items, "ALLREDUCE", t, total);
  t = Clock::now();
  off = 0;
  for (Pending* p : items) {
    const size_t bytes = p->req.spec.bytes();
    copy_scaled(lead.dtype, out_factor_of(p), fusion.data() + off, p->req.output, bytes);
    off += bytes;
  }
  trace_batch(items, "MEMCPY_OUT_FUSION_BUFFER", t, 0);
}

// Adasum over the batch packed in the fusion buffer (the prescale folded into the copy in, the
// postscale into the copy out); each tensor keeps its own coefficients.
void Engine::Impl::run_adasum(const std::vector<Pending*>& items) {
  const TensorSpec& lead = items.front()->req.spec;
  size_t total = 0;
  std::vector<size_t> counts;
  for (Pending* p : items) {
    total += p->req.spec.bytes();
    counts.push_back(p->req.spec.elements());
  }
  if (fusion.size() < total) fusion.resize(total);
  size_t off = 0;
  for (Pending* p : items) {
    copy_scaled(lead.dtype, lead.prescale, p->req.input, fusion.data() + off, p->req.spec.bytes());
    off += p->req.spec.bytes();
  }
  const auto t = Clock::now();
  comm::adasum_allreduce(*comm, fusion.data(), counts, lead.dtype);
  trace_batch(items, "ADASUM_ALLREDUCE", t, total);
  off = 0;
  for (Pending* p : items) {
    copy_scaled(lead.dtype, lead.postscale, fusion.data() + off, p->req.output,
                p->req.spec.bytes());
    off += p->req.spec.bytes();
  }
}

// Ranks may differ in the first dimension: every rank's row count, over the set's communicator.
Engine::Impl::GatherCounts Engine::Impl::gather_counts(const TensorSpec& s) {
  size_t row = 1;
  for (size_t d = 1; d < s.shape.size(); ++d) row *= static_cast<size_t>(s.shape[d]);
  int64_t mine = s.shape.empty() ? 1 : s.shape[0];
  std::vector<int64_t> rows(static_cast<size_t>(comm->size()));
  comm::allgather(*comm, &mine, rows.data(), 1, DataType::kInt64);
  GatherCounts g;
  for (int64_t r : rows) {
    g.counts.push_back(static_cast<size_t>(r) * row);
    g.total += g.counts.back();
    g.shape_rows += r;
  }
  g.shape = s.shape.empty() ? std::vector<int64_t>{g.shape_rows} : s.shape;
  g.shape[0] = g.shape_rows;
  return g;
}

// The row counts are gathered first, and the result goes into the handle.
void Engine::Impl::run_allgather(Pending& p) {
  const auto start = Clock::now();
  const TensorSpec& s = p.req.spec;
  const GatherCounts g = gather_counts(s);
  p.handle->result.assign(g.total * dtype_size(s.dtype), 0);
  comm::allgatherv(*comm, p.req.input, p.handle->result.data(), g.counts, s.dtype);
  trace_batch({&p}, "ALLGATHER", start, g.total * dtype_size(s.dtype));
  p.handle->result_shape = g.shape;
}

}  // namespace engine
}  // namespace tessera
