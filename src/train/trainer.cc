#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "common/activity.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "data/image_codec.h"
#include "models/registry.h"
#include "models/state_dict.h"
#include "train/checkpoint.h"
#include "train/device/autocast.h"
#include "train/device/device_feed.h"
#include "train/device/memory_layout.h"
#include "train/device/mixed_precision.h"
#include "train/device/run_device.h"
#include "train/elastic_train.h"
#include "train/on_root.h"
#include "train/pictures.h"
#include "train/schedule.h"
#include "train/train_path.h"

namespace tessera {
namespace train {
namespace {

using Clock = std::chrono::steady_clock;
// Validation samples in --predictions: enough to see each class several times, small enough to
// view at once.
constexpr int64_t kShownSamples = 8;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string format_eta(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  }
  return buf;
}

void validate(const TrainOptions& o) {
  models::task_of(o.model);  // throws for an unknown model, listing the accepted ones
  validate(o.input);
  validate(o.schedule);
  TESSERA_CHECK(o.steps > 0 || o.epochs > 0, "give --steps or --epochs (> 0)");
  TESSERA_CHECK(o.steps >= 0 && o.epochs >= 0, "--steps and --epochs must be >= 0");
  for (double w : o.class_weights) {
    TESSERA_CHECK(w >= 0 && std::isfinite(w), "--class-weights must be finite and >= 0, got ", w);
  }
  TESSERA_CHECK(o.threads >= 1, "--threads must be >= 1, got ", o.threads);
  TESSERA_CHECK(o.log_every >= 1, "--log-every must be >= 1");
  TESSERA_CHECK(o.eval_every >= 0 && o.checkpoint_every >= 0,
                "--eval-every and --checkpoint-every must be >= 0");
  TESSERA_CHECK(o.backward_passes_per_step >= 1 && o.input.batch % o.backward_passes_per_step == 0,
                "--backward-passes-per-step (", o.backward_passes_per_step,
                ") must divide --batch-size (", o.input.batch, "): each pass takes an equal share");
  TESSERA_CHECK(o.checkpoint_every == 0 || !o.checkpoint.empty(),
                "--checkpoint-every needs --checkpoint FILE");
  check_elastic_options(o);
  parse_precision(o.precision);
  parse_memory_format(o.memory_format);
  parse_compression(o.compression);
  if (!o.spatial.empty()) {
    TESSERA_CHECK(models::task_of(o.model) == models::Task::kClassification,
                  "--spatial trains classifiers on slides (resnet18, resnet50); --model ", o.model,
                  " is a segmentation model");
    TESSERA_CHECK(o.input.format == "csv",
                  "--spatial reads slides from DIR/train.csv and DIR/val.csv ",
                  "(path,label): --format must be csv, got ", o.input.format);
    TESSERA_CHECK(!o.input.global_shuffle && !o.input.keep_decoded,
                  "--global-shuffle and --keep-decoded hold whole images in memory; under "
                  "--spatial each rank reads only its tile of each slide, every step");
    TESSERA_CHECK(!o.local_only, "--spatial needs the ranks of its grid (run under mpirun)");
  }
}

}  // namespace

std::string describe_training_options(const TrainOptions& o) {
  std::ostringstream s;
  s.precision(17);
  // What every rank must share; paths that only rank 0 writes, and per-rank resources (workers,
  // prefetch, threads), may differ.
  s << "--model: " << o.model << "\n"
    << describe(o.input) << describe(o.schedule) << "--epochs: " << o.epochs
    << "\n--steps: " << o.steps;
  s << "\n--class-weights:";
  for (double w : o.class_weights) s << " " << w;
  s << "\n--momentum: " << o.momentum << "\n--weight-decay: " << o.weight_decay
    << "\n--seed: " << o.seed << "\n--eval-every: " << o.eval_every
    << "\n--log-every: " << o.log_every << "\n--checkpoint-every: " << o.checkpoint_every
    << "\n--resume (given): " << !o.resume.empty() << "\n--elastic: " << o.elastic
    << "\n--stop-at: " << o.stop_at << "\n--init-from (given): " << !o.init_from.empty()
    << "\n--sync-bn: " << o.sync_bn << "\n--spatial: " << o.spatial
    << "\n--precision: " << o.precision << "\n--loss-scale: " << o.loss_scale
    << "\n--device: " << o.device << "\n--memory-format: " << o.memory_format
    << "\n--cudnn-benchmark: " << o.cudnn_benchmark << "\n--output-stride: " << o.output_stride
    << "\n--backward-passes-per-step: " << o.backward_passes_per_step << "\n--groups: " << o.groups
    << "\n--compression: " << o.compression << "\n";
  return s.str();
}

namespace {

// One run of `tessera train`: what the loop needs between its steps. The constructor sets the
// run up (path, model, optimizer, schedule, resume); run() is the loop.
class Run {
 public:
  explicit Run(const TrainOptions& o);
  TrainResult run();

 private:
  void build_model();
  void restore(CheckpointMeta& meta);
  void place_model();
  void make_distributed_optimizer();
  void open_outputs();
  double train_step(int64_t step, double lr);
  torch::Tensor forward_loss(const torch::Tensor& x, const torch::Tensor& y);
  void optimizer_step();
  void log_interval(int64_t step, double lr);
  Evaluation evaluate(int64_t steps_done, int64_t show = 0);
  void save(int64_t steps_done);
  void write_pictures(const Evaluation& final_eval) const;
  // What this rank is doing, for the line it prints if another rank dies (common/activity.h).
  void phase(int64_t step, const char* what) const;

  const TrainOptions& o_;
  std::string resume_;  // --resume, or under --elastic the checkpoint when there is one
  const bool dist_;
  const bool root_;
  const bool talk_;  // rank 0 prints progress
  const Precision precision_;
  const torch::ScalarType dtype_;  // the master weights'
  const MemoryFormat layout_;
  torch::Device device_ = torch::kCPU;
  LossScaler scaler_;  // f16 only
  std::unique_ptr<TrainPath> path_;
  std::unique_ptr<DeviceFeed> feed_;  // GPU runs
  std::optional<models::Model> model_;
  std::unique_ptr<torch::optim::SGD> sgd_;
  std::unique_ptr<DistributedOptimizer> dopt_;
  int64_t per_epoch_ = 1, total_ = 0, start_ = 0, end_ = 0;
  LrSchedule sched_;
  CheckpointMeta meta_;
  std::ofstream metrics_;
  bool tracing_ = false;
  TrainResult result_;
  // The current logging interval.
  double interval_loss_ = 0;
  int64_t interval_steps_ = 0;
  Clock::time_point interval_start_;
  double interval_wait_start_ = 0;
  torch::Tensor class_weights_;  // --class-weights, in the master dtype on the device
  // (step, value) of every logged interval's loss and every evaluation: the --curve.
  std::vector<std::pair<double, double>> loss_points_, metric_points_;
};

Run::Run(const TrainOptions& o)
    : o_(o),
      dist_(!o.local_only),
      root_(!dist_ || rank() == 0),
      talk_(root_ && !o.quiet),
      precision_(parse_precision(o.precision)),
      dtype_(precision_.master),
      layout_(parse_memory_format(o.memory_format)),
      scaler_(LossScaleOptions{o.loss_scale}) {
  at::set_num_threads(o.threads);
  set_cudnn_benchmark(o.cudnn_benchmark);
  torch::manual_seed(o.seed);
  // Before any other collective: ranks started with different options (an MPMD command line, a
  // stale script on one node) would otherwise average different batch sizes or models silently,
  // or wait on collectives the others never start.
  if (dist_) verify_across_ranks("the training options", describe_training_options(o));
  device_ = agreed_device(o.device, dist_);
  if (talk_ && device_.is_cuda()) std::printf("device: %s on rank 0\n", device_.str().c_str());
  TESSERA_CHECK(!precision_.loss_scaled || device_.is_cuda(),
                "--precision f16 trains on GPUs only (libtorch has no f16 convolutions on the "
                "CPU): use --device cuda, or --precision bf16 (autocast on the CPU too)");
  path_ = make_train_path(o, dist_, device_.is_cuda());
  // On a GPU each step's batch is copied while the step before computes.
  if (device_.is_cuda())
    feed_ = std::make_unique<DeviceFeed>(path_->input(), make_device_copier(device_));
  if (talk_) std::printf("data: %s\n", path_->input().describe().c_str());
  build_model();
  per_epoch_ = path_->input().steps_per_epoch();
  total_ = o.steps > 0 ? o.steps : o.epochs * per_epoch_;
  sched_ = plan_schedule(o.schedule, path_->global_batch(), per_epoch_, total_);
  meta_.model = o.model;
  meta_.num_classes = path_->input().num_classes();
  if (!o.class_weights.empty()) {
    TESSERA_CHECK(static_cast<int64_t>(o.class_weights.size()) == meta_.num_classes,
                  "--class-weights gives ", o.class_weights.size(), " weights; the data has ",
                  meta_.num_classes, " classes: give one weight per class");
    class_weights_ = torch::tensor(o.class_weights, torch::kFloat64).to(device_, dtype_);
  }
  meta_.image_size = o.input.image_size;
  resume_ = o.elastic ? elastic_resume_path(dist_, o) : o.resume;
  if (!resume_.empty()) restore(meta_);
  place_model();
  make_distributed_optimizer();
  end_ = o.stop_at > 0 ? std::min(o.stop_at, total_) : total_;
  open_outputs();
}

// The path's model in the run's precision on the CPU, rank 0's weights everywhere
// (--init-from's, when given), and the optimizer over it.
void Run::build_model() {
  models::ModelSpec spec;
  spec.name = o_.model;
  spec.num_classes = path_->input().num_classes();
  spec.output_stride = o_.output_stride;
  model_.emplace(path_->make_model(spec));
  torch::nn::Module& net = model_->module();
  if (dtype_ != torch::kFloat) net.to(dtype_);
  net.train();
  if (!o_.init_from.empty()) {
    const std::string report = on_root(dist_, "init_from.status", [&] {
      models::LoadReport r =
          models::load_state_dict(net, models::read_state_dict(o_.init_from), o_.init_from);
      TESSERA_CHECK(!r.loaded.empty(), "--init-from '", o_.init_from,
                    "': no tensor name matches the model ", o_.model);
      return std::to_string(r.loaded.size()) + " tensors loaded, " +
             std::to_string(r.missing.size()) + " kept as initialised, " +
             std::to_string(r.unused.size()) + " in the file unused";
    });
    if (talk_) std::printf("init-from %s: %s\n", o_.init_from.c_str(), report.c_str());
  }
  if (dist_) broadcast_parameters(net, 0);
  sgd_ = std::make_unique<torch::optim::SGD>(
      net.parameters(),
      torch::optim::SGDOptions(o_.schedule.lr).momentum(o_.momentum).weight_decay(o_.weight_decay));
}

// After place_model: Module::to gives a parameter that changes device a new gradient
// accumulator, which would leave the hooks of an optimizer made before it behind.
void Run::make_distributed_optimizer() {
  torch::nn::Module& net = model_->module();
  if (dist_) {
    DistributedOptions d;
    d.backward_passes_per_step = o_.backward_passes_per_step;
    d.groups = o_.groups;
    d.compression = parse_compression(o_.compression);
    dopt_ = std::make_unique<DistributedOptimizer>(*sgd_, net.named_parameters(), d);
  }
}

// Every rank restores from the bytes rank 0 read, so every rank fails alike on a bad file.
void Run::restore(CheckpointMeta& meta) {
  const std::string bytes = on_root(dist_, "resume.bytes", [&] {
    try {
      std::vector<char> b = read_file(resume_);
      return std::string(b.begin(), b.end());
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string("--resume: ") + e.what());
    }
  });
  start_ = restore_checkpoint(bytes, resume_, meta, model_->module(), *sgd_).step;
  TESSERA_CHECK(start_ <= total_, "checkpoint '", resume_, "' is at step ", start_,
                ", past this run's ", total_, " steps");
  if (talk_) {
    std::printf("resumed from %s at step %lld\n", resume_.c_str(), static_cast<long long>(start_));
  }
}

// The model and the optimizer's state onto the run's device and into its memory format, after
// the weights are final on the CPU (rank 0's broadcast, a checkpoint read there). Module::to
// keeps each parameter's identity, so the optimizer's state still refers to them.
void Run::place_model() {
  model_->module().to(device_);
  // Always: a checkpoint written in the other layout restores its tensors' strides.
  to_memory_format(model_->module(), layout_);
  for (auto& kv : sgd_->state()) {
    auto& s = static_cast<torch::optim::SGDParamState&>(*kv.second);
    if (s.momentum_buffer().defined()) {
      s.momentum_buffer(in_memory_format(s.momentum_buffer().to(device_), layout_));
    }
  }
}

// The metrics file (rank 0) and the trace: --timeline starts the engine's here;
// TESSERA_TIMELINE started it at init. Either way the trainer's own spans go in beside the
// collectives.
void Run::open_outputs() {
  if (root_ && !o_.metrics.empty()) {
    metrics_.open(o_.metrics, resume_.empty() ? std::ios::trunc : std::ios::app);
    TESSERA_CHECK(metrics_.good(), "--metrics: cannot write '", o_.metrics, "'");
  }
  tracing_ = dist_ && root_ && (!o_.timeline.empty() || timeline_active());
  if (dist_ && root_ && !o_.timeline.empty()) start_timeline(o_.timeline);
}

void Run::phase(int64_t step, const char* what) const {
  activity::set_phase("step " + std::to_string(step + 1) + "/" + std::to_string(total_) + ": " +
                      what);
}

// One optimizer step over backward_passes_per_step equal shares of the batch. Returns the
// step's loss on this rank.
double Run::train_step(int64_t step, double lr) {
  for (auto& group : sgd_->param_groups()) {
    static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
  }
  phase(step, "waiting for its batch");
  if (dopt_) dopt_->set_step(step);  // a rank that skipped a batch fails at the next step
  data::Batch batch = feed_ ? feed_->batch(step, end_) : path_->input().batch(step, end_);
  const bool classify = model_->task() == models::Task::kClassification;
  const torch::Tensor& target = classify ? batch.labels : batch.masks;
  sgd_->zero_grad();
  const int passes = o_.backward_passes_per_step;
  const int64_t micro = o_.input.batch / passes;
  double step_loss = 0;
  for (int p = 0; p < passes; ++p) {
    const Clock::time_point t0 = Clock::now();
    torch::Tensor x = passes == 1 ? batch.images : batch.images.narrow(0, p * micro, micro);
    x = in_memory_format(x.to(device_, dtype_), layout_);
    torch::Tensor y = passes == 1 ? target : target.narrow(0, p * micro, micro);
    y = y.to(device_);
    phase(step, "forward");
    torch::Tensor loss = forward_loss(x, y);
    const Clock::time_point t1 = Clock::now();
    phase(step, "backward (gradients allreduced as they are ready)");
    const double scale = precision_.loss_scaled ? scaler_.scale() : 1.0;
    if (scale == 1.0) {
      (passes == 1 ? loss : loss / passes).backward();
    } else {
      (loss * (scale / passes)).backward();  // f16: small gradients survive the scaling
    }
    const Clock::time_point t2 = Clock::now();
    step_loss += loss.item<double>() / passes;
    if (tracing_) {
      trace("train", "FORWARD", t0, t1);
      trace("train", "BACKWARD", t1, t2);
    }
  }
  const Clock::time_point t3 = Clock::now();
  phase(step, "optimizer step (waiting for the gradient allreduces)");
  optimizer_step();
  if (tracing_) trace("train", "OPTIMIZER_STEP", t3, Clock::now());
  return step_loss;
}

// The loss of one pass in the master dtype, the forward under autocast (--precision bf16, f16).
torch::Tensor Run::forward_loss(const torch::Tensor& x, const torch::Tensor& y) {
  torch::Tensor out;
  {
    AutocastScope amp(device_, precision_.compute);
    out = path_->forward(x);
  }
  auto options = torch::nn::functional::CrossEntropyFuncOptions().ignore_index(255);
  if (class_weights_.defined()) options.weight(class_weights_);
  return torch::nn::functional::cross_entropy(out.to(dtype_), y, options);
}

// The step over the averaged gradients; with f16, unscaled first, or skipped on every rank
// alike when they overflowed (the averaged gradients are the same bits everywhere).
void Run::optimizer_step() {
  if (!precision_.loss_scaled) {
    if (dopt_) {
      dopt_->step();
    } else {
      sgd_->step();
    }
    return;
  }
  if (dopt_) dopt_->synchronize();
  const bool apply = unscale_or_skip(model_->module().parameters(), scaler_);
  if (apply && dopt_) {
    dopt_->step();  // does not reduce again
  } else if (apply) {
    sgd_->step();
  } else if (dopt_) {
    dopt_->zero_grad();
  }
}

// The progress line and metrics record of the interval that ends with `step`: the loss averaged
// over ranks, images per second, and how long its steps waited for batches (rank 0's pipeline).
void Run::log_interval(int64_t step, double lr) {
  const int64_t done = step + 1;
  torch::Tensor l =
      torch::tensor({interval_loss_ / static_cast<double>(interval_steps_)}, torch::kFloat64);
  phase(step, "averaging the loss for the progress line");
  if (dist_) allreduce_(l, "train.loss", ReduceOp::kAverage);
  const double secs = seconds_between(interval_start_, Clock::now());
  const double ips = static_cast<double>(interval_steps_ * path_->global_batch()) / secs;
  result_.final_loss = l.item<double>();
  loss_points_.emplace_back(static_cast<double>(done), result_.final_loss);
  result_.images_per_second = ips;
  const double waited = path_->input().waited_seconds();
  const double wait_ms =
      (waited - interval_wait_start_) * 1e3 / static_cast<double>(interval_steps_);
  interval_wait_start_ = waited;
  if (talk_) {
    const double eta =
        secs / static_cast<double>(interval_steps_) * static_cast<double>(total_ - done);
    std::printf(
        "step %lld/%lld  epoch %lld  loss %.4f  lr %.5f  %.1f img/s  data wait %.1f ms/step  "
        "ETA %s\n",
        static_cast<long long>(done), static_cast<long long>(total_),
        static_cast<long long>(step / per_epoch_), result_.final_loss, lr, ips, wait_ms,
        format_eta(eta).c_str());
    std::fflush(stdout);
  }
  if (metrics_.is_open()) {
    metrics_ << nlohmann::json{{"type", "train"},
                               {"step", done},
                               {"epoch", step / per_epoch_},
                               {"loss", result_.final_loss},
                               {"lr", lr},
                               {"img_per_s", ips},
                               {"data_wait_ms", wait_ms}}
                    .dump()
             << "\n"
             << std::flush;
  }
  interval_loss_ = 0;
  interval_steps_ = 0;
  interval_start_ = Clock::now();
}

Evaluation Run::evaluate(int64_t steps_done, int64_t show) {
  phase(steps_done - 1, "evaluation");
  const Evaluation e = path_->evaluate(show);
  metric_points_.emplace_back(static_cast<double>(steps_done), e.metric);
  const std::string name = path_->metric_name();
  if (talk_) {
    if (name == "accuracy") {
      std::printf("eval  step %lld: accuracy %.4f\n", static_cast<long long>(steps_done), e.metric);
    } else {
      std::printf("eval  step %lld: %s %.4f (%saccuracy %.4f)\n",
                  static_cast<long long>(steps_done), name.c_str(), e.metric,
                  name == "miou" ? "pixel " : "", e.accuracy);
    }
    std::fflush(stdout);
  }
  if (metrics_.is_open()) {
    metrics_ << nlohmann::json{{"type", "eval"},
                               {"step", steps_done},
                               {name, e.metric},
                               {"accuracy", e.accuracy}}
                    .dump()
             << "\n"
             << std::flush;
  }
  return e;
}

void Run::save(int64_t steps_done) {
  if (o_.checkpoint.empty()) return;
  phase(steps_done - 1, root_ ? "writing the checkpoint" : "rank 0 writes the checkpoint");
  meta_.step = steps_done;
  meta_.epoch = steps_done / per_epoch_;
  if (root_) write_checkpoint(o_.checkpoint, model_->module(), *sgd_, meta_);
}

// Rank 0: the curve of the whole run (this job's part, after a --resume) and the grid of its
// first validation samples.
void Run::write_pictures(const Evaluation& final_eval) const {
  if (!o_.curve.empty()) {
    const std::string svg = training_curve_svg(loss_points_, metric_points_, path_->metric_name());
    write_file_atomically(o_.curve, svg.data(), svg.size());
    if (talk_) std::printf("curve: %s\n", o_.curve.c_str());
  }
  if (o_.predictions.empty()) return;
  TESSERA_CHECK(final_eval.shown_images.defined(), "--predictions needs a segmentation model on ",
                "whole images (not --spatial) and rank 0 to hold validation samples");
  const std::string png = data::encode_png(
      prediction_grid(final_eval.shown_images, final_eval.shown_truth, final_eval.shown_predicted));
  write_file_atomically(o_.predictions, png.data(), png.size());
  if (talk_) {
    std::printf("predictions: %s (image, true mask, predicted mask; %lld validation samples)\n",
                o_.predictions.c_str(), static_cast<long long>(final_eval.shown_images.size(0)));
  }
}

TrainResult Run::run() {
  result_.first_step = start_;
  interval_start_ = Clock::now();
  const Clock::time_point run_start = interval_start_;
  for (int64_t step = start_; step < end_; ++step) {
    const double lr = sched_.at(step);
    interval_loss_ += train_step(step, lr);
    ++interval_steps_;
    const int64_t done = step + 1;
    if (o_.on_step) o_.on_step(done, model_->module());
    if (done % o_.log_every == 0 || done == end_) log_interval(step, lr);
    if (o_.eval_every > 0 && done % o_.eval_every == 0 && done != end_) evaluate(done);
    if (o_.checkpoint_every > 0 && done % o_.checkpoint_every == 0 && done != end_) {
      save(done);
      if (o_.elastic && leave_for_more_hosts(done, root_)) {
        result_.steps = done;
        result_.left_for_more_hosts = true;
        return result_;
      }
    }
  }
  activity::set_phase("training done (" + std::to_string(end_) +
                      " steps): final evaluation and checkpoint");
  path_->input().finish();
  result_.data_wait_seconds = path_->input().waited_seconds();
  path_->report_data(result_, talk_);
  const Evaluation final_eval = evaluate(end_, o_.predictions.empty() ? 0 : kShownSamples);
  save(end_);
  if (root_) write_pictures(final_eval);
  if (dist_ && root_ && !o_.timeline.empty()) stop_timeline();
  result_.steps = end_;
  result_.metric = final_eval.metric;
  result_.metric_name = path_->metric_name();
  result_.checkpoint = o_.checkpoint;
  if (talk_) {
    std::printf("done: %lld steps in %.1f s, %s %.4f%s%s\n", static_cast<long long>(end_),
                seconds_between(run_start, Clock::now()), result_.metric_name.c_str(),
                final_eval.metric, o_.checkpoint.empty() ? "" : ", checkpoint ",
                o_.checkpoint.c_str());
    std::fflush(stdout);  // the run's last word, even if the process is killed while it exits
  }
  return result_;
}

}  // namespace

TrainResult run_training(const TrainOptions& o) {
  validate(o);
  TESSERA_CHECK(o.local_only || is_initialized(), "run_training needs tessera::init() first");
  return Run(o).run();
}

}  // namespace train
}  // namespace tessera
