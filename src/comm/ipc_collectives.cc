// The device IPC backend's collectives (the steps are in ipc_collectives.h).
#include "comm/ipc_collectives.h"

#include <algorithm>
#include <numeric>

#include "comm/collectives.h"
#include "comm/topology.h"
#include "common/error.h"
#include "gpu/vector_plan.h"

namespace tessera {
namespace comm {
namespace {

size_t prefix(const std::vector<size_t>& counts, size_t end) {
  return std::accumulate(counts.begin(), counts.begin() + static_cast<long>(end), size_t{0});
}

// Rank r's chunk of `count` elements: boundaries on 16 bytes (the kernels' vector width).
Range ipc_chunk(size_t count, size_t es, int n, int r) {
  return aligned_chunk_range(count, n, r, std::max<size_t>(1, gpu::kVectorBytes / es));
}

// Chunk c of every rank's buffer, in rank order.
std::vector<const void*> chunk_of_each(const std::vector<char*>& buffers, size_t offset) {
  std::vector<const void*> out;
  for (char* b : buffers) out.push_back(b + offset);
  return out;
}

void copy_items(gpu::Stream& stream, std::vector<gpu::CopyItem> items, DataType dtype,
                double factor) {
  std::vector<gpu::CopyItem> nonempty;
  for (const gpu::CopyItem& c : items) {
    if (c.bytes > 0) nonempty.push_back(c);
  }
  if (!nonempty.empty()) stream.batched_copy(nonempty, dtype, factor);
}

}  // namespace

void ipc_allreduce(PeerBuffers& peers, gpu::Stream& stream, const void* send, void* recv,
                   size_t count, DataType dtype, ReduceOp op, double factor,
                   const ChunkStep& between) {
  const size_t es = dtype_size(dtype);
  const int n = peers.comm().size();
  const std::vector<char*>& buf = peers.buffers(count * es);
  stream.copy(peers.mine(), send, count * es);
  peers.step(stream, "an IPC allreduce's copy in");
  const Range mine = ipc_chunk(count, es, n, peers.comm().rank());
  char* my_chunk = peers.mine() + mine.begin * es;
  if (mine.size() > 0) {
    stream.reduce_many(dtype, op, chunk_of_each(buf, mine.begin * es), my_chunk, mine.size(),
                       between ? 1.0 : factor);
  }
  if (between) {
    // Every rank's reduction has run before any rank leaves for the cross-node step, so a
    // failed one is an error everywhere rather than a rank missing from that allreduce.
    peers.step(stream, "an IPC allreduce's reduction");
    between(stream, my_chunk, mine.size());
  }
  peers.step(stream, between ? "a hierarchical allreduce's cross-node step"
                             : "an IPC allreduce's reduction");
  std::vector<gpu::CopyItem> items;
  for (int r = 0; r < n; ++r) {
    const Range c = ipc_chunk(count, es, n, r);
    items.push_back({buf[static_cast<size_t>(r)] + c.begin * es,
                     static_cast<char*>(recv) + c.begin * es, c.size() * es});
  }
  copy_items(stream, items, dtype, between ? factor : 1.0);
  peers.step(stream, "an IPC allreduce's copy out");
}

void ipc_allgatherv(PeerBuffers& peers, gpu::Stream& stream, const void* send, void* recv,
                    const std::vector<size_t>& counts, DataType dtype) {
  const size_t es = dtype_size(dtype);
  const auto me = static_cast<size_t>(peers.comm().rank());
  const std::vector<char*>& buf =
      peers.buffers(*std::max_element(counts.begin(), counts.end()) * es);
  stream.copy(peers.mine(), send, counts[me] * es);
  peers.step(stream, "an IPC allgather's copy in");
  std::vector<gpu::CopyItem> items;
  for (size_t r = 0; r < counts.size(); ++r) {
    items.push_back({buf[r], static_cast<char*>(recv) + prefix(counts, r) * es, counts[r] * es});
  }
  copy_items(stream, items, dtype, 1.0);
  peers.step(stream, "an IPC allgather's copy out");
}

void ipc_broadcast(PeerBuffers& peers, gpu::Stream& stream, void* buf, size_t count, DataType dtype,
                   int root) {
  const size_t bytes = count * dtype_size(dtype);
  const std::vector<char*>& bufs = peers.buffers(bytes);
  const bool is_root = peers.comm().rank() == root;
  if (is_root) stream.copy(peers.mine(), buf, bytes);
  peers.step(stream, "an IPC broadcast's copy in");
  if (!is_root) stream.copy(buf, bufs[static_cast<size_t>(root)], bytes);
  peers.step(stream, "an IPC broadcast's copy out");
}

void ipc_reduce_scatter(PeerBuffers& peers, gpu::Stream& stream, const void* send, void* recv,
                        size_t block, DataType dtype, ReduceOp op, double factor) {
  const size_t es = dtype_size(dtype);
  const auto n = static_cast<size_t>(peers.comm().size());
  const std::vector<char*>& buf = peers.buffers(block * n * es);
  stream.copy(peers.mine(), send, block * n * es);
  peers.step(stream, "an IPC reduce-scatter's copy in");
  const size_t offset = static_cast<size_t>(peers.comm().rank()) * block * es;
  if (block > 0) stream.reduce_many(dtype, op, chunk_of_each(buf, offset), recv, block, factor);
  peers.step(stream, "an IPC reduce-scatter's reduction");
}

namespace {

// Every rank's send and receive counts (row r: rank r's), checked pairwise on every rank alike,
// so a mismatch is the same error everywhere instead of a wait for a rank that has thrown.
std::vector<uint64_t> agreed_counts(Communicator& comm, const std::vector<size_t>& send,
                                    const std::vector<size_t>& recv) {
  const auto n = static_cast<size_t>(comm.size());
  TESSERA_CHECK(send.size() == n && recv.size() == n, "alltoallv needs ", n,
                " send and receive counts (one per rank), got ", send.size(), " and ", recv.size());
  std::vector<uint64_t> mine(2 * n), all(2 * n * n);
  for (size_t j = 0; j < n; ++j) {
    mine[j] = send[j];
    mine[n + j] = recv[j];
  }
  allgather(comm, mine.data(), all.data(), 2 * n, DataType::kInt64);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      const uint64_t sent = all[i * 2 * n + j], expected = all[j * 2 * n + n + i];
      TESSERA_CHECK(sent == expected, "alltoallv: rank ", i, " sends ", sent, " elements to rank ",
                    j, ", which expects ", expected, " from it");
    }
  }
  return all;
}

}  // namespace

void ipc_alltoallv(PeerBuffers& peers, gpu::Stream& stream, const void* send,
                   const std::vector<size_t>& send_counts, void* recv,
                   const std::vector<size_t>& recv_counts, DataType dtype) {
  const size_t es = dtype_size(dtype);
  const auto n = static_cast<size_t>(peers.comm().size());
  const auto me = static_cast<size_t>(peers.comm().rank());
  const std::vector<uint64_t> all = agreed_counts(peers.comm(), send_counts, recv_counts);
  // Rank i's send counts, and the largest total any rank sends.
  auto sends_of = [&](size_t i) {
    return std::vector<size_t>(all.begin() + static_cast<long>(i * 2 * n),
                               all.begin() + static_cast<long>(i * 2 * n + n));
  };
  size_t largest = 0;
  for (size_t i = 0; i < n; ++i) largest = std::max(largest, prefix(sends_of(i), n));
  const std::vector<char*>& buf = peers.buffers(largest * es);
  stream.copy(peers.mine(), send, prefix(send_counts, n) * es);
  peers.step(stream, "an IPC alltoall's copy in");
  std::vector<gpu::CopyItem> items;
  for (size_t j = 0; j < n; ++j) {
    items.push_back({buf[j] + prefix(sends_of(j), me) * es,
                     static_cast<char*>(recv) + prefix(recv_counts, j) * es, recv_counts[j] * es});
  }
  copy_items(stream, items, dtype, 1.0);
  peers.step(stream, "an IPC alltoall's copy out");
}

}  // namespace comm
}  // namespace tessera
