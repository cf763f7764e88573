// tessera's libtorch API: Horovod's C++ surface on torch::Tensor and torch::nn modules.
//
//   tessera::init();                                   // once per process, under mpirun
//   auto model = ...;                                  // any torch::nn::Module
//   tessera::broadcast_parameters(*model, 0);          // every rank starts from rank 0's weights
//   torch::optim::SGD sgd(model->parameters(), ...);
//   tessera::DistributedOptimizer opt(sgd, model->named_parameters());
//   loss.backward();  opt.step();                      // gradients averaged over every rank
//
// Collectives are named: a name identifies the same tensor on every rank, so ranks may
// enqueue in different orders; an empty name takes the next of a counter per kind and process
// set ("allreduce.set0.noname.N"), which agrees across the set's ranks when they issue the same
// unnamed calls of that kind in the same order. A disagreement between ranks (dtype, shape,
// op, root) fails on every rank with an InvalidArgument that names the tensor and the ranks,
// and the next collective works. An op whose arguments this rank refuses (a bad tensor, a root
// outside the set) throws here and tells the other ranks, whose handles fail within a cycle.
//
// Tensors: CPU or CUDA, any strides (non-contiguous ones are copied), dtypes f32 f64 f16 bf16
// i32 i64 u8 i8 i16, and bool (Horovod takes them) for allreduce, allgather, broadcast and
// alltoall: bools travel as bytes and reduce logically (Sum and Max are "or", Min and Product
// "and"; Average is refused). Others are refused naming the accepted ones. A rank's CUDA tensors
// are all on one GPU (its first CUDA tensor's). A CUDA collective starts after the work enqueued so
// far on the caller's current stream (an event, not a host wait), and once synchronize() returns,
// the current stream's later work sees the result.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/settings.h"
#include "engine/handle.h"

namespace tessera {

namespace gpu {
class Device;
class Stream;
}  // namespace gpu

// ---- the process ----

// How init() is configured: settings by name, as the environment would give them
// ({"TESSERA_FUSION_THRESHOLD", "64MiB"}), from three sources with this precedence:
//   explicit `settings` > the environment > `config_file` > the declared default.
// docs/knobs.md lists every setting. A name no layer declares is an error when given here or in
// the config file (naming the nearest known one), a warning when it comes from the environment.
struct InitOptions {
  SettingValues settings;
  // A configuration `tessera tune` wrote (tune/config_file.h); "" for none.
  std::string config_file;
  // false: the environment is not a source (tests that must not see the caller's TESSERA_*).
  bool read_environment = true;
  // true (the Python package): when another rank is lost, waits in progress and later calls
  // throw tessera::Error with the liveness monitor's line (Horovod's HorovodInternalError, for
  // an elastic wrapper to catch) for TESSERA_HEARTBEAT_TIMEOUT seconds before the process ends;
  // false: it ends after a one-second grace.
  bool raise_on_peer_loss = false;
  // Typed: options.set(engine::kFusionThreshold, size_t{0}) writes the setting's text.
  template <class Setting, class Value>
  InitOptions& set(const Setting& setting, const Value& value) {
    settings[setting.name] = setting.format(value);
    return *this;
  }
};

// Initialises MPI (MPI_THREAD_MULTIPLE); agrees on the settings with every rank (a setting that
// differs between ranks, a bad value or an unknown name fails on every rank, naming it and the
// ranks); applies the process memory policy (TESSERA_MALLOC_POLICY, docs/training.md) and
// starts the engine. Collective over MPI_COMM_WORLD. A second call does nothing.
void init(const InitOptions& options = {});
// This rank's settings from `options` before the ranks agree (names checked against every
// declared setting; a config file that cannot be read is its error): what init hands to
// comm::init, for tools that initialise only comm (the collective benchmarks).
ResolvedSettings resolve_init_options(const InitOptions& options);
// Stops the engine (agreed with the other ranks) and finalises MPI if init() initialised it
// (MPI initialised by the application before init() is left to it).
// Never throws; safe to call twice or without init().
void shutdown();
// The same after an error that ends this rank: the engine's pending work fails on every rank
// with "shut down because rank R failed: <error>", and ranks that are not waiting on the engine
// are told as well (comm/liveness.h), so no rank waits on this one.
void shutdown(const std::string& error);
bool is_initialized();
// Whether this build has NCCL (its device collectives use it for GPU tensors where it can).
bool nccl_built();
// Whether this build has tessera's GPU backend (TESSERA_CUDA at configure time), and why this
// process sees no GPU through it ("" when it sees one).
bool cuda_built();
std::string cuda_unavailable_reason();
// The liveness monitor's line once this rank is ending because another rank was lost or
// failed (InitOptions::raise_on_peer_loss); "" before. Cheap: front ends poll it while waiting.
std::string lost_peer_error();
// Elastic jobs: started by `tessera run --min-np/--max-np/--host-discovery-script` (its
// supervisor relaunches them after a lost rank or on more hosts; runtime/elastic.h has the
// files they share). Outside one: elastic_job() is false, check_host_updates() false.
bool elastic_job();
int elastic_generation();
std::string elastic_dir();
int elastic_snapshot_every();  // TESSERA_ELASTIC_SNAPSHOT_EVERY
// The last committed step, written into this rank's failure record should the job fail.
void set_progress_step(int64_t step);
// Collective: whether the supervisor asks this generation to restart on more hosts, as rank 0
// read its notice (every rank gets the same answer).
bool check_host_updates();
// Rank 0, after the snapshot: tells the supervisor this generation ends on purpose.
void mark_restart_for_hosts();
int rank();
int size();
// Rank within this node, and ranks on this node.
int local_rank();
int local_size();
// Horovod's cross rank and size: this rank among the ranks with its local rank (one per node),
// and their number; is_homogeneous(): every node runs the same number of ranks.
int cross_rank();
int cross_size();
bool is_homogeneous();
// Horovod's process sets: collectives among a subset of the ranks, negotiated on their own.
// add_process_set is collective over every rank (the same list everywhere) and returns the id
// to pass as `process_set`; set 0 is every rank. remove_process_set: every member calls it.
int add_process_set(std::vector<int> ranks);
void remove_process_set(int id);
// This rank's rank in set `id` and the set's size (InvalidArgument when this rank is no
// member, or the set is unknown or removed); whether this rank is a member; the set's ranks,
// ascending, as ranks of the whole job.
int process_set_rank(int id);
int process_set_size(int id);
bool in_process_set(int id);
std::vector<int> process_set_ranks(int id);
// The settings every rank agreed on at init, by name (empty before init: every setting at its
// default). Each layer parses its own from these with its declarations' get().
SettingValues settings();
// TESSERA_TIMEOUT as agreed at init (its default before): the deadline of any wait of the
// layers above (the input pipeline's).
double timeout_s();
// Every setting tessera declares, in docs/knobs.md's order.
std::vector<SettingInfo> declared_settings();

// One training step is done (DistributedOptimizer::step, C++ and Python alike): with
// TESSERA_AUTOTUNE=1 the autotuner counts it, and between two such calls it may switch the
// engine's settings on every rank at once. Collective in effect: every rank calls it once per
// step. Nothing happens without the autotuner.
void step_done();

// The engine's Chrome trace (TESSERA_TIMELINE starts it on rank 0 at init): start, stop,
// whether this rank writes one, and a span of the caller's own on row `row` (the trainer's
// FORWARD and BACKWARD beside the collectives). trace() is a no-op while not tracing.
void start_timeline(const std::string& path);
void stop_timeline();
bool timeline_active();
void trace(const std::string& row, const std::string& name,
           std::chrono::steady_clock::time_point begin, std::chrono::steady_clock::time_point end);

// ---- collectives on tensors ----

// An asynchronous collective in flight: the tensors it reads and writes stay alive inside it.
class TensorHandle {
 public:
  TensorHandle() = default;
  // Non-blocking. Never throws.
  bool poll() const { return handle_.poll(); }
  // Blocks up to `seconds`; true once done (then synchronize() returns at once). Never throws.
  bool wait_for(double seconds) const { return handle_.wait_for(seconds); }
  const std::string& name() const { return handle_.name(); }
  // alltoall with splits: the rows received from each rank of the set, in rank order.
  const std::vector<int64_t>& received_splits() const { return received_; }

 private:
  friend class TensorOps;
  friend torch::Tensor synchronize(TensorHandle& handle);
  engine::Handle handle_;
  torch::Tensor input_;   // kept alive until the collective is done
  torch::Tensor output_;  // what synchronize() returns
  torch::Tensor target_;  // in-place calls: where output_ is copied back (if it is a copy)
  bool allgather_ = false;
  bool logical_ = false;  // a bool tensor that travelled as bytes: the result is viewed back
  // Uneven blocks travel padded to `block_` rows: synchronize() keeps received_[j] rows of
  // block j (alltoall), or the first keep_rows_ rows (reducescatter; -1: all).
  std::vector<int64_t> received_;
  int64_t block_ = 0;
  int64_t keep_rows_ = -1;
  // CUDA tensors: this rank's device and the caller's stream at the call, which waits on the
  // collective's completion before synchronize() returns.
  gpu::Device* device_ = nullptr;
  std::shared_ptr<gpu::Stream> stream_;
  bool host_consumers_ = false;  // detail::DeviceUse::host_consumers
};

// Blocks until the collective is done and returns its result; rethrows the engine's error
// (InvalidArgument for a disagreement between ranks, TimeoutError, CommError). For CUDA
// tensors "done" means enqueued: the caller's current stream waits for the device work, not
// the host (Horovod's asynchronous completion), so later work on that stream (the optimizer's
// step) queues behind the collective; a failed kernel surfaces where that stream is next
// synchronised, as CUDA's errors do.
torch::Tensor synchronize(TensorHandle& handle);

// Allreduce with op (default: average over the ranks); prescale / postscale multiply the
// input before and the result after the reduction. Integer tensors, as Horovod's on the CPU:
// Average and the factors scale in double and truncate toward zero (5 over 2 ranks: 2).
TensorHandle allreduce_async(const torch::Tensor& tensor, const std::string& name = "",
                             ReduceOp op = ReduceOp::kAverage, double prescale = 1.0,
                             double postscale = 1.0, int process_set = 0);
// In place: the result lands in `tensor` itself.
TensorHandle allreduce_async_(torch::Tensor& tensor, const std::string& name = "",
                              ReduceOp op = ReduceOp::kAverage, double prescale = 1.0,
                              double postscale = 1.0, int process_set = 0);
torch::Tensor allreduce(const torch::Tensor& tensor, const std::string& name = "",
                        ReduceOp op = ReduceOp::kAverage, double prescale = 1.0,
                        double postscale = 1.0, int process_set = 0);
torch::Tensor& allreduce_(torch::Tensor& tensor, const std::string& name = "",
                          ReduceOp op = ReduceOp::kAverage, int process_set = 0);
// Reduces all tensors as one group: released together when every member is ready on every
// rank, and fused into one buffer (below the fusion threshold). Names are `name`.0, .1, ...
std::vector<TensorHandle> grouped_allreduce_async(const std::vector<torch::Tensor>& tensors,
                                                  const std::string& name = "",
                                                  ReduceOp op = ReduceOp::kAverage,
                                                  int process_set = 0);
// In place, one name per tensor (the DistributedOptimizer's groups).
std::vector<TensorHandle> grouped_allreduce_async_(std::vector<torch::Tensor>& tensors,
                                                   const std::vector<std::string>& names,
                                                   ReduceOp op = ReduceOp::kAverage,
                                                   double prescale = 1.0, double postscale = 1.0,
                                                   int process_set = 0);
std::vector<torch::Tensor> grouped_allreduce(const std::vector<torch::Tensor>& tensors,
                                             const std::string& name = "",
                                             ReduceOp op = ReduceOp::kAverage, int process_set = 0);
// Concatenates every rank's tensor along dimension 0 (ranks may differ in that dimension).
TensorHandle allgather_async(const torch::Tensor& tensor, const std::string& name = "",
                             int process_set = 0);
torch::Tensor allgather(const torch::Tensor& tensor, const std::string& name = "",
                        int process_set = 0);
// One allgather per member (names `name`.0 .. .N-1), released together (Horovod's).
std::vector<TensorHandle> grouped_allgather_async(const std::vector<torch::Tensor>& tensors,
                                                  const std::string& name = "",
                                                  int process_set = 0);
// Returns root's tensor on every rank; broadcast_ writes it into `tensor`. `root` is a rank of
// the whole job, also on a process set (Horovod's root_rank); one outside the set is refused.
TensorHandle broadcast_async(const torch::Tensor& tensor, int root, const std::string& name = "",
                             int process_set = 0);
torch::Tensor broadcast(const torch::Tensor& tensor, int root, const std::string& name = "",
                        int process_set = 0);
torch::Tensor& broadcast_(torch::Tensor& tensor, int root, const std::string& name = "",
                          int process_set = 0);
// In place, asynchronous: synchronize() leaves root's values in `tensor`.
TensorHandle broadcast_async_(torch::Tensor& tensor, int root, const std::string& name = "",
                              int process_set = 0);
// Rows splits[j] of `tensor` (dimension 0) go to rank j of the set, and the result holds the
// rows received, in rank order (received_splits() says how many from each). Empty splits:
// dimension 0 cut into size() equal blocks (it must divide). The splits are exchanged first
// (one small allgather, synchronous): a rank whose splits are bad still takes part, so every
// rank raises naming it and nothing is sent; uneven blocks travel padded to the largest.
TensorHandle alltoall_async(const torch::Tensor& tensor, const std::string& name = "",
                            int process_set = 0, const std::vector<int64_t>& splits = {});
torch::Tensor alltoall(const torch::Tensor& tensor, const std::string& name = "",
                       int process_set = 0);

// Dimension 0 is cut into size() blocks, the first (rows % size) one row longer (Horovod's
// split); rank j receives block j reduced over the ranks (sum, average, min, max, product).
// prescale / postscale as for allreduce (integer tensors: scaled in double, truncated toward
// zero, as Horovod's). Uneven blocks travel padded with zeros to the longest.
TensorHandle reducescatter_async(const torch::Tensor& tensor, const std::string& name = "",
                                 ReduceOp op = ReduceOp::kAverage, int process_set = 0,
                                 double prescale = 1.0, double postscale = 1.0);
// The same for several tensors as one group (names `name`.0, .1, ...).
std::vector<TensorHandle> grouped_reducescatter_async(const std::vector<torch::Tensor>& tensors,
                                                      const std::string& name = "",
                                                      ReduceOp op = ReduceOp::kAverage,
                                                      int process_set = 0, double prescale = 1.0,
                                                      double postscale = 1.0);

// Horovod's sparse allreduce: every rank's indices and values of a sparse COO tensor are
// allgathered (`name`.indices, `name`.values; `name` empty: the next automatic one) into one
// uncoalesced sparse tensor of the same size, whose duplicate indices add up when it is
// coalesced or used; Average (or Sum) divides the values by the set's size.
struct SparseHandle {
  TensorHandle indices, values;
  std::vector<int64_t> size;
  double scale = 1.0;
};
SparseHandle sparse_allreduce_async(const torch::Tensor& tensor, const std::string& name = "",
                                    ReduceOp op = ReduceOp::kAverage, int process_set = 0);
// Waits for both allgathers and returns the sparse tensor.
torch::Tensor synchronize(SparseHandle& handle);

// Root's bytes on every rank of the set (any length; the others pass anything, e.g. "");
// `root` is a rank of the whole job. Collective; names `name`.bytes and `name`.data.
std::string broadcast_bytes(const std::string& bytes, int root, const std::string& name,
                            int process_set = 0);
// Every rank's bytes (any lengths), in the set's rank order. Collective; names `name`.size and
// `name`.data.
std::vector<std::string> allgather_bytes(const std::string& bytes, const std::string& name,
                                         int process_set = 0);

// Uneven data: a rank whose data ran out calls join() and waits there until every rank has.
// Meanwhile it takes part in the other ranks' allreduces (DistributedOptimizer's gradients)
// with zeros (the identity of the operation), and averages divide by the ranks still
// training, so the finished ranks neither hang the others nor dilute their gradients. Any
// other collective while a rank has joined is an error on every rank that names it. Returns the
// rank (in the set) whose join came last, the highest of those that came in the same cycle.
int join(int process_set = 0);

// Every parameter and buffer of `module` (by its name) takes root's value. Collective.
void broadcast_parameters(torch::nn::Module& module, int root);
// Every rank's optimizer takes root's state (momentum buffers, step counts) and its param
// groups' options (learning rate, ...). The optimizers must be over the same parameters in
// the same order. Collective.
void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, int root);

// ---- Agreement between ranks ----

// Every rank passes its description of `what` (lines "key: value"); unless all are the same,
// throws InvalidArgument on every rank naming the first key that differs and the ranks on each
// side, e.g. "the ranks disagree on the model's parameters: 'fc.weight' is [10, 512] Float on
// ranks 0, 1 but [3, 512] Float on ranks 2, 3". One 16-byte allreduce when they agree.
// Collective over `process_set`.
void verify_across_ranks(const std::string& what, const std::string& description,
                         int process_set = 0);
// "name: [shape] dtype" per parameter (only those that require gradients if `only_trainable`).
std::string describe_parameters(const torch::OrderedDict<std::string, torch::Tensor>& named,
                                bool only_trainable);

// ---- DistributedOptimizer ----

enum class Compression { kNone, kFloat16, kBFloat16 };
// "none", "fp16", "bf16"; throws InvalidArgument listing the accepted names.
Compression parse_compression(const std::string& name);

struct DistributedOptions {
  // Backward passes accumulated locally before step() averages over the ranks. The local
  // gradients are summed over these passes (as Horovod and DDP's no_sync do).
  int backward_passes_per_step = 1;
  // 0: each gradient is its own collective (the engine still fuses what is ready together);
  // N > 0: the gradients are cut into N groups, contiguous in reverse registration order
  // (roughly the order backward produces them), each reduced as one grouped allreduce.
  int groups = 0;
  // Gradients travel in f16 or bf16 and are restored to their dtype after the reduction.
  Compression compression = Compression::kNone;
  // Average (default) or sum over the ranks (kAdasum: Adasum of the gradients).
  ReduceOp op = ReduceOp::kAverage;
  // Horovod's: with Average, gradients are divided by this before the sum and multiplied by it
  // (and divided by the ranks) after.
  double gradient_predivide_factor = 1.0;
  // Sparse gradients: reduced dense and made sparse again (true), or Horovod's allgather of
  // their indices and values (false; such a gradient travels outside the groups).
  bool sparse_as_dense = false;
  int process_set = 0;
  // Prefix of the collectives' names ("grad." + parameter name).
  std::string prefix = "grad.";
};

// Wraps any torch::optim::Optimizer. A hook on each parameter's gradient accumulator enqueues
// that gradient's allreduce as soon as autograd has produced it (the last of
// backward_passes_per_step passes), so communication overlaps the rest of backward. step()
// waits for every gradient and applies the average with the wrapped optimizer.
class DistributedOptimizer {
 public:
  // `named_parameters`: the parameters the wrapped optimizer updates, with names that are the
  // same on every rank (module->named_parameters()). Collective: the ranks' parameters (names,
  // shapes, dtypes) are compared, and a difference is an error on every rank that names it.
  //
  // After set_step(i), that step also checks that every rank is at step i: an int64
  // max-allreduce ("tessera.step.<prefix>") enqueued with the first gradient, so a rank that
  // skipped or repeated a batch fails every rank's step() naming the ranks and their steps.
  DistributedOptimizer(torch::optim::Optimizer& optimizer,
                       const torch::OrderedDict<std::string, torch::Tensor>& named_parameters,
                       DistributedOptions options = {});
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Waits for every gradient's allreduce (enqueuing those whose hook did not fire: unused
  // parameters reduce zeros so every rank runs the same collectives) and leaves the averages in
  // the parameters' .grad. Called by step(); call it yourself to clip or inspect the gradients
  // first (then step() does not reduce again, as Horovod's skip_synchronize), or to drop the
  // step: zero_grad() without step().
  void synchronize();
  // synchronize() unless it already ran for this step's gradients, then the wrapped
  // optimizer's step().
  void step();
  // The wrapped optimizer's zero_grad().
  void zero_grad();
  // Announces the index of the coming step (its batch number) for the step check. Without it a
  // rank that skipped a whole iteration (no backward, no step) is found only at the end, when
  // the others wait on its last gradients (the engine's shutdown names them). Call before
  // backward, on every rank, every step (tessera train does).
  void set_step(int64_t step);
  torch::optim::Optimizer& optimizer() { return optimizer_; }
  const DistributedOptions& options() const { return options_; }
  // Parameter indices of each group (empty when options.groups == 0). Pure, for tests.
  static std::vector<std::vector<size_t>> plan_groups(size_t num_parameters, int groups);

  struct Impl;  // the core's GradientReducer (torch/gradient_reducer.h)

 private:
  torch::optim::Optimizer& optimizer_;
  DistributedOptions options_;
  std::unique_ptr<Impl> impl_;
};

// ---- BatchNorm2d with optional cross-rank statistics ----

struct BatchNormOptions {
  int64_t num_features = 0;
  double eps = 1e-5;
  double momentum = 0.1;
  // Reduce the batch statistics over every rank of `process_set` in training (SyncBatchNorm);
  // false: plain BatchNorm2d.
  bool sync = false;
  int process_set = 0;
  // Names the collectives (same on every rank); empty: a per-process counter.
  std::string name;
};

// torch::nn::BatchNorm2d's parameters and buffers under its names (weight, bias,
// running_mean, running_var, num_batches_tracked), so state_dicts interchange with PyTorch.
// With sync and more than one rank, training-mode statistics are those of the batch
// concatenated over the ranks (unequal local batches allowed), and backward performs the
// matching reductions of sum(dy) and sum(dy * (x - mean)), as PyTorch's SyncBatchNorm does.
class BatchNorm2dImpl : public torch::nn::Module {
 public:
  explicit BatchNorm2dImpl(BatchNormOptions options);
  torch::Tensor forward(const torch::Tensor& x);
  const BatchNormOptions& options() const { return options_; }
  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  BatchNormOptions options_;
  uint64_t calls_ = 0;  // names successive collectives of this layer
};
TORCH_MODULE(BatchNorm2d);

// Functional SyncBatchNorm in training mode: normalises x [N, C, ...] with the statistics of
// the batch concatenated over `process_set` and returns y. Where given (defined), the running
// statistics move by `momentum` towards the batch's mean and unbiased variance, in place.
torch::Tensor sync_batch_norm(const torch::Tensor& x, const torch::Tensor& weight,
                              const torch::Tensor& bias, double eps, const std::string& name,
                              int process_set = 0, torch::Tensor running_mean = {},
                              torch::Tensor running_var = {}, double momentum = 0.1);

}  // namespace tessera
