#include "comm/collectives.h"

#include <climits>
#include <cstring>

#include "comm/algorithms.h"
#include "comm/mpi_internal.h"
#include "comm/mpi_types.h"
#include "comm/p2p.h"
#include "common/reduce.h"

namespace tessera {
namespace comm {
namespace {

// A communicator without node structure (local(), cross()) cannot run the hierarchical
// algorithm, which needs its local(): it counts as non-uniform, so auto never picks it there.
CommShape shape_of(const Communicator& comm) {
  return {comm.size(), comm.num_nodes(), comm.local_size(),
          comm.local() != nullptr && comm.uniform_nodes()};
}

void check_buffer(const void* p, size_t count, const char* name, const char* what) {
  TESSERA_CHECK(p != nullptr || count == 0, what, ": ", name, " is null but ", count,
                " elements were asked for; pass a buffer of at least that many elements");
}

int checked_int(size_t v, const char* what) {
  TESSERA_CHECK(v <= static_cast<size_t>(INT_MAX), what, ": ", v,
                " elements exceed MPI's int count limit of ", INT_MAX,
                "; split the call into smaller ones");
  return static_cast<int>(v);
}

}  // namespace

void finish_average(const AllreduceArgs& a, int comm_size, void* data, size_t count) {
  if (a.op != ReduceOp::kAverage || count == 0) return;
  const int divisor = a.average_over > 0 ? a.average_over : comm_size;
  scale(a.dtype, 1.0 / divisor, data, data, count);
}

void run_allreduce(Algorithm algorithm, Communicator& comm, const AllreduceArgs& a) {
  if (comm.size() == 1) {
    if (a.send != a.recv) std::memcpy(a.recv, a.send, a.count * dtype_size(a.dtype));
    return;  // the average over one rank is the value itself
  }
  switch (algorithm) {
    case Algorithm::kRing:
      return ring_allreduce(comm, a);
    case Algorithm::kRhd:
      return rhd_allreduce(comm, a);
    case Algorithm::kDbtree:
      return dbtree_allreduce(comm, a);
    case Algorithm::kMulticolor:
      return multicolor_allreduce(comm, a);
    case Algorithm::kHierarchical:
      return hierarchical_allreduce(comm, a);
    case Algorithm::kMpi:
      return mpi_allreduce(comm, a);
    case Algorithm::kAuto:
      break;
  }
  TESSERA_ASSERT(false, "run_allreduce needs a concrete algorithm");
}

namespace {

ChoiceCache::Entry choose_uncached(const Communicator& comm, size_t bytes, Algorithm requested) {
  ChoiceCache::Entry c;
  c.used = true;
  c.bytes = bytes;
  c.requested = requested;
  c.algorithm = choose_allreduce(comm, bytes, requested);
  if (c.algorithm == Algorithm::kHierarchical && comm.num_nodes() > 1) {
    // The cross-node phase moves 1/L of the vector between nodes: pick for that size.
    const CostTable& table = *comm.settings().cost_table;
    const size_t cross_bytes = bytes / static_cast<size_t>(comm.local_size());
    const CommShape cross{comm.num_nodes(), comm.num_nodes(), 1, true};
    double best = predict_us(table, Algorithm::kRing, cross, cross_bytes);
    for (Algorithm x : {Algorithm::kRhd, Algorithm::kDbtree}) {
      const double us = predict_us(table, x, cross, cross_bytes);
      if (us < best) {
        best = us;
        c.cross_algorithm = x;
      }
    }
  }
  return c;
}

// The communicator's settings and shape are fixed between set_settings calls (which empty the
// cache), so the size and the request are the whole key.
const ChoiceCache::Entry& choose_cached(const Communicator& comm, size_t bytes,
                                        Algorithm requested) {
  ChoiceCache& cache = comm.state().choices;
  const size_t slot = (bytes * 0x9E3779B97F4A7C15ull >> 58) % ChoiceCache::kSlots;
  ChoiceCache::Entry& e = cache.slots[slot];
  if (!e.used || e.bytes != bytes || e.requested != requested) {
    e = choose_uncached(comm, bytes, requested);
  }
  return e;
}

}  // namespace

Algorithm choose_allreduce(const Communicator& comm, size_t bytes, Algorithm requested) {
  const CommShape shape = shape_of(comm);
  if (requested != Algorithm::kAuto) {
    TESSERA_CHECK(can_use(requested, shape), algorithm_name(requested), " cannot run on ",
                  comm.describe(), ": it needs the same number of ranks on every node");
    return requested;
  }
  const Settings& s = comm.settings();
  return select_allreduce(*s.cost_table, s.allreduce_ranges, shape, bytes);
}

void allreduce(Communicator& comm, const void* send, void* recv, size_t count, DataType dtype,
               const AllreduceOptions& options) {
  check_buffer(send, count, "the input", "allreduce");
  check_buffer(recv, count, "the output", "allreduce");
  check_op_supported(dtype, options.op);
  const size_t bytes = checked_bytes(count, dtype);
  if (count == 0) return;
  const Settings& k = comm.settings();
  AllreduceArgs a;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.dtype = dtype;
  a.op = options.op;
  a.segment_bytes = k.segment_bytes;
  a.colors = k.colors;
  a.shm_bytes = k.shm_bytes;
  a.timeout_s = k.timeout_s;
  const ChoiceCache::Entry& choice = choose_cached(comm, bytes, options.algorithm);
  a.cross_algorithm = choice.cross_algorithm;
  run_allreduce(choice.algorithm, comm, a);
}

void allgather(Communicator& comm, const void* send, void* recv, size_t count, DataType dtype) {
  check_buffer(send, count, "the input", "allgather");
  check_buffer(recv, count, "the output", "allgather");
  const size_t esize = dtype_size(dtype);
  checked_bytes(count * static_cast<size_t>(comm.size()), dtype);
  if (count == 0) return;
  const int n = checked_int(count, "allgather");
  checked_int(count * static_cast<size_t>(comm.size()), "allgather");
  const bool in_place =
      send == static_cast<const char*>(recv) + static_cast<size_t>(comm.rank()) * count * esize;
  Requests reqs(comm, "allgather", comm.settings().timeout_s);
  MPI_Request r = MPI_REQUEST_NULL;
  TESSERA_MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, n, mpi_datatype(dtype), recv, n,
                                   mpi_datatype(dtype), mpi_comm(comm), &r));
  reqs.add(r, count * esize);
  reqs.wait_all();
}

void allgatherv(Communicator& comm, const void* send, void* recv, const std::vector<size_t>& counts,
                DataType dtype) {
  const int size = comm.size();
  TESSERA_CHECK_EQ(counts.size(), static_cast<size_t>(size), "allgatherv needs one count per rank");
  const size_t mine = counts[static_cast<size_t>(comm.rank())];
  size_t total = 0;
  std::vector<int> c(static_cast<size_t>(size)), d(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    c[static_cast<size_t>(r)] = checked_int(counts[static_cast<size_t>(r)], "allgatherv");
    d[static_cast<size_t>(r)] = checked_int(total, "allgatherv");
    total += counts[static_cast<size_t>(r)];
  }
  checked_bytes(total, dtype);
  check_buffer(send, mine, "the input", "allgatherv");
  check_buffer(recv, total, "the output", "allgatherv");
  if (total == 0) return;
  const size_t esize = dtype_size(dtype);
  const bool in_place =
      send == static_cast<const char*>(recv) +
                  static_cast<size_t>(d[static_cast<size_t>(comm.rank())]) * esize;
  Requests reqs(comm, "allgatherv", comm.settings().timeout_s);
  MPI_Request r = MPI_REQUEST_NULL;
  TESSERA_MPI_CHECK(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, static_cast<int>(mine),
                                    mpi_datatype(dtype), recv, c.data(), d.data(),
                                    mpi_datatype(dtype), mpi_comm(comm), &r));
  reqs.add(r, total * esize);
  reqs.wait_all();
}

void broadcast(Communicator& comm, void* buf, size_t count, DataType dtype, int root) {
  check_buffer(buf, count, "the buffer", "broadcast");
  TESSERA_CHECK(root >= 0 && root < comm.size(), "broadcast root ", root, " is not a rank of ",
                comm.describe(), "; accepted: 0 to ", comm.size() - 1);
  checked_bytes(count, dtype);
  if (count == 0 || comm.size() == 1) return;
  Requests reqs(comm, "broadcast", comm.settings().timeout_s);
  MPI_Request r = MPI_REQUEST_NULL;
  TESSERA_MPI_CHECK(MPI_Ibcast(buf, checked_int(count, "broadcast"), mpi_datatype(dtype), root,
                               mpi_comm(comm), &r));
  reqs.add(r, count * dtype_size(dtype));
  reqs.wait_all();
}

void reduce_scatter(Communicator& comm, const void* send, void* recv, size_t block, DataType dtype,
                    ReduceOp op) {
  const size_t total = block * static_cast<size_t>(comm.size());
  TESSERA_CHECK(comm.size() == 0 || total / static_cast<size_t>(comm.size()) == block,
                "reduce_scatter: ", block, " elements per rank overflow");
  check_buffer(send, total, "the input", "reduce_scatter");
  check_buffer(recv, block, "the output", "reduce_scatter");
  check_op_supported(dtype, op);
  checked_bytes(total, dtype);
  if (block == 0) return;
  const size_t esize = dtype_size(dtype);
  if (comm.size() == 1) {
    if (send != recv) std::memmove(recv, send, block * esize);
    return;
  }
  ring_reduce_scatter(comm, send, recv, block, dtype, op, comm.settings().segment_bytes,
                      comm.settings().timeout_s);
  AllreduceArgs a;
  a.dtype = dtype;
  a.op = op;
  finish_average(a, comm.size(), recv, block);
}

void alltoall(Communicator& comm, const void* send, void* recv, size_t block, DataType dtype) {
  const size_t total = block * static_cast<size_t>(comm.size());
  check_buffer(send, total, "the input", "alltoall");
  check_buffer(recv, total, "the output", "alltoall");
  checked_bytes(total, dtype);
  if (block == 0) return;
  const int n = checked_int(block, "alltoall");
  checked_int(total, "alltoall");
  Requests reqs(comm, "alltoall", comm.settings().timeout_s);
  MPI_Request r = MPI_REQUEST_NULL;
  TESSERA_MPI_CHECK(MPI_Ialltoall(send == recv ? MPI_IN_PLACE : send, n, mpi_datatype(dtype), recv,
                                  n, mpi_datatype(dtype), mpi_comm(comm), &r));
  reqs.add(r, total * dtype_size(dtype));
  reqs.wait_all();
}

void alltoallv(Communicator& comm, const void* send, const std::vector<size_t>& send_counts,
               void* recv, const std::vector<size_t>& recv_counts, DataType dtype) {
  const size_t size = static_cast<size_t>(comm.size());
  TESSERA_CHECK_EQ(send_counts.size(), size, "alltoallv needs one send count per rank");
  TESSERA_CHECK_EQ(recv_counts.size(), size, "alltoallv needs one receive count per rank");
  std::vector<int> sc(size), sd(size), rc(size), rd(size);
  size_t st = 0, rt = 0;
  for (size_t r = 0; r < size; ++r) {
    sc[r] = checked_int(send_counts[r], "alltoallv");
    sd[r] = checked_int(st, "alltoallv");
    rc[r] = checked_int(recv_counts[r], "alltoallv");
    rd[r] = checked_int(rt, "alltoallv");
    st += send_counts[r];
    rt += recv_counts[r];
  }
  checked_bytes(st, dtype);
  checked_bytes(rt, dtype);
  check_buffer(send, st, "the input", "alltoallv");
  check_buffer(recv, rt, "the output", "alltoallv");
  TESSERA_CHECK(send != recv || st == 0, "alltoallv cannot run in place; pass two buffers");
  // Every rank calls MPI even when it moves nothing: the others may still send to it.
  Requests reqs(comm, "alltoallv", comm.settings().timeout_s);
  MPI_Request r = MPI_REQUEST_NULL;
  TESSERA_MPI_CHECK(MPI_Ialltoallv(send, sc.data(), sd.data(), mpi_datatype(dtype), recv, rc.data(),
                                   rd.data(), mpi_datatype(dtype), mpi_comm(comm), &r));
  reqs.add(r, (st + rt) * dtype_size(dtype));
  reqs.wait_all();
}

void exchange(Communicator& comm, const std::vector<PeerBuffer>& sends,
              const std::vector<PeerBuffer>& recvs) {
  for (const auto* list : {&sends, &recvs}) {
    for (const PeerBuffer& b : *list) {
      TESSERA_CHECK(b.peer >= -1 && b.peer < comm.size(), "exchange: peer ", b.peer,
                    " is outside 0..", comm.size() - 1);
      TESSERA_CHECK(b.tag >= 0 && b.tag < (1 << 15), "exchange: tag ", b.tag,
                    " is outside 0..32767");
      check_buffer(b.data, b.bytes, "a buffer", "exchange");
    }
  }
  Requests reqs(comm, "exchange", comm.settings().timeout_s);
  for (const PeerBuffer& b : recvs) {
    if (b.peer >= 0 && b.bytes > 0) reqs.irecv(b.data, b.bytes, b.peer, b.tag);
  }
  for (const PeerBuffer& b : sends) {
    if (b.peer >= 0 && b.bytes > 0) reqs.isend(b.data, b.bytes, b.peer, b.tag);
  }
  reqs.wait_all();
}

void barrier(Communicator& comm) {
  Requests reqs(comm, "barrier", comm.settings().timeout_s);
  MPI_Request r = MPI_REQUEST_NULL;
  TESSERA_MPI_CHECK(MPI_Ibarrier(mpi_comm(comm), &r));
  reqs.add(r, 0);
  reqs.wait_all();
}

namespace mpi_reference {

void allgather(Communicator& comm, const void* send, void* recv, size_t count, DataType dtype) {
  const int n = checked_int(count, "allgather");
  TESSERA_MPI_CHECK(
      MPI_Allgather(send, n, mpi_datatype(dtype), recv, n, mpi_datatype(dtype), mpi_comm(comm)));
}

void broadcast(Communicator& comm, void* buf, size_t count, DataType dtype, int root) {
  TESSERA_MPI_CHECK(
      MPI_Bcast(buf, checked_int(count, "broadcast"), mpi_datatype(dtype), root, mpi_comm(comm)));
}

void reduce_scatter(Communicator& comm, const void* send, void* recv, size_t block, DataType dtype,
                    ReduceOp op) {
  TESSERA_MPI_CHECK(MPI_Reduce_scatter_block(send, recv, checked_int(block, "reduce_scatter"),
                                             mpi_datatype(dtype), mpi_op(dtype, op),
                                             mpi_comm(comm)));
  AllreduceArgs a;
  a.dtype = dtype;
  a.op = op;
  finish_average(a, comm.size(), recv, block);
}

void alltoall(Communicator& comm, const void* send, void* recv, size_t block, DataType dtype) {
  const int n = checked_int(block, "alltoall");
  TESSERA_MPI_CHECK(
      MPI_Alltoall(send, n, mpi_datatype(dtype), recv, n, mpi_datatype(dtype), mpi_comm(comm)));
}

}  // namespace mpi_reference
}  // namespace comm
}  // namespace tessera
