// `tessera train`: the data-parallel training loop over the engine (run under mpirun; one rank
// per process). Every rank builds the same model from the seed, takes rank 0's weights, trains
// on its shard of each global batch with a DistributedOptimizer, and evaluates on its shard of
// the validation set; rank 0 prints progress, writes the metrics and the checkpoints.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tessera/torch.h"
#include "train/input/input_options.h"
#include "train/schedule.h"

namespace tessera {
namespace train {

// `tessera train`'s options: those of the parts it drives (the input, the schedule) composed,
// and the loop's own.
struct TrainOptions {
  std::string model = "deeplabv3plus_resnet18";
  InputOptions input;        // --data, --image-size, --batch-size, ... (train/input/input.h)
  ScheduleOptions schedule;  // --lr, --warmup-epochs, --lr-schedule, ... (train/schedule.h)
  int64_t epochs = 1;        // used when steps == 0
  int64_t steps = 0;
  double momentum = 0.9;
  double weight_decay = 1e-4;
  // The loss's weight of each class (as many as the data set has; empty: all 1). Rare classes
  // weighed up lift the mean IoU, which counts every class alike.
  std::vector<double> class_weights;
  int threads = 1;  // intra-op threads per rank
  uint64_t seed = 42;
  int64_t eval_every = 0;  // steps; 0: only at the end
  int64_t log_every = 10;
  std::string metrics;  // JSON lines (rank 0)
  // Rank 0 at the end: an SVG of the loss and metric curves, and (segmentation) a PNG of the
  // first validation samples beside their true and predicted masks (train/pictures.h).
  std::string curve, predictions;
  std::string timeline;    // Chrome trace (rank 0's engine, with FORWARD/BACKWARD spans)
  std::string checkpoint;  // written at the end and every checkpoint_every steps
  int64_t checkpoint_every = 0;
  std::string resume;  // a checkpoint to continue from
  // Under `tessera run`'s supervisor (docs/reliability.md): continue from --checkpoint when it
  // exists, and at each --checkpoint-every write, leave (exit 0) when the supervisor has found
  // more hosts, so that it restarts the job on them (train/elastic_train.h).
  bool elastic = false;
  // Stop after this many steps (of `steps`/`epochs`, whose schedule still applies) and write
  // the checkpoint: a run split into jobs, e.g. under a batch system's time limit. 0: never.
  int64_t stop_at = 0;
  std::string init_from;  // weights from torch.save(model.state_dict()) or tessera export
  bool sync_bn = false;
  // Spatial decomposition: "HxW" cuts every image into P_h x P_w tiles over that many ranks
  // (world = P_data x P_h x P_w); --data is then a folder of slides listed in train.csv and
  // val.csv (path,label) and the model a ResNet classifier. Empty: data parallelism only.
  std::string spatial;
  // f32, f64 (exact comparisons), bf16 or f16 (autocast over f32 master weights; f16 with
  // dynamic loss scaling): train/device/mixed_precision.h.
  std::string precision = "f32";
  double loss_scale = 65536;  // f16: the dynamic loss scale's start (GradScaler's init_scale)
  // Where each rank trains: cpu, cuda (GPU local_rank % visible), cuda:I,J,... or auto
  // (train/device/device_choice.h).
  std::string device = "cpu";
  // contiguous or channels-last (train/device/memory_layout.h); cuDNN timing its convolutions.
  std::string memory_format = "contiguous";
  bool cudnn_benchmark = false;
  int output_stride = 16;
  int backward_passes_per_step = 1;
  int groups = 0;
  std::string compression = "none";
  bool quiet = false;  // no progress lines (tests)
  // Train without any collective, as a single process would (the equivalence test's reference).
  bool local_only = false;
  // Called after each step with the number of steps done and the model (tests).
  std::function<void(int64_t, torch::nn::Module&)> on_step;
};

// The options every rank of a run must share, as "--option: value" lines (for
// verify_across_ranks).
std::string describe_training_options(const TrainOptions& o);

struct TrainResult {
  int64_t steps = 0;       // steps completed in total (including before a resume)
  int64_t first_step = 0;  // steps done before this run started: the resumed checkpoint's step
  double final_loss = 0;   // mean over ranks of the last logged interval
  double metric = 0;       // accuracy (classification) or mean IoU (segmentation)
  std::string metric_name;
  std::string checkpoint;  // path written last, if any
  double images_per_second = 0;
  double data_wait_seconds = 0;               // rank 0's step waited this long for batches in all
  uint64_t file_bytes_after_first_epoch = 0;  // rank 0's store
  // Spatial: bytes rank 0 read from files during the run, and the sizes of the slide files its
  // tiles came from (summed per tile read).
  uint64_t slide_bytes_read = 0, slide_file_bytes = 0;
  // --elastic: the run left after its checkpoint at `steps` for the supervisor to restart it on
  // more hosts.
  bool left_for_more_hosts = false;
};

// Checks the options (InvalidArgument naming the flag), then trains. Collective.
TrainResult run_training(const TrainOptions& options);

}  // namespace train
}  // namespace tessera
