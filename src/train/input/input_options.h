// What the user says about a run's input (tessera train's --data, --image-size, --batch-size,
// ...): its own header, so that the options of the trainer (train/trainer.h) compose it without
// the pipeline's headers.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {
namespace train {

// The input of a run as the user gives it (--data, --format, --image-size, --batch-size, ...);
// the spatial path's slides (train/input/slide_input.h) take the same options and read those they
// use.
struct InputOptions {
  std::string data = "synthetic";  // "synthetic" or a folder
  std::string format = "voc";      // for a folder: folder, csv, voc, cityscapes
  int64_t image_size = 64;
  int64_t train_size = 1024, val_size = 128;  // synthetic only
  int64_t batch = 8;                          // per rank
  int workers = 2;
  int prefetch = 2;  // batches made ahead
  bool keep_decoded = false;
  bool global_shuffle = false;
  double max_corrupt = 0.01;
  // Segmentation training: each image and mask scaled by a factor drawn from this range before
  // the crop (data/augment.h).
  double min_scale = 0.5, max_scale = 2.0;

  // Set by whoever drives the input, from its own options and its run: not the user's.
  uint64_t seed = 42;
  bool segmentation = true;  // synthetic only: which targets (files say themselves)
  bool quiet = false;
  bool dist = true;     // false: a single process (no collective)
  bool pinned = false;  // batches in pinned host memory (a GPU run copies them asynchronously)
};

// Throws InvalidArgument naming the flag that is out of range.
void validate(const InputOptions& o);
// "--data: x" lines of the user's options that every rank must share (not workers, prefetch).
std::string describe(const InputOptions& o);

}  // namespace train
}  // namespace tessera
