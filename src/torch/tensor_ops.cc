// Collectives on torch::Tensor: each call checks the tensor, makes it contiguous (a copy only
// when it is not), enqueues on the engine and returns a handle that keeps the tensors alive.
// CUDA tensors go through the engine's device path (torch/device_tensors.h).

#include <algorithm>

#include "common/error.h"
#include "engine/engine.h"
#include "tessera/torch.h"
#include "torch/context.h"
#include "torch/device_tensors.h"
#include "torch/dtype_map.h"
#include "torch/uneven_blocks.h"

namespace tessera {

class TensorOps {
 public:
  static void set(TensorHandle& h, engine::Handle e, torch::Tensor in, torch::Tensor out,
                  torch::Tensor target, bool allgather, const detail::DeviceUse& use) {
    h.handle_ = std::move(e);
    h.input_ = std::move(in);
    h.output_ = std::move(out);
    h.target_ = std::move(target);
    h.allgather_ = allgather;
    h.device_ = use.device;
    h.stream_ = use.stream;
    h.host_consumers_ = use.host_consumers;
  }
  // Enqueues one request over `in` -> `out` (`target`: an in-place call's tensor, which receives
  // the result if `out` is a copy of it).
  static TensorHandle one(engine::Request r, const detail::DeviceUse& use, torch::Tensor in,
                          torch::Tensor out, torch::Tensor target, bool allgather = false) {
    detail::attach(r, use, {in, out});
    TensorHandle h;
    set(h, global_engine().enqueue(std::move(r)), std::move(in), std::move(out), std::move(target),
        allgather, use);
    return h;
  }
  // Uneven blocks (torch/uneven_blocks.h): what synchronize() keeps of the padded result.
  static TensorHandle uneven(TensorHandle h, std::vector<int64_t> received, int64_t block,
                             int64_t keep_rows) {
    h.received_ = std::move(received);
    h.block_ = block;
    h.keep_rows_ = keep_rows;
    return h;
  }
  // A handle whose tensors travelled as bytes for a bool tensor: synchronize() views back.
  static TensorHandle logical(TensorHandle h, bool is_bool) {
    h.logical_ = is_bool;
    return h;
  }
  static std::vector<TensorHandle> logical(std::vector<TensorHandle> hs,
                                           const std::vector<torch::Tensor>& tensors) {
    for (size_t i = 0; i < hs.size(); ++i) {
      hs[i].logical_ = tensors[i].defined() && tensors[i].scalar_type() == torch::kBool;
    }
    return hs;
  }
  // Enqueues `requests` as one group; handle i keeps ins[i] and outs[i] alive, and an in-place
  // call's targets[i] (else undefined) receives the result.
  static std::vector<TensorHandle> group(std::vector<engine::Request> requests,
                                         const detail::DeviceUse& use,
                                         const std::vector<torch::Tensor>& ins,
                                         const std::vector<torch::Tensor>& outs,
                                         const std::vector<torch::Tensor>& targets,
                                         bool allgather = false) {
    for (size_t i = 0; i < requests.size(); ++i)
      detail::attach(requests[i], use, {ins[i], outs[i]});
    std::vector<engine::Handle> hs = global_engine().enqueue_group(std::move(requests));
    std::vector<TensorHandle> out(hs.size());
    for (size_t i = 0; i < hs.size(); ++i) {
      set(out[i], std::move(hs[i]), ins[i], outs[i], targets.empty() ? torch::Tensor() : targets[i],
          allgather, use);
    }
    return out;
  }
};

namespace {

std::vector<int64_t> shape_of(const torch::Tensor& t) { return t.sizes().vec(); }

bool is_bool(const torch::Tensor& t) { return t.defined() && t.scalar_type() == torch::kBool; }

// bool tensors travel as bytes, as Horovod takes them: their reductions are logical (Sum and
// Max are "or", Min and Product "and"); Average and Adasum mean nothing on them. `op` is null
// for the ops that do not reduce.
torch::Tensor logical_wire(const torch::Tensor& t, ReduceOp* op) {
  if (!is_bool(t)) return t;
  if (op != nullptr) {
    TESSERA_CHECK(*op != ReduceOp::kAverage && *op != ReduceOp::kAdasum,
                  "Average is not defined on bool tensors; use Sum (logical or) or Min (logical "
                  "and)");
    *op = (*op == ReduceOp::kSum || *op == ReduceOp::kMax) ? ReduceOp::kMax : ReduceOp::kMin;
  }
  return t.view(torch::kUInt8);
}

void check_tensor(const torch::Tensor& t, const char* what) {
  TESSERA_CHECK(t.defined(), what, ": the tensor is undefined");
  TESSERA_CHECK(!t.is_sparse(), what,
                ": sparse tensors are not supported; pass tensor.to_dense(), or reduce sparse "
                "gradients with sparse_allreduce_async");
  TESSERA_CHECK(t.device().is_cpu() || t.device().is_cuda(), what, ": the tensor is on ",
                t.device().str(), "; tessera takes CPU and CUDA tensors");
}

// A contiguous view of a CPU or CUDA tensor (a copy only when it is not contiguous): for the
// collectives that move rows (allgather, alltoall, reduce-scatter).
torch::Tensor contiguous(const torch::Tensor& t, const char* what) {
  check_tensor(t, what);
  return t.contiguous();
}

// For the element-wise collectives (allreduce, broadcast): the tensor as it is wherever its
// elements fill one block of memory without overlap, in whatever order (a channels-last
// gradient, a transpose), since element i of every rank's block meets element i of the
// others'; a contiguous copy otherwise. A channels-last gradient was copied to NCHW and back.
torch::Tensor dense(const torch::Tensor& t, const char* what) {
  check_tensor(t, what);
  return t.is_non_overlapping_and_dense() ? t : t.contiguous();
}

// A dense tensor's dimensions, outermost in memory first (channels-last NCHW: 0, 2, 3, 1);
// empty for a contiguous one. Ties (only dimensions of size 1 tie) keep their order.
std::vector<uint8_t> memory_order(const torch::Tensor& t) {
  if (t.is_contiguous()) return {};
  std::vector<uint8_t> order(static_cast<size_t>(t.dim()));
  for (size_t d = 0; d < order.size(); ++d) order[d] = static_cast<uint8_t>(d);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint8_t a, uint8_t b) { return t.stride(a) > t.stride(b); });
  return order;
}

// One request of `op` over dense `in` -> `out` (the same tensor for in-place calls).
engine::Request make_request(engine::OpType op, const std::string& name, const torch::Tensor& in,
                             const torch::Tensor& out, int process_set) {
  engine::Request r;
  r.spec.name = name;
  r.spec.op = op;
  r.spec.dtype = detail::to_dtype(in.scalar_type(), name);
  r.spec.shape = shape_of(in);
  r.spec.order = memory_order(in);
  r.spec.process_set = process_set;
  r.input = in.data_ptr();
  r.output = out.defined() ? out.data_ptr() : nullptr;
  return r;
}

engine::Request make_allreduce(const std::string& name, const torch::Tensor& in,
                               const torch::Tensor& out, ReduceOp op, double prescale,
                               double postscale, int process_set) {
  engine::Request r = make_request(engine::OpType::kAllreduce, name, in, out, process_set);
  r.spec.reduce_op = op;
  r.spec.prescale = prescale;
  r.spec.postscale = postscale;
  return r;
}

}  // namespace

torch::Tensor synchronize(TensorHandle& h) {
  // Device tensors: the caller's stream waits for the collective (consume), not the host.
  if (h.host_consumers_) {
    h.handle_.wait();
  } else {
    h.handle_.wait_issued();
  }
  const detail::DeviceUse use{h.device_, h.stream_, h.host_consumers_};
  detail::consume(h.handle_, use);
  if (h.allgather_ && use) {
    h.output_ = detail::device_result_tensor(h.handle_, h.input_);
  } else if (h.allgather_) {
    const std::vector<char>& bytes = h.handle_.result();
    const std::vector<int64_t>& shape = h.handle_.result_shape();
    torch::Tensor out = torch::empty(shape, h.input_.options());
    TESSERA_ASSERT(static_cast<size_t>(out.nbytes()) == bytes.size(), "allgather of '", h.name(),
                   "' returned ", bytes.size(), " bytes for ", out.nbytes());
    if (!bytes.empty()) std::memcpy(out.data_ptr(), bytes.data(), bytes.size());
    h.output_ = out;
  }
  if (!h.received_.empty()) {
    const bool even = std::all_of(h.received_.begin(), h.received_.end(),
                                  [&](int64_t rows) { return rows == h.block_; });
    if (!even) h.output_ = detail::unpad_blocks(h.output_, h.received_, h.block_);
  }
  if (h.keep_rows_ >= 0) h.output_ = h.output_.narrow(0, 0, h.keep_rows_);
  if (h.logical_) h.output_ = h.output_.view(torch::kBool);
  if (h.target_.defined() && !h.target_.is_same(h.output_)) h.target_.copy_(h.output_);
  h.input_ = torch::Tensor();
  return h.output_;
}

TensorHandle allreduce_async(const torch::Tensor& tensor, const std::string& name, ReduceOp op,
                             double prescale, double postscale, int process_set) {
  return detail::attempt("allreduce", name, process_set, [&](const std::string& n) {
    ReduceOp wire_op = op;
    torch::Tensor in = logical_wire(dense(tensor, "allreduce"), &wire_op);
    torch::Tensor out = torch::empty_like(in);
    engine::Request r = make_allreduce(n, in, out, wire_op, prescale, postscale, process_set);
    const detail::DeviceUse use = detail::device_use(in, n);
    return TensorOps::logical(TensorOps::one(std::move(r), use, in, out, torch::Tensor(), false),
                              is_bool(tensor));
  });
}

TensorHandle allreduce_async_(torch::Tensor& tensor, const std::string& name, ReduceOp op,
                              double prescale, double postscale, int process_set) {
  return detail::attempt("allreduce", name, process_set, [&](const std::string& n) {
    ReduceOp wire_op = op;
    torch::Tensor buf = logical_wire(dense(tensor, "allreduce_"), &wire_op);
    // The algorithms reduce in place.
    engine::Request r = make_allreduce(n, buf, buf, wire_op, prescale, postscale, process_set);
    const detail::DeviceUse use = detail::device_use(buf, n);
    return TensorOps::logical(TensorOps::one(std::move(r), use, buf, buf, tensor, false),
                              is_bool(tensor));
  });
}

torch::Tensor allreduce(const torch::Tensor& tensor, const std::string& name, ReduceOp op,
                        double prescale, double postscale, int process_set) {
  TensorHandle h = allreduce_async(tensor, name, op, prescale, postscale, process_set);
  return synchronize(h);
}

torch::Tensor& allreduce_(torch::Tensor& tensor, const std::string& name, ReduceOp op,
                          int process_set) {
  TensorHandle h = allreduce_async_(tensor, name, op, 1.0, 1.0, process_set);
  synchronize(h);
  return tensor;
}

std::vector<TensorHandle> grouped_allreduce_async(const std::vector<torch::Tensor>& tensors,
                                                  const std::string& name, ReduceOp op,
                                                  int process_set) {
  auto start = [&](const std::string& base) {
    TESSERA_CHECK(!tensors.empty(), "grouped_allreduce needs at least one tensor");
    std::vector<engine::Request> requests;
    std::vector<torch::Tensor> ins, outs;
    for (size_t i = 0; i < tensors.size(); ++i) {
      ReduceOp wire_op = op;
      torch::Tensor in = logical_wire(dense(tensors[i], "grouped_allreduce"), &wire_op);
      torch::Tensor out = torch::empty_like(in);
      requests.push_back(
          make_allreduce(base + "." + std::to_string(i), in, out, wire_op, 1.0, 1.0, process_set));
      ins.push_back(in);
      outs.push_back(out);
    }
    return TensorOps::logical(
        TensorOps::group(std::move(requests), detail::device_use(ins, base), ins, outs, {}),
        tensors);
  };
  return detail::attempt("grouped_allreduce", name, process_set, start, tensors.size());
}

// The names are the caller's (the DistributedOptimizer's "grad." names), so no name is taken; a
// refusal still tells the other ranks, for each of them.
std::vector<TensorHandle> grouped_allreduce_async_(std::vector<torch::Tensor>& tensors,
                                                   const std::vector<std::string>& names,
                                                   ReduceOp op, double prescale, double postscale,
                                                   int process_set) {
  // A rank outside the set raises, refusing nothing; the names are the caller's, so taking
  // one only marks the start of a new op for the refusal's bookkeeping.
  global_engine().process_set_size(process_set);
  if (!names.empty()) detail::take_name("grouped_allreduce", names.front(), process_set);
  try {
    TESSERA_CHECK(!tensors.empty(), "grouped_allreduce_ needs at least one tensor");
    TESSERA_CHECK_EQ(tensors.size(), names.size(), "grouped_allreduce_ needs one name per tensor");
    std::vector<engine::Request> requests;
    std::vector<torch::Tensor> bufs;
    for (size_t i = 0; i < tensors.size(); ++i) {
      ReduceOp wire_op = op;
      torch::Tensor buf = logical_wire(dense(tensors[i], "grouped_allreduce_"), &wire_op);
      requests.push_back(
          make_allreduce(names[i], buf, buf, wire_op, prescale, postscale, process_set));
      bufs.push_back(buf);
    }
    return TensorOps::logical(
        TensorOps::group(std::move(requests), detail::device_use(bufs, "grouped_allreduce_"), bufs,
                         bufs, tensors),
        tensors);
  } catch (const std::exception& e) {
    detail::refuse(names, process_set, e.what());
    throw;
  }
}

std::vector<torch::Tensor> grouped_allreduce(const std::vector<torch::Tensor>& tensors,
                                             const std::string& name, ReduceOp op,
                                             int process_set) {
  std::vector<TensorHandle> hs = grouped_allreduce_async(tensors, name, op, process_set);
  std::vector<torch::Tensor> out;
  for (TensorHandle& h : hs) out.push_back(synchronize(h));
  return out;
}

TensorHandle allgather_async(const torch::Tensor& tensor, const std::string& name,
                             int process_set) {
  return detail::attempt("allgather", name, process_set, [&](const std::string& n) {
    torch::Tensor in = logical_wire(contiguous(tensor, "allgather"), nullptr);
    TESSERA_CHECK(in.dim() >= 1,
                  "allgather needs a tensor with at least one dimension (ranks "
                  "concatenate along the first); use tensor.view(1)");
    engine::Request r =
        make_request(engine::OpType::kAllgather, n, in, torch::Tensor(), process_set);
    const detail::DeviceUse use = detail::device_use(in, n);
    return TensorOps::logical(
        TensorOps::one(std::move(r), use, in, torch::Tensor(), torch::Tensor(), true),
        is_bool(tensor));
  });
}

torch::Tensor allgather(const torch::Tensor& tensor, const std::string& name, int process_set) {
  TensorHandle h = allgather_async(tensor, name, process_set);
  return synchronize(h);
}

// Horovod's grouped_allgather: the members (name.0 .. name.N-1) are released together.
std::vector<TensorHandle> grouped_allgather_async(const std::vector<torch::Tensor>& tensors,
                                                  const std::string& name, int process_set) {
  auto start = [&](const std::string& base) {
    TESSERA_CHECK(!tensors.empty(), "grouped_allgather needs at least one tensor");
    std::vector<engine::Request> requests;
    std::vector<torch::Tensor> ins, outs(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {  // every member checked before any is enqueued
      ins.push_back(logical_wire(contiguous(tensors[i], "grouped_allgather"), nullptr));
      TESSERA_CHECK(ins.back().dim() >= 1, "grouped_allgather: member ", i,
                    " needs at least one dimension (ranks concatenate along the first)");
      requests.push_back(make_request(engine::OpType::kAllgather, base + "." + std::to_string(i),
                                      ins.back(), torch::Tensor(), process_set));
    }
    return TensorOps::logical(TensorOps::group(std::move(requests), detail::device_use(ins, base),
                                               ins, outs, {}, /*allgather=*/true),
                              tensors);
  };
  return detail::attempt("grouped_allgather", name, process_set, start, tensors.size());
}

namespace {

// A broadcast of `buf` (the caller's tensor for in-place calls, else a copy) from `root`, a rank
// of the whole job as in Horovod: on a process set it is translated to the set's own rank.
TensorHandle start_broadcast(const std::string& name, torch::Tensor buf, torch::Tensor target,
                             int root, int process_set) {
  const bool logical = is_bool(buf);
  buf = logical_wire(buf, nullptr);
  engine::Request r = make_request(engine::OpType::kBroadcast, name, buf, buf, process_set);
  r.spec.root = detail::set_rank_of(root, process_set, name);
  const detail::DeviceUse use = detail::device_use(buf, name);
  return TensorOps::logical(TensorOps::one(std::move(r), use, buf, buf, std::move(target), false),
                            logical);
}

}  // namespace

TensorHandle broadcast_async(const torch::Tensor& tensor, int root, const std::string& name,
                             int process_set) {
  return detail::attempt("broadcast", name, process_set, [&](const std::string& n) {
    return start_broadcast(n, dense(tensor, "broadcast").clone(), torch::Tensor(), root,
                           process_set);
  });
}

torch::Tensor broadcast(const torch::Tensor& tensor, int root, const std::string& name,
                        int process_set) {
  TensorHandle h = broadcast_async(tensor, root, name, process_set);
  return synchronize(h);
}

torch::Tensor& broadcast_(torch::Tensor& tensor, int root, const std::string& name,
                          int process_set) {
  TensorHandle h = broadcast_async_(tensor, root, name, process_set);
  synchronize(h);
  return tensor;
}

TensorHandle broadcast_async_(torch::Tensor& tensor, int root, const std::string& name,
                              int process_set) {
  return detail::attempt("broadcast", name, process_set, [&](const std::string& n) {
    return start_broadcast(n, dense(tensor, "broadcast_"), tensor, root, process_set);
  });
}

namespace {

// A reduce-scatter of `*in` (replaced by its padded copy when the ranks do not divide its first
// dimension: Horovod's split, the first rows % n ranks one row longer); *keep_rows is how many
// rows of the output are this rank's (-1: all).
engine::Request make_reducescatter(const std::string& name, torch::Tensor* in, torch::Tensor* out,
                                   ReduceOp op, int process_set, double prescale, double postscale,
                                   int64_t* keep_rows) {
  TESSERA_CHECK(in->dim() >= 1, "reducescatter '", name,
                "' needs a tensor with at least one dimension");
  TESSERA_CHECK(!is_bool(*in), "reducescatter '", name,
                "': bool tensors cannot be reduce-scattered; accepted: uint8, int8, int16, int32, "
                "int64, float16, bfloat16, float32, float64");
  const int ranks = process_set_size(process_set);
  const std::vector<int64_t> counts = detail::scatter_rows(in->size(0), ranks);
  *keep_rows = -1;
  if (counts.front() != counts.back()) {
    *in = detail::pad_blocks(*in, counts, counts.front());
    *keep_rows = counts[static_cast<size_t>(process_set_rank(process_set))];
  }
  std::vector<int64_t> shape = shape_of(*in);
  shape[0] = counts.front();
  *out = torch::empty(shape, in->options());
  engine::Request r = make_request(engine::OpType::kReduceScatter, name, *in, *out, process_set);
  r.spec.reduce_op = op;
  r.spec.prescale = prescale;
  r.spec.postscale = postscale;
  return r;
}

}  // namespace

TensorHandle reducescatter_async(const torch::Tensor& tensor, const std::string& name, ReduceOp op,
                                 int process_set, double prescale, double postscale) {
  return detail::attempt("reducescatter", name, process_set, [&](const std::string& n) {
    torch::Tensor in = contiguous(tensor, "reducescatter");
    torch::Tensor out;
    int64_t keep = -1;
    engine::Request r =
        make_reducescatter(n, &in, &out, op, process_set, prescale, postscale, &keep);
    const detail::DeviceUse use = detail::device_use(in, n);
    return TensorOps::uneven(TensorOps::one(std::move(r), use, in, out, torch::Tensor(), false), {},
                             0, keep);
  });
}

std::vector<TensorHandle> grouped_reducescatter_async(const std::vector<torch::Tensor>& tensors,
                                                      const std::string& name, ReduceOp op,
                                                      int process_set, double prescale,
                                                      double postscale) {
  auto start = [&](const std::string& base) {
    TESSERA_CHECK(!tensors.empty(), "grouped_reducescatter needs at least one tensor");
    std::vector<engine::Request> requests;
    std::vector<torch::Tensor> ins, outs;
    std::vector<int64_t> keeps;
    for (size_t i = 0; i < tensors.size(); ++i) {
      ins.push_back(contiguous(tensors[i], "grouped_reducescatter"));
      outs.emplace_back();
      keeps.push_back(-1);
      requests.push_back(make_reducescatter(base + "." + std::to_string(i), &ins.back(),
                                            &outs.back(), op, process_set, prescale, postscale,
                                            &keeps.back()));
    }
    std::vector<TensorHandle> hs =
        TensorOps::group(std::move(requests), detail::device_use(ins, base), ins, outs, {});
    for (size_t i = 0; i < hs.size(); ++i) hs[i] = TensorOps::uneven(hs[i], {}, 0, keeps[i]);
    return hs;
  };
  return detail::attempt("grouped_reducescatter", name, process_set, start, tensors.size());
}

namespace {

// Every rank's splits, row k what rank k sends (one small allgather). A rank whose splits are bad
// still takes part, with a row of -1, so that every rank raises, naming it, instead of the others
// waiting on it; that rank raises its own error.
std::vector<std::vector<int64_t>> exchange_splits(const torch::Tensor& t,
                                                  const std::vector<int64_t>& splits,
                                                  const std::string& name, int process_set) {
  const int n = process_set_size(process_set);
  std::vector<int64_t> mine(static_cast<size_t>(n), -1);
  std::exception_ptr problem;
  try {
    TESSERA_CHECK(t.dim() >= 1, "alltoall needs a tensor with at least one dimension");
    mine = detail::checked_splits(t.size(0), n, splits);
  } catch (const std::exception&) {
    problem = std::current_exception();
  }
  const torch::Tensor all =
      allgather(torch::tensor(mine, torch::kInt64).view({1, n}), "", process_set);
  if (problem) std::rethrow_exception(problem);
  std::vector<std::vector<int64_t>> matrix(static_cast<size_t>(n));
  std::string bad;
  for (int k = 0; k < n; ++k) {
    for (int j = 0; j < n; ++j) {
      matrix[static_cast<size_t>(k)].push_back(all[k][j].item<int64_t>());
    }
    if (matrix[static_cast<size_t>(k)].front() < 0) {
      bad += (bad.empty() ? "" : ", ") + std::to_string(k);
    }
  }
  TESSERA_CHECK(bad.empty(), "collective '", name, "' failed: rank(s) ", bad,
                " of the set refused their arguments (their own errors say why); nothing was "
                "sent");
  return matrix;
}

}  // namespace

TensorHandle alltoall_async(const torch::Tensor& tensor, const std::string& name, int process_set,
                            const std::vector<int64_t>& splits) {
  return detail::attempt("alltoall", name, process_set, [&](const std::string& n) {
    // Without splits every rank sends equal blocks: nothing to exchange (a rank whose first
    // dimension does not divide refuses, and one that differs is a shape mismatch).
    const int ranks = process_set_size(process_set);
    const std::vector<std::vector<int64_t>> matrix =
        splits.empty()
            ? std::vector<std::vector<int64_t>>(
                  static_cast<size_t>(ranks),
                  detail::checked_splits(tensor.dim() >= 1 ? tensor.size(0) : -1, ranks, {}))
            : exchange_splits(tensor, splits, n, process_set);
    const size_t me = static_cast<size_t>(process_set_rank(process_set));
    std::vector<int64_t> received;
    int64_t block = 0;
    for (const auto& row : matrix) {
      received.push_back(row[me]);
      for (int64_t rows : row) block = std::max(block, rows);
    }
    torch::Tensor in = logical_wire(contiguous(tensor, "alltoall"), nullptr);
    const std::vector<int64_t>& sent = matrix[me];
    auto uneven = [&](const std::vector<int64_t>& v) {
      return std::any_of(v.begin(), v.end(), [&](int64_t rows) { return rows != block; });
    };
    if (uneven(sent) || uneven(received)) in = detail::pad_blocks(in, sent, block);
    torch::Tensor out = torch::empty_like(in);
    engine::Request r = make_request(engine::OpType::kAlltoall, n, in, out, process_set);
    const detail::DeviceUse use = detail::device_use(in, n);
    TensorHandle h = TensorOps::one(std::move(r), use, in, out, torch::Tensor(), false);
    return TensorOps::logical(TensorOps::uneven(std::move(h), received, block, -1),
                              is_bool(tensor));
  });
}

SparseHandle sparse_allreduce_async(const torch::Tensor& tensor, const std::string& name,
                                    ReduceOp op, int process_set) {
  return detail::attempt("sparse_allreduce", name, process_set, [&](const std::string& n) {
    TESSERA_CHECK(tensor.defined() && tensor.is_sparse(), "sparse_allreduce '", n,
                  "': expected a sparse COO tensor");
    TESSERA_CHECK(op == ReduceOp::kAverage || op == ReduceOp::kSum, "sparse_allreduce '", n,
                  "': accepted ops are Average and Sum, got ", reduce_op_name(op));
    const torch::Tensor t = tensor.coalesce();
    SparseHandle h;
    // Allgather concatenates along the first dimension: the indices travel as [nnz, dims].
    h.indices = allgather_async(t.indices().t().contiguous(), n + ".indices", process_set);
    h.values = allgather_async(t.values().contiguous(), n + ".values", process_set);
    h.size = tensor.sizes().vec();
    h.scale = op == ReduceOp::kAverage ? 1.0 / process_set_size(process_set) : 1.0;
    return h;
  });
}

torch::Tensor synchronize(SparseHandle& h) {
  const torch::Tensor indices = synchronize(h.indices), values = synchronize(h.values);
  return torch::sparse_coo_tensor(indices.t(), h.scale != 1.0 ? values * h.scale : values, h.size);
}

torch::Tensor alltoall(const torch::Tensor& tensor, const std::string& name, int process_set) {
  TensorHandle h = alltoall_async(tensor, name, process_set);
  return synchronize(h);
}

}  // namespace tessera
