// The device collectives: each call goes to the backend the selector chose (NCCL where it takes
// the dtype and op, else staged), the IPC ones in ipc_collectives.cc.
//
// Staged allreduce, in segments of S bytes (N bytes in all, k = ceil(N / S) segments):
//   1. enqueue every segment's device->host copy on the caller's stream, an event after each;
//   2. for each segment in order: wait for its event, allreduce it on the host with tessera's
//      algorithm, enqueue its host->device copy on the upload stream;
//   3. the caller's stream waits for the upload stream.
// So the copies down, the host reduction and the copies up of different segments overlap; the
// device moves 2N bytes over the host link.
//
// Hierarchical allreduce: IPC within each node (ipc_allreduce), and between its reduction and
// its copy out, each rank's reduced chunk crosses the nodes staged: down to pinned memory,
// allreduced on the host over cross() (the ranks of the same local rank), back up.
#include "comm/device_collectives.h"

#include <numeric>

#include "comm/collectives.h"
#include "comm/ipc_collectives.h"
#include "common/error.h"
#include "gpu/nccl.h"

namespace tessera {
namespace comm {
namespace {

bool use_nccl(DeviceContext& ctx, const DeviceOptions& o, DataType dtype, ReduceOp op) {
  return ctx.backend(o.backend) == DeviceBackend::kNccl && gpu::nccl_supports(dtype, op);
}

bool use_ipc(DeviceContext& ctx, const DeviceOptions& o) {
  return ctx.backend(o.backend) == DeviceBackend::kIpc;
}

// Average as a sum and the factor that makes it one over `size` ranks.
ReduceOp reduction_of(ReduceOp op) { return op == ReduceOp::kAverage ? ReduceOp::kSum : op; }
double factor_of(ReduceOp op, int size) { return op == ReduceOp::kAverage ? 1.0 / size : 1.0; }

// Device -> staging (whole buffer), waited for. The stream first waits until earlier staged
// calls' copies out of the staging buffer are done.
void download(DeviceContext& ctx, gpu::Stream& stream, char* host, const void* dev, size_t bytes,
              const char* what) {
  if (ctx.last_upload) stream.wait(ctx.last_upload);
  stream.copy(host, dev, bytes);
  stream.record()->synchronize(timeout_deadline(ctx.comm()), what);
}

// Staging -> device on the upload stream; the caller's stream waits for it. The upload stream
// first waits for the caller's work so far (no host wait): a write into `dev` still pending
// there (model.cuda() before a broadcast) must not land after, and overwrite, the result.
void upload(DeviceContext& ctx, gpu::Stream& stream, void* dev, const char* host, size_t bytes) {
  gpu::Stream& up = ctx.upload_stream();
  up.wait(stream.record());
  up.copy(dev, host, bytes);
  ctx.last_upload = up.record();
  stream.wait(ctx.last_upload);
}

void staged_allreduce(DeviceContext& ctx, gpu::Stream& stream, const void* send, void* recv,
                      size_t count, DataType dtype, ReduceOp op, const DeviceOptions& o) {
  const size_t es = dtype_size(dtype);
  const size_t bytes = count * es;
  const size_t segment = std::max(es, o.staging_segment_bytes / es * es);
  char* host = ctx.staging(bytes);
  if (ctx.last_upload) stream.wait(ctx.last_upload);
  std::vector<std::shared_ptr<gpu::Event>> downloaded;
  for (size_t off = 0; off < bytes; off += segment) {
    stream.copy(host + off, static_cast<const char*>(send) + off, std::min(segment, bytes - off));
    downloaded.push_back(stream.record());
  }
  gpu::Stream& up = ctx.upload_stream();
  AllreduceOptions host_options;
  host_options.op = op;
  host_options.algorithm = o.host_algorithm;
  const auto deadline = timeout_deadline(ctx.comm());
  for (size_t k = 0, off = 0; off < bytes; ++k, off += segment) {
    const size_t len = std::min(segment, bytes - off);
    downloaded[k]->synchronize(deadline, "a staged allreduce's device->host copy");
    allreduce(ctx.comm(), host + off, host + off, len / es, dtype, host_options);
    up.copy(static_cast<char*>(recv) + off, host + off, len);
  }
  ctx.last_upload = up.record();
  stream.wait(ctx.last_upload);
}

// IPC within the node; each rank's reduced chunk allreduced across nodes through pinned memory.
void hierarchical_allreduce(DeviceContext& ctx, gpu::Stream& stream, const void* send, void* recv,
                            size_t count, DataType dtype, ReduceOp op, const DeviceOptions& o) {
  Communicator* cross = ctx.comm().cross();
  TESSERA_CHECK(cross != nullptr && ctx.comm().uniform_nodes(),
                "the hierarchical device backend needs a communicator with node structure and the "
                "same number of ranks on every node; ",
                ctx.comm().describe(), " has not");
  AllreduceOptions across;
  across.op = reduction_of(op);
  across.algorithm = o.host_algorithm;
  const size_t es = dtype_size(dtype);
  auto between = [&](gpu::Stream& s, char* chunk, size_t n) {
    if (n == 0) return;
    char* host = ctx.staging(n * es);
    download(ctx, s, host, chunk, n * es, "a hierarchical allreduce's device->host copy");
    allreduce(*cross, host, host, n, dtype, across);
    s.copy(chunk, host, n * es);  // run before the step that ends the reduction
  };
  ipc_allreduce(ctx.peers(), stream, send, recv, count, dtype, reduction_of(op),
                factor_of(op, ctx.comm().size()), between);
}

size_t total(const std::vector<size_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), size_t{0});
}

}  // namespace

void device_allreduce(DeviceContext& ctx, gpu::Stream& stream, const void* send, void* recv,
                      size_t count, DataType dtype, ReduceOp op, const DeviceOptions& o) {
  TESSERA_CHECK(op != ReduceOp::kAverage || is_floating(dtype),
                "average needs a floating-point dtype, got ", dtype_name(dtype));
  if (count == 0) return;
  if (use_nccl(ctx, o, dtype, op))
    return ctx.nccl().allreduce(stream, send, recv, count, dtype, op);
  if (ctx.comm().size() == 1) {  // the average over one rank is the value itself
    if (send != recv) stream.copy(recv, send, count * dtype_size(dtype));
    return;
  }
  switch (ctx.backend(o.backend)) {
    case DeviceBackend::kIpc:
      return ipc_allreduce(ctx.peers(), stream, send, recv, count, dtype, reduction_of(op),
                           factor_of(op, ctx.comm().size()));
    case DeviceBackend::kHierarchical:
      return hierarchical_allreduce(ctx, stream, send, recv, count, dtype, op, o);
    default:
      return staged_allreduce(ctx, stream, send, recv, count, dtype, op, o);
  }
}

void device_allgatherv(DeviceContext& ctx, gpu::Stream& stream, const void* send, void* recv,
                       const std::vector<size_t>& counts, DataType dtype, const DeviceOptions& o) {
  Communicator& comm = ctx.comm();
  TESSERA_CHECK_EQ(counts.size(), static_cast<size_t>(comm.size()),
                   "allgatherv needs one count per rank");
  if (use_nccl(ctx, o, dtype, ReduceOp::kSum)) {
    return ctx.nccl().allgatherv(stream, send, recv, counts, dtype);
  }
  if (use_ipc(ctx, o)) return ipc_allgatherv(ctx.peers(), stream, send, recv, counts, dtype);
  const size_t es = dtype_size(dtype);
  const size_t before = std::accumulate(counts.begin(), counts.begin() + comm.rank(), size_t{0});
  char* host = ctx.staging(total(counts) * es);
  download(ctx, stream, host + before * es, send, counts[static_cast<size_t>(comm.rank())] * es,
           "a staged allgather's device->host copy");
  allgatherv(comm, host + before * es, host, counts, dtype);
  upload(ctx, stream, recv, host, total(counts) * es);
}

void device_broadcast(DeviceContext& ctx, gpu::Stream& stream, void* buf, size_t count,
                      DataType dtype, int root, const DeviceOptions& o) {
  Communicator& comm = ctx.comm();
  TESSERA_CHECK(root >= 0 && root < comm.size(), "broadcast root ", root, " is not a rank of ",
                comm.size(), " ranks (0 to ", comm.size() - 1, ")");
  if (use_nccl(ctx, o, dtype, ReduceOp::kSum)) {
    return ctx.nccl().broadcast(stream, buf, count, dtype, root);
  }
  if (use_ipc(ctx, o)) return ipc_broadcast(ctx.peers(), stream, buf, count, dtype, root);
  const size_t bytes = count * dtype_size(dtype);
  char* host = ctx.staging(bytes);
  if (comm.rank() == root) {
    download(ctx, stream, host, buf, bytes, "a staged broadcast's device->host copy");
  } else if (ctx.last_upload) {
    ctx.last_upload->synchronize(timeout_deadline(comm), "the previous staged copies");
  }
  broadcast(comm, host, count, dtype, root);
  if (comm.rank() != root) upload(ctx, stream, buf, host, bytes);
}

void device_reduce_scatter(DeviceContext& ctx, gpu::Stream& stream, const void* send, void* recv,
                           size_t block, DataType dtype, ReduceOp op, const DeviceOptions& o) {
  Communicator& comm = ctx.comm();
  TESSERA_CHECK(op != ReduceOp::kAverage || is_floating(dtype),
                "average needs a floating-point dtype, got ", dtype_name(dtype));
  if (use_nccl(ctx, o, dtype, op)) {
    return ctx.nccl().reduce_scatter(stream, send, recv, block, dtype, op);
  }
  if (use_ipc(ctx, o)) {
    return ipc_reduce_scatter(ctx.peers(), stream, send, recv, block, dtype, reduction_of(op),
                              factor_of(op, comm.size()));
  }
  const size_t bytes = block * dtype_size(dtype);
  const size_t all = bytes * static_cast<size_t>(comm.size());
  char* host = ctx.staging(all + bytes);
  download(ctx, stream, host, send, all, "a staged reduce-scatter's device->host copy");
  reduce_scatter(comm, host, host + all, block, dtype, op);
  upload(ctx, stream, recv, host + all, bytes);
}

void device_alltoallv(DeviceContext& ctx, gpu::Stream& stream, const void* send,
                      const std::vector<size_t>& send_counts, void* recv,
                      const std::vector<size_t>& recv_counts, DataType dtype,
                      const DeviceOptions& o) {
  if (use_nccl(ctx, o, dtype, ReduceOp::kSum)) {
    return ctx.nccl().alltoallv(stream, send, send_counts, recv, recv_counts, dtype);
  }
  if (use_ipc(ctx, o)) {
    return ipc_alltoallv(ctx.peers(), stream, send, send_counts, recv, recv_counts, dtype);
  }
  const size_t es = dtype_size(dtype);
  const size_t sent = total(send_counts) * es;
  char* host = ctx.staging(sent + total(recv_counts) * es);
  download(ctx, stream, host, send, sent, "a staged alltoall's device->host copy");
  alltoallv(ctx.comm(), host, send_counts, host + sent, recv_counts, dtype);
  upload(ctx, stream, recv, host + sent, total(recv_counts) * es);
}

}  // namespace comm
}  // namespace tessera
