// The device IPC backend: within one node, every rank's stream reads the other ranks' buffers
// (PeerBuffers) directly, so no byte crosses the host; several ranks may share one GPU. Each
// collective is a few steps, the ranks meeting on the host between them:
//
//   allreduce (n ranks, N bytes):  copy in    send -> own buffer                  (N)
//                                  reduce     chunk r of every buffer -> chunk r of own buffer,
//                                             one kernel over n inputs            (N + N/n)
//                                  copy out   every rank's chunk -> recv, one launch (N)
//   so each rank reads about 3N and writes 2N + N/n bytes of device memory; n ranks on one GPU
//   move n times that through it.
//   allgatherv, alltoallv:  copy in, then one batched copy from the peers' buffers.
//   broadcast:  the root copies in, the others copy from its buffer.
//   reduce-scatter:  copy in, then one kernel reduces block r of every buffer into recv.
// A rank whose device work fails makes every rank throw at the end of that step
// (PeerBuffers::step). Average is a sum with the factor 1/n folded into the kernel. Each chunk is
// computed by one rank, in rank order, so every rank gets the same bits.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "comm/device_peers.h"
#include "common/dtype.h"
#include "gpu/device.h"

namespace tessera {
namespace comm {

// Work on this rank's reduced chunk (device memory, `count` elements) before the other ranks
// copy it out: the hierarchical backend's cross-node allreduce. Enqueued on `stream` or done
// on the host; its effect must be complete when the stream's work so far has run.
using ChunkStep = std::function<void(gpu::Stream& stream, char* chunk, size_t count)>;

// op is a reduction (not average); the result is multiplied by `factor` (in the reduce kernel,
// or, with a `between` step, in the copy out). With `between`, the ranks agree that every
// reduction ran before any rank starts it.
void ipc_allreduce(PeerBuffers& peers, gpu::Stream& stream, const void* send, void* recv,
                   size_t count, DataType dtype, ReduceOp op, double factor,
                   const ChunkStep& between = nullptr);
void ipc_allgatherv(PeerBuffers& peers, gpu::Stream& stream, const void* send, void* recv,
                    const std::vector<size_t>& counts, DataType dtype);
void ipc_broadcast(PeerBuffers& peers, gpu::Stream& stream, void* buf, size_t count, DataType dtype,
                   int root);
void ipc_reduce_scatter(PeerBuffers& peers, gpu::Stream& stream, const void* send, void* recv,
                        size_t block, DataType dtype, ReduceOp op, double factor);
void ipc_alltoallv(PeerBuffers& peers, gpu::Stream& stream, const void* send,
                   const std::vector<size_t>& send_counts, void* recv,
                   const std::vector<size_t>& recv_counts, DataType dtype);

}  // namespace comm
}  // namespace tessera
