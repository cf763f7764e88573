// Spatial training's input: whole slides listed in DIR/{train,val}.csv manifests (path,label),
// each rank reading only its tile of each image (data/slide.h), never the rest of the slide.
//
// The ranks of a spatial group train on the same samples (the sampler's plan over the P_data
// data groups: data group d takes slice d of each global batch); every rank of the group
// computes the same view of a sample, an image_size² window of the slide (random in training,
// centred in evaluation) with random flips of rows and columns in training, all drawn from
// (seed, epoch, sample), and reads the part of the slide that its tile of that view covers.
// Rank 0 opens every slide once at the start (headers only for tiled TIFFs) and every rank gets
// the sizes, or the same error naming the file: a slide that cannot be opened, or one smaller
// than the image.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/prefetcher.h"
#include "spatial/grid.h"
#include "train/input/input_options.h"
#include "train/input/step_input.h"

namespace tessera {
namespace train {

// The image_size² window of a slide that a sample shows, and its flips (the image's row r is
// the window's row size-1-r when flip_rows).
struct SlideView {
  int64_t y = 0, x = 0, size = 0;
  bool flip_rows = false, flip_cols = false;
};
// Random window and flips in training, the centred window unflipped in evaluation. Throws
// InvalidArgument naming the sizes when the slide is smaller than the window.
SlideView plan_slide_view(uint64_t seed, int64_t epoch, int64_t index, int64_t slide_rows,
                          int64_t slide_cols, int64_t size, bool train);

// The slide region that tile (h, w) of the grid covers in a view, and whether the pixels read
// are flipped to make the tile. Throws InvalidArgument when the view's side does not divide by
// the grid (naming the sides that would).
struct TileRead {
  int64_t y = 0, x = 0, rows = 0, cols = 0;
  bool flip_rows = false, flip_cols = false;
};
TileRead plan_tile_read(const SlideView& view, const spatial::GridShape& grid,
                        const spatial::GridCoord& at);

struct SlideInputOptions {
  // The run's input options: data (the folder of train.csv / val.csv), image_size, batch
  // (samples per data group per step), seed, workers, prefetch, dist and pinned (tiles in pinned
  // host memory: a GPU run copies them asynchronously); the others do not apply to slides.
  InputOptions input;
  spatial::GridShape grid;
  spatial::GridCoord at;
};

class SlideInput : public StepInput {
 public:
  // Collective: rank 0 opens every slide; every rank gets their sizes or the same error.
  explicit SlideInput(const SlideInputOptions& options);
  ~SlideInput() override;

  int64_t num_classes() const override { return num_classes_; }
  int64_t steps_per_epoch() const override { return steps_per_epoch_; }
  std::string describe() const override;
  // Tiles [batch, 3, S/P_h, S/P_w] f32 (ImageNet-normalised) and labels [batch].
  data::Batch batch(int64_t step, int64_t end) override;
  void finish() override {}
  double waited_seconds() const override;

  int64_t val_samples() const { return static_cast<int64_t>(val_.list.samples.size()); }
  // Calls `f` with each of this data group's evaluation batches (val samples d, d + P_data, ...)
  // and the val indices in it.
  void for_each_eval_batch(
      const std::function<void(const data::Batch&, const std::vector<int64_t>&)>& f);

  // Bytes this process read from files while reading tiles, and the sizes of the slide files
  // those tiles came from, summed per tile: reading only the tile makes the first a fraction of
  // the second (about 1 / (P_h * P_w) of it for windows as large as the slide).
  uint64_t bytes_read() const;
  uint64_t slide_bytes() const;

 private:
  struct Shared;
  data::Batch read(const data::DataSet& set, const std::vector<int64_t>& rows,
                   const std::vector<int64_t>& cols, const std::vector<int64_t>& indices,
                   int64_t epoch, bool train) const;

  SlideInputOptions o_;
  data::DataSet train_, val_;
  std::vector<int64_t> train_rows_, train_cols_, val_rows_, val_cols_;
  int64_t num_classes_ = 0;
  int64_t steps_per_epoch_ = 0;
  std::unique_ptr<Shared> shared_;
  std::unique_ptr<data::Prefetcher<data::Batch>> pipe_;
};

}  // namespace train
}  // namespace tessera
