// Ring allreduce: a reduce-scatter followed by an allgather around the ring r -> r + 1.
//
// Words: the vector of `count` elements is cut into P *chunks* (chunk_range), one per rank; a
// chunk travels in *segments* of at most segment_bytes so that the reduction of segment j
// overlaps the transfer of segment j + 1. Each of the 2 (P - 1) *steps* moves one chunk to the
// right neighbour.
//
//   reduce-scatter, step s = 0 .. P-2: send chunk (r - s - 1), receive chunk (r - s - 2) and
//     combine it with our own contribution; after the last step chunk r is complete here.
//   allgather, step s = 0 .. P-2: send chunk (r - s), receive chunk (r - s - 1) in place.
//
// Bytes sent per rank: 2 (P - 1) / P * N; reductions per rank: (P - 1) / P * N elements.
#include <cstring>

#include "comm/algorithms.h"
#include "comm/communicator.h"
#include "comm/p2p.h"
#include "comm/topology.h"
#include "common/reduce.h"

namespace tessera {
namespace comm {
namespace {

constexpr int kTagReduceScatter = 11;
constexpr int kTagAllgather = 12;

int mod(int a, int n) { return ((a % n) + n) % n; }

// The reduce-scatter phase. `acc(chunk, step)` says where the combined chunk of that step is
// written; `src` holds this rank's contribution; `ranges` cut the vector into P chunks.
// Returns the pointer holding the completed chunk r.
template <typename AccFn>
char* ring_reduce_scatter_phase(Communicator& comm, const char* src, size_t count, DataType dtype,
                                ReduceOp op, size_t segment_bytes, double timeout_s, AccFn acc) {
  const int n = comm.size();
  const int r = comm.rank();
  const size_t esize = dtype_size(dtype);
  const size_t seg = segment_bytes / esize > 0 ? segment_bytes / esize : 1;
  size_t max_chunk = chunk_range(count, n, 0).size();
  char* incoming = static_cast<char*>(comm.scratch(0, max_chunk * esize));
  const char* outgoing = nullptr;  // the chunk combined at the previous step
  char* completed = nullptr;
  for (int s = 0; s < n - 1; ++s) {
    const int send_c = mod(r - s - 1, n);
    const int recv_c = mod(r - s - 2, n);
    const Range sr = chunk_range(count, n, send_c);
    const Range rr = chunk_range(count, n, recv_c);
    const char* send_ptr = s == 0 ? src + sr.begin * esize : outgoing;
    char* out = acc(rr, s);
    Requests reqs(comm, "ring allreduce (reduce-scatter)", timeout_s);
    // Post every segment's receive first, then the sends, then combine segments in order as
    // they land: the reduction of one segment overlaps the transfer of the next.
    std::vector<int> recv_ids;
    for (size_t off = 0; off < rr.size(); off += seg) {
      const size_t len = std::min(seg, rr.size() - off);
      recv_ids.push_back(
          reqs.irecv(incoming + off * esize, len * esize, ring_prev(n, r), kTagReduceScatter));
    }
    for (size_t off = 0; off < sr.size(); off += seg) {
      const size_t len = std::min(seg, sr.size() - off);
      reqs.isend(send_ptr + off * esize, len * esize, ring_next(n, r), kTagReduceScatter);
    }
    size_t j = 0;
    for (size_t off = 0; off < rr.size(); off += seg, ++j) {
      const size_t len = std::min(seg, rr.size() - off);
      reqs.wait(recv_ids[j]);
      reduce(dtype, op, src + (rr.begin + off) * esize, incoming + off * esize, out + off * esize,
             len);
    }
    reqs.wait_all();
    outgoing = out;
    completed = out;
  }
  return completed;
}

}  // namespace

void ring_allreduce(Communicator& comm, const AllreduceArgs& a) {
  const int n = comm.size();
  const int r = comm.rank();
  const size_t esize = dtype_size(a.dtype);
  const char* src = static_cast<const char*>(a.send);
  char* dst = static_cast<char*>(a.recv);
  // Reduce-scatter straight into the output: out[chunk] = ours[chunk] + incoming, so no
  // copy of the input is needed even out of place.
  ring_reduce_scatter_phase(comm, src, a.count, a.dtype, a.op, a.segment_bytes, a.timeout_s,
                            [&](const Range& rr, int) { return dst + rr.begin * esize; });
  const Range mine = chunk_range(a.count, n, r);
  // Averaging is folded in here: each rank scales only its own chunk before the allgather.
  finish_average(a, n, dst + mine.begin * esize, mine.size());
  for (int s = 0; s < n - 1; ++s) {
    const Range sr = chunk_range(a.count, n, mod(r - s, n));
    const Range rr = chunk_range(a.count, n, mod(r - s - 1, n));
    Requests reqs(comm, "ring allreduce (allgather)", a.timeout_s);
    reqs.irecv(dst + rr.begin * esize, rr.size() * esize, ring_prev(n, r), kTagAllgather);
    reqs.isend(dst + sr.begin * esize, sr.size() * esize, ring_next(n, r), kTagAllgather);
    reqs.wait_all();
  }
}

void ring_reduce_scatter(Communicator& comm, const void* send, void* recv, size_t block,
                         DataType dtype, ReduceOp op, size_t segment_bytes, double timeout_s) {
  const int n = comm.size();
  const size_t esize = dtype_size(dtype);
  const size_t count = block * static_cast<size_t>(n);
  // Intermediate chunks alternate between two scratch blocks (the previous one may still be in
  // flight); the last step writes the caller's output.
  char* tmp[2] = {static_cast<char*>(comm.scratch(1, block * esize)),
                  static_cast<char*>(comm.scratch(2, block * esize))};
  ring_reduce_scatter_phase(comm, static_cast<const char*>(send), count, dtype, op, segment_bytes,
                            timeout_s, [&](const Range&, int step) {
                              return step == n - 2 ? static_cast<char*>(recv) : tmp[step & 1];
                            });
}

}  // namespace comm
}  // namespace tessera
