// One fused batch of device tensors: everything is enqueued on the set's own stream, which
// first waits on each producer's readiness event; the device collectives (comm's NCCL or
// staged backends) run on it; fusion goes through batched copies (one launch for every
// tensor, the scale factors folded in); the handles get the event after the batch as their
// completion, and the tensors are held until it has passed. The host never synchronises the
// device here, except inside a staged collective for its host part.
#include <map>

#include "comm/collectives.h"
#include "common/error.h"
#include "engine/fusion.h"
#include "engine/process_set.h"
#include "gpu/vector_plan.h"

namespace tessera {
namespace engine {
comm::DeviceOptions Engine::Impl::device_options() const {
  comm::DeviceOptions o;
  o.backend = comm->settings().device_backend;
  return o;
}

bool Engine::Impl::device_batch_can_run(const std::vector<Pending*>& items) {
  if (items.front()->req.spec.device == gpu::DeviceType::kCpu) return true;
  release_device_work(false);
  // Every rank of the set has a device: each sent a device tensor, and enqueue checks for one.
  if (!dev.stream) dev.stream = dev.device->new_stream();
  // Collective over the set: every rank runs this same batch at the same point.
  if (!dev.context) dev.context = std::make_unique<comm::DeviceContext>(*comm, *dev.device);
  try {
    dev.context->backend(device_options().backend);
    return true;
  } catch (const InvalidArgument&) {
    // Chosen from facts every rank shares, so every rank fails here alike, before any data
    // moved: this batch fails and the engine goes on.
    complete(items, std::current_exception());
    return false;
  }
}

void Engine::Impl::run_device_batch(const std::vector<Pending*>& items) {
  gpu::Stream& s = *dev.stream;
  for (Pending* p : items) {
    if (p->req.ready) s.wait(p->req.ready);
  }
  const Request& r = items.front()->req;
  const size_t block = r.spec.elements() / static_cast<size_t>(comm->size());
  const auto start = Clock::now();
  const comm::DeviceOptions o = device_options();
  switch (r.spec.op) {
    case OpType::kAllreduce:
      run_device_allreduce(items);
      break;
    case OpType::kAllgather:
      run_device_allgather(*items.front());
      break;
    case OpType::kBroadcast:
      comm::device_broadcast(*dev.context, s, r.output, r.spec.elements(), r.spec.dtype,
                             r.spec.root, o);
      trace_batch(items, "BROADCAST", start, r.spec.bytes());
      break;
    case OpType::kReduceScatter:
      comm::device_reduce_scatter(*dev.context, s, r.input, r.output, block, r.spec.dtype,
                                  r.spec.reduce_op, o);
      trace_batch(items, "REDUCE_SCATTER", start, r.spec.bytes());
      break;
    case OpType::kAlltoall: {
      const std::vector<size_t> counts(static_cast<size_t>(comm->size()), block);
      comm::device_alltoallv(*dev.context, s, r.input, counts, r.output, counts, r.spec.dtype, o);
      trace_batch(items, "ALLTOALL", start, r.spec.bytes());
      break;
    }
    case OpType::kJoin:
      break;
  }
  DeviceState::InFlight done{s.record(), {}};
  for (Pending* p : items) {
    for (auto& k : p->req.keep_alive) done.keep.push_back(k);
    if (!p->handle) continue;
    std::lock_guard<std::mutex> lock(p->handle->mutex);
    p->handle->completion = done.done;
    p->handle->device_timeout_s = comm->settings().timeout_s;
  }
  dev.in_flight.push_back(std::move(done));
}

// As run_allreduce: averaging and the post-scale are folded into the copy out of the fusion
// buffer, per tensor (a joined rank's stand-in changes a tensor's divisor).
void Engine::Impl::run_device_allreduce(const std::vector<Pending*>& items) {
  gpu::Stream& s = *dev.stream;
  const TensorSpec& lead = items.front()->req.spec;
  const DataType dt = lead.dtype;
  const bool average = lead.reduce_op == ReduceOp::kAverage;
  auto out_factor_of = [&](const Pending* p) {
    const int contributors = p->contributors > 0 ? p->contributors : comm->size();
    return lead.postscale * (average ? 1.0 / contributors : 1.0);
  };
  const ReduceOp op = average ? ReduceOp::kSum : lead.reduce_op;
  const comm::DeviceOptions o = device_options();
  auto t = Clock::now();
  if (items.size() == 1) {
    const Request& r = items.front()->req;
    const size_t bytes = r.spec.bytes();
    const void* src = r.input;
    if (lead.prescale != 1.0) {
      s.batched_copy({{r.input, r.output, bytes}}, dt, lead.prescale);
      src = r.output;
    }
    comm::device_allreduce(*dev.context, s, src, r.output, r.spec.elements(), dt, op, o);
    const double f = out_factor_of(items.front());
    if (f != 1.0) s.batched_copy({{r.output, r.output, bytes}}, dt, f);  // element-wise: safe
    return trace_batch(items, "ALLREDUCE", t, bytes);
  }
  std::vector<size_t> sizes;
  for (Pending* p : items) sizes.push_back(p->req.spec.bytes());
  const FusionLayout layout = fusion_layout(sizes, gpu::kVectorBytes);
  const size_t total = layout.total;
  char* fusion = device_fusion(total);
  std::vector<gpu::CopyItem> in;
  std::map<double, std::vector<gpu::CopyItem>> out;  // by factor: one launch per factor
  for (size_t k = 0; k < items.size(); ++k) {
    const Request& r = items[k]->req;
    char* at = fusion + layout.offsets[k];
    in.push_back({r.input, at, sizes[k]});
    out[out_factor_of(items[k])].push_back({at, r.output, sizes[k]});
  }
  s.batched_copy(in, dt, lead.prescale);
  trace_batch(items, "MEMCPY_IN_FUSION_BUFFER", t, 0);
  t = Clock::now();
  comm::device_allreduce(*dev.context, s, fusion, fusion, total / dtype_size(dt), dt, op, o);
  trace_batch(items, "ALLREDUCE", t, total);
  t = Clock::now();
  for (const auto& kv : out) s.batched_copy(kv.second, dt, kv.first);
  trace_batch(items, "MEMCPY_OUT_FUSION_BUFFER", t, 0);
}

// The row counts travel on the host (they are the handle's shape); the rows into a device
// buffer the handle owns.
void Engine::Impl::run_device_allgather(Pending& p) {
  const auto start = Clock::now();
  const TensorSpec& s = p.req.spec;
  const GatherCounts g = gather_counts(s);
  const size_t bytes = std::max<size_t>(g.total * dtype_size(s.dtype), 1);
  std::shared_ptr<void> result;
  if (p.req.allocate_result) {
    Request::ResultBuffer b = p.req.allocate_result(bytes);
    if (b.ready) dev.stream->wait(b.ready);  // the memory's last user on the caller's stream
    result = std::move(b.memory);
  } else {
    result = dev.device->allocate(bytes);
  }
  comm::device_allgatherv(*dev.context, *dev.stream, p.req.input, result.get(), g.counts, s.dtype,
                          device_options());
  trace_batch({&p}, "ALLGATHER", start, g.total * dtype_size(s.dtype));
  p.req.keep_alive.push_back(result);
  std::lock_guard<std::mutex> lock(p.handle->mutex);
  p.handle->device_result = std::move(result);
  p.handle->result_shape = g.shape;
}

// Grows by replacement; the old buffer stays alive until the work queued on it has run.
char* Engine::Impl::device_fusion(size_t bytes) {
  if (dev.fusion_bytes < bytes) {
    if (dev.fusion) dev.in_flight.push_back({dev.stream->record(), {dev.fusion}});
    dev.fusion = dev.device->allocate(bytes);
    dev.fusion_bytes = bytes;
  }
  return static_cast<char*>(dev.fusion.get());
}

void Engine::Impl::release_device_work(bool all) {
  const auto deadline =
      gpu::Clock::now() + std::chrono::duration_cast<gpu::Clock::duration>(
                              std::chrono::duration<double>(comm->settings().timeout_s));
  while (!dev.in_flight.empty()) {
    auto& front = dev.in_flight.front();
    try {
      if (all) {
        front.done->synchronize(deadline, "the engine's device work at shutdown");
      } else if (!front.done->done()) {
        return;
      }
    } catch (const TimeoutError&) {
      // The device may still use these buffers: leaking them beats the device writing into
      // memory handed out again. Only a device stuck past the timeout gets here.
      new std::vector<std::shared_ptr<void>>(std::move(front.keep));
    } catch (const std::exception&) {
      // A failed operation: the handles report it, and nothing runs after it on the stream.
    }
    dev.in_flight.pop_front();
  }
}

}  // namespace engine
}  // namespace tessera
