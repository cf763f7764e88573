// Recursive halving-doubling allreduce (Rabenseifner), for any number of ranks.
//
// Let p be the largest power of two <= P and rem = P - p (rhd_plan). Steps:
//   fold:      ranks 2i and 2i + 1 (i < rem) combine: the even rank sends its whole vector
//              to the odd one and sits out;
//   halving:   log2 p steps; at mask m the participant keeps the half of its current region
//              on its side of bit m, sends the other half to participant (q ^ m) and combines
//              what it receives; afterwards it owns 1/p of the vector, fully reduced;
//   doubling:  the same partners in reverse order exchange their regions, doubling them;
//   unfold:    the odd rank of each folded pair sends the result back.
// Small vectors (and p = 2, where it is never worse) use recursive doubling instead: log2 p
// exchanges of the whole vector, half the latency of halving plus doubling.
//
// Bytes sent per participant: 2 (p - 1) / p * N (+ N for the fold and unfold when rem > 0);
// recursive doubling: log2 p * N.
#include <cstring>
#include <vector>

#include "comm/algorithms.h"
#include "comm/communicator.h"
#include "comm/p2p.h"
#include "comm/topology.h"
#include "common/reduce.h"

namespace tessera {
namespace comm {
namespace {

constexpr int kTagFold = 21;
constexpr int kTagHalving = 22;
constexpr int kTagDoubling = 23;
// Below this size the exchange count, not the bytes, dominates (a few microseconds of latency
// per step against a few GB/s): recursive doubling's log2 p exchanges win.
constexpr size_t kRecursiveDoublingMaxBytes = size_t{32} << 10;

// Recursive doubling over the plan's partners: log2 p exchanges of the whole vector. `src` is
// this rank's contribution (possibly folded into `dst` already); the result lands in `dst`.
void recursive_doubling(Communicator& comm, const AllreduceArgs& a, const RhdPlan& plan,
                        const char* src, char* dst, char* incoming) {
  const size_t bytes = a.count * dtype_size(a.dtype);
  for (auto it = plan.partners.rbegin(); it != plan.partners.rend(); ++it) {
    Requests reqs(comm, "rhd allreduce (recursive doubling)", a.timeout_s);
    reqs.irecv(incoming, bytes, *it, kTagDoubling);
    reqs.isend(src, bytes, *it, kTagDoubling);
    reqs.wait_all();
    // Commutative ops on IEEE values give the same bits in either operand order, so both
    // partners hold identical vectors after every step.
    reduce(a.dtype, a.op, src, incoming, dst, a.count);
    src = dst;
  }
  if (src != dst) std::memcpy(dst, src, bytes);
  finish_average(a, comm.size(), dst, a.count);
}

// Halving then doubling over the plan's partners (Rabenseifner); the result lands in `dst`.
void halving_doubling(Communicator& comm, const AllreduceArgs& a, const RhdPlan& plan,
                      const char* src, char* dst, char* incoming) {
  const size_t esize = dtype_size(a.dtype);
  // Halving: remember each step's split so that doubling can undo it.
  struct Split {
    size_t lo, mid, hi;
    bool keep_low;
  };
  std::vector<Split> splits;
  size_t lo = 0, hi = a.count;
  int mask = plan.pof2 / 2;
  for (int partner : plan.partners) {
    const size_t mid = lo + (hi - lo) / 2;
    const bool keep_low = (plan.new_rank & mask) == 0;
    const size_t keep_lo = keep_low ? lo : mid, keep_hi = keep_low ? mid : hi;
    const size_t give_lo = keep_low ? mid : lo, give_hi = keep_low ? hi : mid;
    Requests reqs(comm, "rhd allreduce (halving)", a.timeout_s);
    reqs.irecv(incoming, (keep_hi - keep_lo) * esize, partner, kTagHalving);
    reqs.isend(src + give_lo * esize, (give_hi - give_lo) * esize, partner, kTagHalving);
    reqs.wait_all();
    reduce(a.dtype, a.op, src + keep_lo * esize, incoming, dst + keep_lo * esize,
           keep_hi - keep_lo);
    src = dst;
    splits.push_back({lo, mid, hi, keep_low});
    lo = keep_lo;
    hi = keep_hi;
    mask /= 2;
  }
  finish_average(a, comm.size(), dst + lo * esize, hi - lo);
  for (size_t i = splits.size(); i-- > 0;) {
    const Split& sp = splits[i];
    const size_t other_lo = sp.keep_low ? sp.mid : sp.lo;
    const size_t other_hi = sp.keep_low ? sp.hi : sp.mid;
    Requests reqs(comm, "rhd allreduce (doubling)", a.timeout_s);
    reqs.irecv(dst + other_lo * esize, (other_hi - other_lo) * esize, plan.partners[i],
               kTagDoubling);
    reqs.isend(dst + lo * esize, (hi - lo) * esize, plan.partners[i], kTagDoubling);
    reqs.wait_all();
    lo = sp.lo;
    hi = sp.hi;
  }
}

}  // namespace

void rhd_allreduce(Communicator& comm, const AllreduceArgs& a) {
  const size_t bytes = a.count * dtype_size(a.dtype);
  const RhdPlan plan = rhd_plan(comm.size(), comm.rank());
  const char* src = static_cast<const char*>(a.send);  // where our contribution is now
  char* dst = static_cast<char*>(a.recv);
  char* incoming = static_cast<char*>(comm.scratch(0, bytes));

  if (plan.new_rank < 0) {
    // Folded out: hand over the vector, get the result back.
    Requests reqs(comm, "rhd allreduce (fold)", a.timeout_s);
    reqs.isend(src, bytes, plan.fold_partner, kTagFold);
    reqs.wait_all();
    reqs.irecv(dst, bytes, plan.fold_partner, kTagFold);
    reqs.wait_all();
    return;
  }
  if (plan.fold_partner >= 0) {
    Requests reqs(comm, "rhd allreduce (fold)", a.timeout_s);
    reqs.irecv(incoming, bytes, plan.fold_partner, kTagFold);
    reqs.wait_all();
    reduce(a.dtype, a.op, src, incoming, dst, a.count);
    src = dst;
  }
  if (bytes <= kRecursiveDoublingMaxBytes || plan.pof2 == 2) {
    recursive_doubling(comm, a, plan, src, dst, incoming);
  } else {
    halving_doubling(comm, a, plan, src, dst, incoming);
  }
  if (plan.fold_partner >= 0) {
    Requests reqs(comm, "rhd allreduce (unfold)", a.timeout_s);
    reqs.isend(dst, bytes, plan.fold_partner, kTagFold);
    reqs.wait_all();
  }
}

}  // namespace comm
}  // namespace tessera
