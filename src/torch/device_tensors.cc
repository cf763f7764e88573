// CUDA tensors through the engine's device path (device_tensors.h).
#include "torch/device_tensors.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <mutex>

#include "common/error.h"
#include "tessera/torch.h"
#include "torch/context.h"

namespace tessera {
namespace detail {
namespace {

std::mutex g_mu;  // the device's creation and the stand-in
gpu::Device* g_stand_in = nullptr;
std::function<std::shared_ptr<gpu::Stream>()> g_stand_in_stream;
bool g_stand_in_stream_ordered = false;

// This rank's device for a tensor on CUDA GPU `index`: the first one asked for, made here and
// given to the engine; another GPU later is the caller's error.
gpu::Device& rank_device(int index, const std::string& what) {
  Context& ctx = context();
  std::lock_guard<std::mutex> lock(g_mu);
  if (!ctx.device) {
    ctx.device = gpu::cuda_device(index);
    ctx.engine().set_device(*ctx.device);
  }
  TESSERA_CHECK(ctx.device->index() == index, what, ": the tensor is on cuda:", index,
                " but this rank uses ", ctx.device->name(),
                " (its first CUDA tensor's); a rank moves tensors of one GPU: call "
                "torch.cuda.set_device(local_rank) first and keep the tensors there");
  return *ctx.device;
}

// An allgather's result through torch's allocator as the caller would allocate it, on its
// stream (engine.h's ResultBuffer): its caching allocator reuses the block only after that
// stream has passed the free, and nothing calls cudaFree. Runs on the engine's thread.
engine::Request::ResultBuffer torch_result(const DeviceUse& use, c10::Stream caller,
                                           const torch::TensorOptions& options, size_t bytes) {
  const c10::StreamGuard on(caller);
  auto t = std::make_shared<torch::Tensor>(
      torch::empty({static_cast<int64_t>(bytes)}, options.dtype(torch::kUInt8)));
  engine::Request::ResultBuffer b;
  b.memory = std::shared_ptr<void>(t->data_ptr(), [t](void*) mutable { t.reset(); });
  b.ready = use.stream->record();
  return b;
}

}  // namespace

DeviceUse device_use(const torch::Tensor& t, const std::string& what) {
  TESSERA_CHECK(t.defined(), what, ": the tensor is undefined");
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_stand_in != nullptr && t.device().is_cpu()) {
      DeviceUse use;
      use.device = g_stand_in;
      use.stream = g_stand_in_stream();
      use.host_consumers = !g_stand_in_stream_ordered;
      context().engine().set_device(*g_stand_in);
      return use;
    }
  }
  if (t.device().is_cpu()) return {};
  TESSERA_CHECK(t.device().is_cuda(), what, ": the tensor is on ", t.device().str(),
                "; tessera takes CPU and CUDA tensors");
  DeviceUse use;
  use.device = &rank_device(t.device().index(), what);
  use.stream = current_stream(*use.device);
  return use;
}

DeviceUse device_use(const std::vector<torch::Tensor>& ts, const std::string& what) {
  TESSERA_CHECK(!ts.empty(), what, " needs at least one tensor");
  for (size_t i = 1; i < ts.size(); ++i) {
    TESSERA_CHECK(ts[i].defined() && ts[i].device() == ts[0].device(), what, ": tensor ", i,
                  " is on ", ts[i].defined() ? ts[i].device().str() : "nothing", ", tensor 0 on ",
                  ts[0].device().str(), "; one call takes tensors of one device");
  }
  return device_use(ts[0], what);
}

void attach(engine::Request& r, const DeviceUse& use, const std::vector<torch::Tensor>& tensors) {
  if (!use) return;
  r.device = use.device;
  r.ready = use.stream->record();
  for (const torch::Tensor& t : tensors) {
    if (t.defined()) r.keep_alive.push_back(std::make_shared<torch::Tensor>(t));
  }
  if (r.spec.op == engine::OpType::kAllgather && !tensors.empty() && tensors[0].defined()) {
    const c10::Device where = tensors[0].device();
    const c10::Stream caller = c10::impl::getDeviceGuardImpl(where.type())->getStream(where);
    const torch::TensorOptions options = tensors[0].options();
    r.allocate_result = [use, caller, options](size_t bytes) {
      return torch_result(use, caller, options, bytes);
    };
  }
}

void consume(const engine::Handle& h, const DeviceUse& use) {
  if (!use) return;
  std::shared_ptr<gpu::Event> done = h.completion();
  if (done) use.stream->wait(done);
}

torch::Tensor device_result_tensor(const engine::Handle& h, const torch::Tensor& like) {
  std::shared_ptr<void> memory = h.device_result();
  std::vector<int64_t> shape = h.result_shape();
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (n == 0 || !memory) return torch::empty(shape, like.options());
  // The tensor owns the engine's buffer: no copy, freed with the tensor.
  return torch::from_blob(
      memory.get(), shape, [memory](void*) mutable { memory.reset(); }, like.options());
}

void set_stand_in_device(gpu::Device* device,
                         std::function<std::shared_ptr<gpu::Stream>()> current) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_stand_in = device;
  g_stand_in_stream = device ? std::move(current) : nullptr;
}

void set_stand_in_stream_ordered(bool ordered) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_stand_in_stream_ordered = ordered;
}

}  // namespace detail
}  // namespace tessera
