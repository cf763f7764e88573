// Hierarchical allreduce: reduce within the node through shared memory, allreduce across
// nodes between ranks of the same local rank, share the result within the node again.
//
// The node-local phases read straight from the other ranks' memory (an MPI-3 shared window,
// ShmArena) instead of sending messages. The vector goes through in pieces of at most
// shm_bytes; per piece, with L ranks on the node, local rank l:
//   1. copy in:   write our contribution to the chunks the other local ranks own into our
//                 shared buffer (chunk_range of the piece over L), and arrive;
//   2. reduce:    wait for all; combine chunk l of our private input with chunk l of every
//                 other rank's buffer, in local-rank order, into the output;
//   3. cross:     allreduce chunk l across nodes with the cross-node algorithm (several nodes
//                 only); divide for average;
//   4. publish:   copy the finished chunk l into our shared buffer, and arrive;
//   5. copy out:  wait for all; copy every other chunk from its owner's buffer.
// Small pieces (<= kSmallBytes) take one step instead: everyone copies the whole piece in,
// arrives, waits, and reduces the whole piece from all buffers in local-rank order (then the
// cross-node allreduce of the whole piece, by every local rank at once).
//
// Per rank and piece of N bytes: copy in (L-1)/L N, read N and write 2N/L in the reduction,
// copy out (L-1)/L N: about 2 N of memory traffic each way, and no message at all on one node.
#include <algorithm>
#include <cstring>

#include "comm/algorithms.h"
#include "comm/communicator.h"
#include "comm/shm_arena.h"
#include "comm/topology.h"
#include "common/error.h"
#include "common/reduce.h"

namespace tessera {
namespace comm {
namespace {

// At or below this many bytes, one shared-memory step (each rank reduces everything) beats two
// steps (reduce-scatter then allgather): the second synchronisation costs more than L-fold
// reduction of a few kilobytes.
constexpr size_t kSmallBytes = size_t{16} << 10;

void cross_allreduce(Communicator& comm, const AllreduceArgs& a, void* data, size_t count) {
  Communicator* cross = comm.cross();
  if (cross == nullptr || cross->size() == 1 || count == 0) return;
  AllreduceArgs c = a;
  c.send = data;
  c.recv = data;
  c.count = count;
  // Average is divided once, by the caller, over all ranks: the cross phase only sums.
  if (c.op == ReduceOp::kAverage) c.op = ReduceOp::kSum;
  run_allreduce(a.cross_algorithm, *cross, c);
}

}  // namespace

void hierarchical_allreduce(Communicator& comm, const AllreduceArgs& a) {
  Communicator* local = comm.local();
  TESSERA_CHECK(local != nullptr && comm.uniform_nodes(),
                "the hierarchical allreduce needs the same number of ranks on every node; ",
                comm.describe(), " does not have that. Choose another algorithm (ring, rhd, ...)");
  const int l_size = local->size();
  const int l_rank = local->rank();
  const size_t esize = dtype_size(a.dtype);
  ShmArena& arena = comm.shm_arena(a.shm_bytes);
  const size_t piece = std::max<size_t>(1, a.shm_bytes / esize);
  const char* src = static_cast<const char*>(a.send);
  char* dst = static_cast<char*>(a.recv);
  const int world = a.average_over > 0 ? a.average_over : comm.size();
  AllreduceArgs whole = a;
  whole.average_over = world;

  for (size_t base = 0; base < a.count; base += piece) {
    const size_t count = std::min(piece, a.count - base);
    const char* in = src + base * esize;
    char* out = dst + base * esize;
    const int parity = arena.begin_step();
    char* mine = arena.buffer(l_rank, parity);
    if (count * esize <= kSmallBytes) {
      std::memcpy(mine, in, count * esize);
      arena.arrive();
      arena.wait_all(a.timeout_s, "hierarchical allreduce");
      // Same operands in the same order on every local rank: identical bits everywhere.
      if (l_size == 1) {
        std::memcpy(out, mine, count * esize);
      } else {
        reduce(a.dtype, a.op, arena.buffer(0, parity), arena.buffer(1, parity), out, count);
        for (int q = 2; q < l_size; ++q) {
          reduce(a.dtype, a.op, out, arena.buffer(q, parity), out, count);
        }
      }
      cross_allreduce(comm, a, out, count);
      finish_average(whole, world, out, count);
      continue;
    }
    // 1. copy in the chunks the others own
    for (int q = 0; q < l_size; ++q) {
      if (q == l_rank) continue;
      const Range c = chunk_range(count, l_size, q);
      std::memcpy(mine + c.begin * esize, in + c.begin * esize, c.size() * esize);
    }
    arena.arrive();
    arena.wait_all(a.timeout_s, "hierarchical allreduce (reduce-scatter)");
    // 2. reduce our chunk: our own contribution first (in place it lives where the sum goes),
    // then the others' in local-rank order; a fixed order, so runs repeat bit for bit.
    const Range own = chunk_range(count, l_size, l_rank);
    char* acc = out + own.begin * esize;
    const char* own_in = in + own.begin * esize;
    bool first = true;
    for (int q = 0; q < l_size; ++q) {
      if (q == l_rank) continue;
      reduce(a.dtype, a.op, first ? own_in : acc, arena.buffer(q, parity) + own.begin * esize, acc,
             own.size());
      first = false;
    }
    if (first && acc != own_in) std::memcpy(acc, own_in, own.size() * esize);
    // 3. across nodes
    cross_allreduce(comm, a, acc, own.size());
    finish_average(whole, world, acc, own.size());
    if (l_size == 1) continue;
    // 4. publish
    std::memcpy(mine + own.begin * esize, acc, own.size() * esize);
    arena.arrive();
    arena.wait_all(a.timeout_s, "hierarchical allreduce (allgather)");
    // 5. copy out
    for (int q = 0; q < l_size; ++q) {
      if (q == l_rank) continue;
      const Range c = chunk_range(count, l_size, q);
      std::memcpy(out + c.begin * esize, arena.buffer(q, parity) + c.begin * esize,
                  c.size() * esize);
    }
  }
}

}  // namespace comm
}  // namespace tessera
