// The trainer's input: the built-in synthetic set or a data set on disk, delivered batch by
// batch through the prefetching pipeline (N workers decode and augment ahead of the step).
//
// Files: each rank holds its shard in memory (data/shard_store.h). Without --global-shuffle the
// shard is the strided partition and each epoch visits it in an order drawn from (seed, rank,
// epoch); with it, each epoch's shard and order come from the global permutation of (seed,
// epoch) and the ranks exchange samples at the epoch boundary (data/reshuffle.h). Every rank
// runs floor(samples / ranks) / batch steps per epoch, the same number on every rank.
//
// At the end of each epoch (and of the run) the ranks pool the corrupt files they skipped;
// rank 0 lists them, and when more than max_corrupt of the training set is corrupt every rank
// stops with the same error naming the files.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/prefetcher.h"
#include "data/reshuffle.h"
#include "data/sample_source.h"
#include "data/synthetic_shapes.h"
#include "train/input/input_options.h"
#include "train/input/step_input.h"

namespace tessera {
namespace train {

// The global reshuffle's exchange over every rank of the world, through tessera's alltoall
// (one uint8 alltoall with splits per call, named `name` and the call's count).
data::Exchange world_exchange(const std::string& name);

class TrainInput : public StepInput {
 public:
  // Opens the data. Collective when dist.
  explicit TrainInput(const InputOptions& options);
  ~TrainInput() override;

  int64_t num_classes() const override { return num_classes_; }
  bool segmentation() const { return segmentation_; }
  int64_t steps_per_epoch() const override { return steps_per_epoch_; }
  int64_t train_samples() const { return train_samples_; }
  std::string describe()
      const override;  // "voc data set '/x' (3686 train, 410 val samples, 4 classes)"

  // Rank's batch of global step `step` (steps come in order from the first asked for, which may
  // be mid-epoch after a resume, and must all be below `end`). Crossing into a new epoch closes the
  // last one (corrupt-file report; collective).
  data::Batch batch(int64_t step, int64_t end) override;
  // Closes the run's last epoch (the corrupt-file report). Collective.
  void finish() override;
  // Seconds the training thread waited for batches so far.
  double waited_seconds() const override;
  // After the first epoch: "rank 0 holds 1843 samples in 5.1 MiB (encoded); 5.1 MiB read from
  // files, 0 B since" (or empty for synthetic data).
  std::string memory_report() const;
  uint64_t file_bytes_after_first_epoch() const { return bytes_after_first_; }

  // Calls `f` with each of this rank's evaluation batches (the strided shard of the val set).
  void for_each_eval_batch(const std::function<void(const data::Batch&)>& f);

 private:
  void begin_epoch(int64_t epoch, int64_t first, int64_t end);
  void close_epoch();

  InputOptions o_;
  int rank_ = 0, world_ = 1;
  int64_t num_classes_ = 0;
  bool segmentation_ = false;
  int64_t steps_per_epoch_ = 0;
  int64_t train_samples_ = 0;
  // Synthetic.
  std::unique_ptr<data::SyntheticShapes> synth_train_, synth_val_;
  // Files.
  std::unique_ptr<data::DataSet> train_set_, val_set_;
  std::unique_ptr<data::SampleSource> train_src_, val_src_;
  std::optional<data::Exchange> exchange_;  // global shuffle over several ranks
  // The epoch in flight.
  int64_t epoch_ = -1;
  int64_t shard_epoch_ = 0;  // global shuffle: the epoch whose shard the store holds
  std::vector<int64_t> positions_;
  std::unique_ptr<data::Prefetcher<data::Batch>> pipe_;
  double waited_before_ = 0;  // by pipelines already closed
  uint64_t read_at_epoch1_ = 0, bytes_after_first_ = 0;
  bool first_epoch_closed_ = false;
  std::string memory_report_;
};

}  // namespace train
}  // namespace tessera
