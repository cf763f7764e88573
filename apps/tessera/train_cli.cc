#include "apps/tessera/train_cli.h"

#include <cstdio>

#include "common/atomic_file.h"
#include "common/error.h"
#include "models/registry.h"
#include "models/state_dict.h"
#include "train/checkpoint.h"

namespace tessera {
namespace app {

namespace {

// Where and how the arithmetic runs: device, precision, memory layout.
void add_device_options(CLI::App& c, train::TrainOptions& o) {
  c.add_option("--precision", o.precision,
               "f32, f64 (parameters and inputs), bf16 (autocast, f32 master weights) or f16 "
               "(the same with dynamic loss scaling; GPUs only)")
      ->capture_default_str();
  c.add_option("--loss-scale", o.loss_scale,
               "f16: the dynamic loss scale to start from (halved on overflow, doubled after "
               "2000 good steps)")
      ->capture_default_str();
  c.add_option("--device", o.device,
               "cpu, cuda (each rank on GPU local_rank % GPUs), cuda:I,J,... (a list indexed by "
               "local rank) or auto (cuda where there is one)")
      ->capture_default_str();
  c.add_option("--memory-format", o.memory_format,
               "contiguous (NCHW) or channels-last (NHWC: the layout of GPUs' tensor-core "
               "convolutions)")
      ->capture_default_str();
  c.add_flag("--cudnn-benchmark", o.cudnn_benchmark,
             "let cuDNN time each convolution's algorithms once and keep the fastest (may not "
             "be deterministic)");
}

}  // namespace

namespace {

// What the trainer reads: the data set, its layout and the input pipeline.
void add_data_options(CLI::App& c, train::InputOptions& o) {
  c.add_option("--data", o.data,
               "synthetic (coloured shapes on noise, generated in memory) or a data set's folder")
      ->capture_default_str();
  c.add_option("--format", o.format,
               "layout of --data DIR: folder (DIR/{train,val}/<class>/), csv "
               "(DIR/{train,val}.csv), voc, cityscapes")
      ->capture_default_str();
  c.add_option("--workers", o.workers, "input pipeline threads per rank")->capture_default_str();
  c.add_option("--prefetch", o.prefetch, "batches the pipeline makes ahead of the step")
      ->capture_default_str();
  c.add_flag("--keep-decoded", o.keep_decoded,
             "keep decoded pixels in memory instead of the files' bytes (no decoding after the "
             "first epoch, several times the memory)");
  c.add_flag("--global-shuffle", o.global_shuffle,
             "a new permutation of the whole data set every epoch: ranks exchange samples at "
             "each epoch boundary (alltoallv); default: shuffle within each rank's shard");
  c.add_option("--max-corrupt", o.max_corrupt,
               "stop when more than this share of the training set is corrupt (skipped files "
               "are listed at the end of each epoch)")
      ->capture_default_str();
  c.add_option("--train-size", o.train_size, "samples in the synthetic training set")
      ->capture_default_str();
  c.add_option("--val-size", o.val_size, "samples in the synthetic validation set")
      ->capture_default_str();
  c.add_option_function<std::vector<double>>(
       "--scale-range",
       [&o](const std::vector<double>& r) {
         o.min_scale = r.at(0);
         o.max_scale = r.at(1);
       },
       "segmentation training: scale each image and mask by a random factor in MIN MAX before "
       "the crop (default 0.5 2)")
      ->expected(2);
}

// How much it trains and how the rate moves: batch, length, learning-rate schedule, SGD.
void add_schedule_options(CLI::App& c, train::TrainOptions& o) {
  c.add_option("--batch-size", o.input.batch, "samples per rank per step")->capture_default_str();
  c.add_option("--epochs", o.epochs, "epochs (when --steps is 0)")->capture_default_str();
  c.add_option("--steps", o.steps, "steps in total (overrides --epochs)")->capture_default_str();
  c.add_option("--lr", o.schedule.lr, "learning rate for a global batch of --lr-base-batch")
      ->capture_default_str();
  c.add_option("--lr-base-batch", o.schedule.base_batch,
               "global batch that --lr is given for; the rate scales linearly (Goyal et al.)")
      ->capture_default_str();
  c.add_option("--warmup-epochs", o.schedule.warmup_epochs,
               "linear warm-up from the unscaled to the scaled rate")
      ->capture_default_str();
  c.add_option("--lr-schedule", o.schedule.kind, "constant, step, cosine or poly")
      ->capture_default_str();
  c.add_option("--lr-milestones", o.schedule.milestones, "step schedule: epochs where lr *= gamma")
      ->delimiter(',');
  c.add_option("--lr-gamma", o.schedule.gamma, "step schedule factor")->capture_default_str();
  c.add_option("--class-weights", o.class_weights,
               "the loss's weight of each class, one per class (default: all 1)")
      ->delimiter(',');
  c.add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  c.add_option("--weight-decay", o.weight_decay, "SGD weight decay")->capture_default_str();
}

}  // namespace

CLI::App* add_train_command(CLI::App& app, train::TrainOptions& o) {
  CLI::App* c = app.add_subcommand("train", "train a model data-parallel (run under mpirun)");
  c->add_option("--model", o.model,
                "resnet18, resnet50, deeplabv3plus_resnet18, deeplabv3plus_resnet50")
      ->capture_default_str();
  c->add_option("--image-size", o.input.image_size, "square input side in pixels")
      ->capture_default_str();
  add_data_options(*c, o.input);
  add_schedule_options(*c, o);
  c->add_option("--threads", o.threads, "intra-op threads per rank")->capture_default_str();
  c->add_option("--seed", o.seed, "seed of the weights, the data and its order")
      ->capture_default_str();
  c->add_option("--eval-every", o.eval_every, "evaluate every N steps (0: only at the end)")
      ->capture_default_str();
  c->add_option("--log-every", o.log_every, "progress line every N steps")->capture_default_str();
  c->add_option("--curve", o.curve,
                "write an SVG of the training loss and the validation metric against the step "
                "(this job's steps, after --resume)");
  c->add_option("--predictions", o.predictions,
                "segmentation: write a PNG of the first validation images beside their true and "
                "predicted masks");
  c->add_option("--metrics", o.metrics, "write JSON lines of the progress and evaluations");
  c->add_option("--timeline", o.timeline, "Chrome trace of rank 0: steps and collectives");
  c->add_option("--checkpoint", o.checkpoint, "checkpoint file written at the end");
  c->add_option("--checkpoint-every", o.checkpoint_every, "also every N steps")
      ->capture_default_str();
  c->add_option("--resume", o.resume, "continue from this checkpoint");
  c->add_flag("--elastic", o.elastic,
              "under `tessera run --min-np/--max-np/...`: continue from --checkpoint when it "
              "exists, commit at each --checkpoint-every write, restart on more hosts when the "
              "supervisor finds them (docs/reliability.md)");
  c->add_option("--stop-at", o.stop_at,
                "stop after this step and write the checkpoint (the schedule stays that of the "
                "whole run); continue later with --resume")
      ->capture_default_str();
  c->add_option("--init-from", o.init_from,
                "initial weights: a state_dict from torch.save or tessera export");
  c->add_flag("--sync-bn", o.sync_bn,
              "batch statistics over all ranks (SyncBatchNorm; under --spatial: over every "
              "tile of every data group, not only the image's tiles)");
  c->add_option("--spatial", o.spatial,
                "HxW: cut every image into H x W tiles over that many ranks (world = data "
                "groups x H x W); --data DIR then holds slides in train.csv / val.csv "
                "(path,label; --format csv is implied) and --model is resnet18 or resnet50 "
                "(default resnet50)");
  add_device_options(*c, o);
  c->add_option("--output-stride", o.output_stride, "DeepLab-v3+: 16 or 8")->capture_default_str();
  c->add_option("--backward-passes-per-step", o.backward_passes_per_step,
                "split each batch into N passes accumulated locally before one allreduce")
      ->capture_default_str();
  c->add_option("--groups", o.groups,
                "reduce the gradients as N grouped allreduces (0: each alone)")
      ->capture_default_str();
  c->add_option("--compression", o.compression, "gradients on the wire: none, fp16, bf16")
      ->capture_default_str();
  return c;
}

CLI::App* add_export_command(CLI::App& app, ExportOptions& o) {
  CLI::App* c = app.add_subcommand(
      "export", "write a model's weights as a state_dict that Python's torch.load reads");
  c->add_option("--model", o.model, "the architecture")->capture_default_str();
  c->add_option("--num-classes", o.num_classes, "classes (default 1000, or 21 for DeepLab)");
  c->add_option("--checkpoint", o.checkpoint, "take the weights from this tessera checkpoint");
  c->add_option("--init-from", o.init_from, "or from this torch.save'd state_dict");
  c->add_option("--output,-o", o.output, "where to write the state_dict")->required();
  return c;
}

int run_export(const ExportOptions& o) {
  if (rank() != 0) return 0;
  TESSERA_CHECK(o.checkpoint.empty() || o.init_from.empty(),
                "give --checkpoint or --init-from, not both");
  const models::Task task = models::task_of(o.model);
  models::ModelSpec spec;
  spec.name = o.model;
  spec.num_classes =
      o.num_classes > 0 ? o.num_classes : (task == models::Task::kClassification ? 1000 : 21);
  std::string bytes;
  if (!o.checkpoint.empty()) {
    std::vector<char> b = read_file(o.checkpoint);
    bytes.assign(b.begin(), b.end());
  }
  if (!o.checkpoint.empty() && o.num_classes == 0) {
    // Take the number of classes from the checkpoint itself.
    torch::serialize::InputArchive a;
    std::istringstream is(train::checkpoint_archive(bytes, o.checkpoint));
    try {
      a.load_from(is);
      c10::IValue v;
      if (a.try_read("num_classes", v)) spec.num_classes = v.toInt();
    } catch (const c10::Error& e) {
      throw InvalidArgument("checkpoint '" + o.checkpoint + "' is truncated or damaged (" +
                            e.what_without_backtrace() + ")");
    } catch (const std::exception& e) {
      throw InvalidArgument("checkpoint '" + o.checkpoint + "' is truncated or damaged (" +
                            e.what() + ")");
    }
  }
  models::Model model = models::make_model(spec);
  if (!o.checkpoint.empty()) {
    torch::optim::SGD sgd(model.module().parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    train::CheckpointMeta expect;
    expect.model = o.model;
    expect.num_classes = spec.num_classes;
    train::restore_checkpoint(bytes, o.checkpoint, expect, model.module(), sgd);
  } else if (!o.init_from.empty()) {
    models::load_state_dict(model.module(), models::read_state_dict(o.init_from), o.init_from);
  }
  const models::StateDict sd = models::state_dict(model.module());
  models::write_state_dict(sd, o.output);
  std::printf("wrote %zu tensors of %s (%lld classes) to %s\n", sd.size(), o.model.c_str(),
              static_cast<long long>(spec.num_classes), o.output.c_str());
  return 0;
}

void add_train_bench_options(CLI::App& bench, train::TrainBenchOptions& o) {
  bench.add_option("--model", o.model, "bench train: the model")->capture_default_str();
  bench.add_option("--batch-size", o.batch_size, "bench train: samples per rank")
      ->capture_default_str();
  bench.add_option("--image-size", o.image_size, "bench train: input side")->capture_default_str();
  bench.add_option("--batches-per-iter", o.batches_per_iter, "bench train: batches per iteration")
      ->capture_default_str();
  bench.add_option("--threads", o.threads, "bench train: intra-op threads per rank")
      ->capture_default_str();
  bench.add_option("--num-classes", o.num_classes, "bench train: classes (0: 1000 or 21)");
  bench.add_option("--compression", o.compression, "bench train: none, fp16, bf16")
      ->capture_default_str();
  bench.add_option("--groups", o.groups, "bench train: grouped allreduces (0: none)")
      ->capture_default_str();
  bench.add_option("--precision", o.precision, "bench train: f32, f64 or bf16 (autocast)")
      ->capture_default_str();
  bench.add_option("--memory-format", o.memory_format, "bench train: contiguous or channels-last")
      ->capture_default_str();
  bench.add_flag("--cudnn-benchmark", o.cudnn_benchmark,
                 "bench train: let cuDNN time each convolution's algorithms");
  bench.add_flag("!--no-engine", o.engine,
                 "bench train: plain SGD without the DistributedOptimizer (one rank: the "
                 "engine's overhead is the ratio of the two)");
}

}  // namespace app
}  // namespace tessera
