#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/activity.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "data/sampler.h"
#include "data/synthetic_shapes.h"
#include "models/registry.h"
#include "models/state_dict.h"
#include "spatial/process_grid.h"
#include "spatial/spatial_resnet.h"
#include "train/checkpoint.h"
#include "train/input.h"
#include "train/metrics.h"
#include "train/on_root.h"
#include "train/schedule.h"
#include "train/slide_input.h"

namespace tessera {
namespace train {
namespace {

using Clock = std::chrono::steady_clock;

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
  TESSERA_CHECK(o.batch_size > 0, "--batch-size must be > 0, got ", o.batch_size);
  TESSERA_CHECK(o.image_size >= 16, "--image-size must be >= 16, got ", o.image_size);
  TESSERA_CHECK(o.steps > 0 || o.epochs > 0, "give --steps or --epochs (> 0)");
  TESSERA_CHECK(o.steps >= 0 && o.epochs >= 0, "--steps and --epochs must be >= 0");
  TESSERA_CHECK(o.lr > 0, "--lr must be > 0, got ", o.lr);
  TESSERA_CHECK(o.base_batch > 0, "--lr-base-batch must be > 0");
  TESSERA_CHECK(o.threads >= 1, "--threads must be >= 1, got ", o.threads);
  TESSERA_CHECK(o.log_every >= 1, "--log-every must be >= 1");
  TESSERA_CHECK(o.eval_every >= 0 && o.checkpoint_every >= 0,
                "--eval-every and --checkpoint-every must be >= 0");
  TESSERA_CHECK(o.backward_passes_per_step >= 1 && o.batch_size % o.backward_passes_per_step == 0,
                "--backward-passes-per-step (", o.backward_passes_per_step,
                ") must divide --batch-size (", o.batch_size, "): each pass takes an equal share");
  TESSERA_CHECK(o.checkpoint_every == 0 || !o.checkpoint.empty(),
                "--checkpoint-every needs --checkpoint FILE");
  TESSERA_CHECK(o.precision == "f32" || o.precision == "f64", "--precision '", o.precision,
                "' is not supported; accepted: f32, f64");
  parse_schedule(o.lr_schedule);
  parse_compression(o.compression);
  if (!o.spatial.empty()) {
    TESSERA_CHECK(models::task_of(o.model) == models::Task::kClassification,
                  "--spatial trains classifiers on slides (resnet18, resnet50); --model ", o.model,
                  " is a segmentation model");
    TESSERA_CHECK(o.format == "csv", "--spatial reads slides from DIR/train.csv and DIR/val.csv ",
                  "(path,label): --format must be csv, got ", o.format);
    TESSERA_CHECK(!o.global_shuffle && !o.keep_decoded,
                  "--global-shuffle and --keep-decoded hold whole images in memory; under "
                  "--spatial each rank reads only its tile of each slide, every step");
    TESSERA_CHECK(!o.local_only, "--spatial needs the ranks of its grid (run under mpirun)");
  }
}

InputOptions input_options(const TrainOptions& o, models::Task task, bool dist) {
  InputOptions io;
  io.data = o.data;
  io.format = o.format;
  io.segmentation = task == models::Task::kSegmentation;
  io.image_size = o.image_size;
  io.train_size = o.train_size;
  io.val_size = o.val_size;
  io.batch = o.batch_size;
  io.seed = o.seed;
  io.workers = o.workers;
  io.prefetch = o.prefetch;
  io.keep_decoded = o.keep_decoded;
  io.global_shuffle = o.global_shuffle;
  io.max_corrupt = o.max_corrupt;
  io.quiet = o.quiet;
  io.dist = dist;
  return io;
}

struct Evaluation {
  double metric = 0;
  double accuracy = 0;
};

Evaluation evaluate(const models::Model& model, TrainInput& input, int64_t num_classes, bool dist) {
  torch::NoGradGuard no_grad;
  model.module().eval();
  torch::Tensor confusion = torch::zeros({num_classes, num_classes}, torch::kLong);
  input.for_each_eval_batch([&](const data::Batch& b) {
    torch::Tensor pred =
        model.forward(b.images.to(model.module().parameters().front().scalar_type())).argmax(1);
    accumulate_confusion(confusion, pred,
                         model.task() == models::Task::kClassification ? b.labels : b.masks);
  });
  if (dist) allreduce_(confusion, "eval.confusion", ReduceOp::kSum);
  model.module().train();
  Evaluation e;
  e.accuracy = accuracy(confusion);
  e.metric = model.task() == models::Task::kClassification ? e.accuracy : mean_iou(confusion);
  return e;
}

// Spatial evaluation: each spatial group's first rank writes its val samples' scores (the
// probability of class 1), correctness and labels into one table that a sum over every rank
// completes. The metric is the ROC AUC for two classes (when both occur), else the accuracy.
Evaluation evaluate_slides(models::ResNetImpl& net, SlideInput& input,
                           const spatial::ProcessGrid& grid, torch::ScalarType dtype,
                           int64_t num_classes) {
  torch::NoGradGuard no_grad;
  net.eval();
  const int64_t n = input.val_samples();
  torch::Tensor table = torch::zeros({3, n}, torch::kDouble);  // score, correct, label
  input.for_each_eval_batch([&](const data::Batch& b, const std::vector<int64_t>& indices) {
    const torch::Tensor logits =
        spatial::spatial_resnet_forward(net, b.images.to(dtype), grid.space()).to(torch::kDouble);
    if (grid.spatial().rank() != 0) return;  // the group's other ranks hold the same logits
    const torch::Tensor prob = torch::softmax(logits, 1);
    const torch::Tensor correct = logits.argmax(1).eq(b.labels).to(torch::kDouble);
    for (size_t k = 0; k < indices.size(); ++k) {
      const int64_t i = static_cast<int64_t>(k);
      table[0][indices[k]] = num_classes == 2 ? prob[i][1].item<double>() : 0.0;
      table[1][indices[k]] = correct[i].item<double>();
      table[2][indices[k]] = static_cast<double>(b.labels[i].item<int64_t>());
    }
  });
  allreduce_(table, "eval.slides", ReduceOp::kSum);
  net.train();
  Evaluation e;
  e.accuracy = n > 0 ? table[1].sum().item<double>() / static_cast<double>(n) : 0.0;
  e.metric = e.accuracy;
  const torch::Tensor labels = table[2].to(torch::kLong);
  if (num_classes == 2 && labels.eq(0).any().item<bool>() && labels.eq(1).any().item<bool>()) {
    const torch::Tensor scores = table[0].contiguous();
    const torch::Tensor l = labels.contiguous();
    e.metric =
        roc_auc(std::vector<double>(scores.data_ptr<double>(), scores.data_ptr<double>() + n),
                std::vector<int64_t>(l.data_ptr<int64_t>(), l.data_ptr<int64_t>() + n));
  }
  return e;
}

}  // namespace

std::string describe_training_options(const TrainOptions& o) {
  std::ostringstream s;
  s.precision(17);
  // What every rank must share; paths that only rank 0 writes, and per-rank resources (workers,
  // prefetch, threads), may differ.
  s << "--model: " << o.model << "\n--image-size: " << o.image_size << "\n--data: " << o.data
    << "\n--format: " << o.format << "\n--train-size: " << o.train_size
    << "\n--val-size: " << o.val_size << "\n--keep-decoded: " << o.keep_decoded
    << "\n--global-shuffle: " << o.global_shuffle << "\n--max-corrupt: " << o.max_corrupt
    << "\n--batch-size: " << o.batch_size << "\n--epochs: " << o.epochs << "\n--steps: " << o.steps
    << "\n--lr: " << o.lr << "\n--lr-base-batch: " << o.base_batch
    << "\n--warmup-epochs: " << o.warmup_epochs << "\n--lr-schedule: " << o.lr_schedule
    << "\n--lr-milestones:";
  for (double m : o.lr_milestones) s << " " << m;
  s << "\n--lr-gamma: " << o.lr_gamma << "\n--momentum: " << o.momentum
    << "\n--weight-decay: " << o.weight_decay << "\n--seed: " << o.seed
    << "\n--eval-every: " << o.eval_every << "\n--log-every: " << o.log_every
    << "\n--checkpoint-every: " << o.checkpoint_every << "\n--resume (given): " << !o.resume.empty()
    << "\n--stop-at: " << o.stop_at << "\n--init-from (given): " << !o.init_from.empty()
    << "\n--sync-bn: " << o.sync_bn << "\n--spatial: " << o.spatial
    << "\n--precision: " << o.precision << "\n--output-stride: " << o.output_stride
    << "\n--backward-passes-per-step: " << o.backward_passes_per_step << "\n--groups: " << o.groups
    << "\n--compression: " << o.compression << "\n";
  return s.str();
}

TrainResult run_training(const TrainOptions& o) {
  validate(o);
  const bool dist = !o.local_only;
  TESSERA_CHECK(!dist || is_initialized(), "run_training needs tessera::init() first");
  const int world = dist ? size() : 1;
  const int me = dist ? rank() : 0;
  const bool root = me == 0;
  const bool talk = root && !o.quiet;
  at::set_num_threads(o.threads);
  torch::manual_seed(o.seed);
  // Before any other collective: ranks started with different options (an MPMD command line, a
  // stale script on one node) would otherwise average different batch sizes or models silently,
  // or wait on collectives the others never start.
  if (dist) verify_across_ranks("the training options", describe_training_options(o));

  const models::Task task = models::task_of(o.model);
  // Spatial decomposition: the grid's communicators and each rank's tiles of the slides.
  const bool spatial = !o.spatial.empty();
  std::unique_ptr<spatial::ProcessGrid> grid;
  std::unique_ptr<SlideInput> slides;
  std::unique_ptr<TrainInput> files;
  if (spatial) {
    grid = std::make_unique<spatial::ProcessGrid>(o.spatial);
    SlideInputOptions so;
    so.data = o.data;
    so.image_size = o.image_size;
    so.batch = o.batch_size;
    so.seed = o.seed;
    so.workers = o.workers;
    so.prefetch = o.prefetch;
    so.grid = grid->shape();
    so.at = grid->coord();
    so.dist = dist;
    slides = std::make_unique<SlideInput>(so);
  } else {
    files = std::make_unique<TrainInput>(input_options(o, task, dist));
    TESSERA_CHECK(files->segmentation() == (task == models::Task::kSegmentation), "--model ",
                  o.model, " is a ",
                  task == models::Task::kSegmentation ? "segmentation" : "classification",
                  " model but --data '", o.data, "' (", o.format, ") holds ",
                  files->segmentation() ? "segmentation masks" : "class labels");
  }
  StepInput& input = spatial ? static_cast<StepInput&>(*slides) : *files;
  // Samples per step over all ranks: a spatial group shares its samples.
  const int64_t global_batch = (spatial ? grid->shape().data : world) * o.batch_size;
  const int64_t num_classes = input.num_classes();
  if (talk) std::printf("data: %s\n", input.describe().c_str());
  models::ModelSpec spec;
  spec.name = o.model;
  spec.num_classes = num_classes;
  spec.output_stride = o.output_stride;
  // Spatial BatchNorm reduces its own statistics (over the grid's world with --sync-bn).
  spec.norm.sync = o.sync_bn && dist && !spatial;
  models::Model model = models::make_model(spec);
  torch::nn::Module& net = model.module();
  models::ResNetImpl* resnet = spatial ? net.as<models::ResNetImpl>() : nullptr;
  if (spatial)
    spatial::check_resnet_tiling(*resnet, o.image_size, grid->shape().h, grid->shape().w);
  auto forward = [&](const torch::Tensor& x) {
    if (!spatial) return model.forward(x);
    return spatial::spatial_resnet_forward(*resnet, x, grid->space(),
                                           o.sync_bn ? &grid->world() : nullptr);
  };
  const torch::ScalarType dtype = o.precision == "f64" ? torch::kDouble : torch::kFloat;
  if (dtype != torch::kFloat) net.to(dtype);
  net.train();

  if (!o.init_from.empty()) {
    const std::string report = on_root(dist, "init_from.status", [&] {
      models::LoadReport r =
          models::load_state_dict(net, models::read_state_dict(o.init_from), o.init_from);
      TESSERA_CHECK(!r.loaded.empty(), "--init-from '", o.init_from,
                    "': no tensor name matches the model ", o.model);
      return std::to_string(r.loaded.size()) + " tensors loaded, " +
             std::to_string(r.missing.size()) + " kept as initialised, " +
             std::to_string(r.unused.size()) + " in the file unused";
    });
    if (talk) std::printf("init-from %s: %s\n", o.init_from.c_str(), report.c_str());
  }
  if (dist) broadcast_parameters(net, 0);

  torch::optim::SGD sgd(
      net.parameters(),
      torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
  std::unique_ptr<DistributedOptimizer> dopt;
  if (dist) {
    DistributedOptions d;
    d.backward_passes_per_step = o.backward_passes_per_step;
    d.groups = o.groups;
    d.compression = parse_compression(o.compression);
    dopt = std::make_unique<DistributedOptimizer>(sgd, net.named_parameters(), d);
  }

  const int64_t per_epoch = input.steps_per_epoch();
  const int64_t total = o.steps > 0 ? o.steps : o.epochs * per_epoch;

  LrSchedule sched;
  sched.base_lr = o.lr;
  sched.base_batch = o.base_batch;
  sched.global_batch = global_batch;
  sched.warmup_steps = std::llround(o.warmup_epochs * static_cast<double>(per_epoch));
  sched.total_steps = total;
  sched.kind = parse_schedule(o.lr_schedule);
  sched.gamma = o.lr_gamma;
  for (double e : o.lr_milestones) {
    sched.milestones.push_back(std::llround(e * static_cast<double>(per_epoch)));
  }

  CheckpointMeta meta;
  meta.model = o.model;
  meta.num_classes = num_classes;
  meta.image_size = o.image_size;
  int64_t start = 0;
  if (!o.resume.empty()) {
    const std::string bytes = on_root(dist, "resume.bytes", [&] {
      try {
        std::vector<char> b = read_file(o.resume);
        return std::string(b.begin(), b.end());
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(std::string("--resume: ") + e.what());
      }
    });
    // Every rank restores from the same bytes, so every rank fails alike on a bad file.
    start = restore_checkpoint(bytes, o.resume, meta, net, sgd).step;
    TESSERA_CHECK(start <= total, "checkpoint '", o.resume, "' is at step ", start,
                  ", past this run's ", total, " steps");
    if (talk)
      std::printf("resumed from %s at step %lld\n", o.resume.c_str(),
                  static_cast<long long>(start));
  }

  std::ofstream metrics;
  if (root && !o.metrics.empty()) {
    metrics.open(o.metrics, o.resume.empty() ? std::ios::trunc : std::ios::app);
    TESSERA_CHECK(metrics.good(), "--metrics: cannot write '", o.metrics, "'");
  }
  // --timeline starts the engine's trace here; TESSERA_TIMELINE started it at init. Either way
  // the trainer's own spans go in beside the collectives.
  const bool tracing = dist && root && (!o.timeline.empty() || timeline_active());
  if (dist && root && !o.timeline.empty()) start_timeline(o.timeline);

  // What this rank is doing, for the line it prints if another rank dies (common/activity.h).
  auto phase = [&](int64_t step, const char* what) {
    activity::set_phase("step " + std::to_string(step + 1) + "/" + std::to_string(total) + ": " +
                        what);
  };
  auto save = [&](int64_t steps_done) {
    if (o.checkpoint.empty()) return;
    phase(steps_done - 1, root ? "writing the checkpoint" : "rank 0 writes the checkpoint");
    meta.step = steps_done;
    meta.epoch = steps_done / per_epoch;
    if (root) write_checkpoint(o.checkpoint, net, sgd, meta);
  };
  const std::string metric_name = spatial && num_classes == 2             ? "auc"
                                  : task == models::Task::kClassification ? "accuracy"
                                                                          : "miou";
  auto run_eval = [&](int64_t steps_done) {
    phase(steps_done - 1, "evaluation");
    Evaluation e = spatial ? evaluate_slides(*resnet, *slides, *grid, dtype, num_classes)
                           : evaluate(model, *files, num_classes, dist);
    if (talk) {
      if (task == models::Task::kSegmentation) {
        std::printf("eval  step %lld: miou %.4f (pixel accuracy %.4f)\n",
                    static_cast<long long>(steps_done), e.metric, e.accuracy);
      } else if (metric_name == "auc") {
        std::printf("eval  step %lld: auc %.4f (accuracy %.4f)\n",
                    static_cast<long long>(steps_done), e.metric, e.accuracy);
      } else {
        std::printf("eval  step %lld: accuracy %.4f\n", static_cast<long long>(steps_done),
                    e.metric);
      }
      std::fflush(stdout);
    }
    if (metrics.is_open()) {
      metrics << nlohmann::json{{"type", "eval"},
                                {"step", steps_done},
                                {metric_name, e.metric},
                                {"accuracy", e.accuracy}}
                     .dump()
              << "\n"
              << std::flush;
    }
    return e;
  };

  const int64_t end = o.stop_at > 0 ? std::min(o.stop_at, total) : total;
  TrainResult result;
  result.first_step = start;
  const int passes = o.backward_passes_per_step;
  const int64_t micro = o.batch_size / passes;
  double interval_loss = 0;
  int64_t interval_steps = 0;
  Clock::time_point interval_start = Clock::now();
  const Clock::time_point run_start = interval_start;
  double interval_wait_start = 0;
  for (int64_t step = start; step < end; ++step) {
    const double lr = sched.at(step);
    for (auto& group : sgd.param_groups()) {
      static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
    }
    phase(step, "waiting for its batch");
    if (dopt) dopt->set_step(step);  // a rank that skipped a batch fails at the next step
    data::Batch batch = input.batch(step, end);
    const torch::Tensor& target =
        task == models::Task::kClassification ? batch.labels : batch.masks;
    sgd.zero_grad();
    double step_loss = 0;
    for (int p = 0; p < passes; ++p) {
      const Clock::time_point t0 = Clock::now();
      torch::Tensor x = passes == 1 ? batch.images : batch.images.narrow(0, p * micro, micro);
      if (dtype != torch::kFloat) x = x.to(dtype);
      torch::Tensor y = passes == 1 ? target : target.narrow(0, p * micro, micro);
      phase(step, "forward");
      torch::Tensor loss = torch::nn::functional::cross_entropy(
          forward(x), y, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(255));
      const Clock::time_point t1 = Clock::now();
      phase(step, "backward (gradients allreduced as they are ready)");
      (passes == 1 ? loss : loss / passes).backward();
      const Clock::time_point t2 = Clock::now();
      step_loss += loss.item<double>() / passes;
      if (tracing) {
        trace("train", "FORWARD", t0, t1);
        trace("train", "BACKWARD", t1, t2);
      }
    }
    const Clock::time_point t3 = Clock::now();
    phase(step, "optimizer step (waiting for the gradient allreduces)");
    if (dopt) {
      dopt->step();
    } else {
      sgd.step();
    }
    if (tracing) trace("train", "OPTIMIZER_STEP", t3, Clock::now());
    interval_loss += step_loss;
    ++interval_steps;
    const int64_t done = step + 1;
    if (o.on_step) o.on_step(done, net);

    if (done % o.log_every == 0 || done == end) {
      torch::Tensor l =
          torch::tensor({interval_loss / static_cast<double>(interval_steps)}, torch::kFloat64);
      phase(step, "averaging the loss for the progress line");
      if (dist) allreduce_(l, "train.loss", ReduceOp::kAverage);
      const double secs = seconds_between(interval_start, Clock::now());
      const double ips = static_cast<double>(interval_steps * global_batch) / secs;
      result.final_loss = l.item<double>();
      result.images_per_second = ips;
      // How long the steps of this interval waited for their batches (rank 0's pipeline).
      const double wait_ms = (input.waited_seconds() - interval_wait_start) * 1e3 /
                             static_cast<double>(interval_steps);
      interval_wait_start = input.waited_seconds();
      if (talk) {
        std::printf(
            "step %lld/%lld  epoch %lld  loss %.4f  lr %.5f  %.1f img/s  data wait %.1f ms/step  "
            "ETA %s\n",
            static_cast<long long>(done), static_cast<long long>(total),
            static_cast<long long>(step / per_epoch), result.final_loss, lr, ips, wait_ms,
            format_eta(secs / static_cast<double>(interval_steps) *
                       static_cast<double>(total - done))
                .c_str());
        std::fflush(stdout);
      }
      if (metrics.is_open()) {
        metrics << nlohmann::json{{"type", "train"},
                                  {"step", done},
                                  {"epoch", step / per_epoch},
                                  {"loss", result.final_loss},
                                  {"lr", lr},
                                  {"img_per_s", ips},
                                  {"data_wait_ms", wait_ms}}
                       .dump()
                << "\n"
                << std::flush;
      }
      interval_loss = 0;
      interval_steps = 0;
      interval_start = Clock::now();
    }
    if (o.eval_every > 0 && done % o.eval_every == 0 && done != end) run_eval(done);
    if (o.checkpoint_every > 0 && done % o.checkpoint_every == 0 && done != end) save(done);
  }
  activity::set_phase("training done (" + std::to_string(end) +
                      " steps): final evaluation and checkpoint");
  input.finish();
  result.data_wait_seconds = input.waited_seconds();
  if (spatial) {
    result.slide_bytes_read = slides->bytes_read();
    result.slide_file_bytes = slides->slide_bytes();
    if (talk) {
      std::printf(
          "data: rank 0 waited %.2f s for tiles in all; read %.1f MiB from files for tiles of "
          "slides of %.1f MiB (%.1f%%)\n",
          result.data_wait_seconds, static_cast<double>(result.slide_bytes_read) / 1048576.0,
          static_cast<double>(result.slide_file_bytes) / 1048576.0,
          100.0 * static_cast<double>(result.slide_bytes_read) /
              std::max<double>(1.0, static_cast<double>(result.slide_file_bytes)));
    }
  } else {
    result.file_bytes_after_first_epoch = files->file_bytes_after_first_epoch();
  }
  if (talk && !spatial && !files->memory_report().empty()) {
    std::printf(
        "data: rank 0 waited %.2f s for batches in all; %llu bytes read from files after "
        "the first epoch\n",
        result.data_wait_seconds,
        static_cast<unsigned long long>(result.file_bytes_after_first_epoch));
  }
  const Evaluation final_eval = run_eval(end);
  save(end);
  if (dist && root && !o.timeline.empty()) stop_timeline();
  result.steps = end;
  result.metric = final_eval.metric;
  result.metric_name = metric_name;
  result.checkpoint = o.checkpoint;
  if (talk) {
    std::printf("done: %lld steps in %.1f s, %s %.4f%s%s\n", static_cast<long long>(end),
                seconds_between(run_start, Clock::now()), metric_name.c_str(), final_eval.metric,
                o.checkpoint.empty() ? "" : ", checkpoint ", o.checkpoint.c_str());
    std::fflush(stdout);  // the run's last word, even if the process is killed while it exits
  }
  return result;
}

}  // namespace train
}  // namespace tessera
