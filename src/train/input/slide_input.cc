#include "train/input/slide_input.h"

#include <atomic>
#include <filesystem>
#include <numeric>
#include <random>
#include <sstream>

#include "common/error.h"
#include "data/augment.h"
#include "data/sampler.h"
#include "data/shape.h"
#include "data/shard_store.h"
#include "data/slide.h"
#include "tessera/torch.h"
#include "train/device/device_feed.h"
#include "train/on_root.h"

namespace tessera {
namespace train {
namespace {

// The sides near `size` that divide by `parts` (for the message of a side that does not).
std::string sides_that_divide(int64_t size, int64_t parts) {
  const int64_t below = size / parts * parts;
  std::ostringstream os;
  if (below > 0) os << below << " or ";
  os << below + parts;
  return os.str();
}

// Rows and columns of each slide of `set`, one "rows cols" line per slide (rank 0's scan).
std::string scan_slides(const data::DataSet& set, int64_t size) {
  std::ostringstream os;
  for (const data::Sample& s : set.list.samples) {
    data::SlideReader slide(s.image);  // throws naming the file when it cannot be opened
    TESSERA_CHECK(slide.height() >= size && slide.width() >= size, "slide '", s.image, "' is ",
                  slide.height(), "x", slide.width(), " pixels, smaller than --image-size ", size,
                  ": every slide must be at least ", size, "x", size,
                  " (lower --image-size to at most ", std::min(slide.height(), slide.width()), ")");
    os << slide.height() << " " << slide.width() << "\n";
  }
  return os.str();
}

void parse_sizes(const std::string& text, size_t count, std::vector<int64_t>& rows,
                 std::vector<int64_t>& cols) {
  std::istringstream is(text);
  rows.resize(count);
  cols.resize(count);
  for (size_t i = 0; i < count; ++i) is >> rows[i] >> cols[i];
  TESSERA_CHECK(!is.fail(), "slide sizes from rank 0 are incomplete");
}

}  // namespace

SlideView plan_slide_view(uint64_t seed, int64_t epoch, int64_t index, int64_t slide_rows,
                          int64_t slide_cols, int64_t size, bool train) {
  TESSERA_CHECK(size > 0 && slide_rows >= size && slide_cols >= size, "a ", size, "x", size,
                " window does not fit a ", slide_rows, "x", slide_cols, " slide");
  SlideView v;
  v.size = size;
  if (!train) {
    v.y = (slide_rows - size) / 2;
    v.x = (slide_cols - size) / 2;
    return v;
  }
  // Every rank of the group draws the same view: the draw depends on nothing rank-specific.
  std::mt19937_64 rng(
      data::mix_seed(data::mix_seed(data::mix_seed(seed) ^ static_cast<uint64_t>(epoch)) ^
                     static_cast<uint64_t>(index)));
  v.y = std::uniform_int_distribution<int64_t>(0, slide_rows - size)(rng);
  v.x = std::uniform_int_distribution<int64_t>(0, slide_cols - size)(rng);
  // Slides have no up or left: both flips keep the label.
  v.flip_rows = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
  v.flip_cols = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
  return v;
}

TileRead plan_tile_read(const SlideView& v, const spatial::GridShape& g,
                        const spatial::GridCoord& at) {
  TESSERA_CHECK(v.size % g.h == 0 && v.size % g.w == 0, "--image-size ", v.size,
                " does not divide into tiles of a ", g.h, "x", g.w, " grid; sides that do: ",
                sides_that_divide(v.size, std::lcm(int64_t{g.h}, int64_t{g.w})));
  TileRead t;
  t.rows = v.size / g.h;
  t.cols = v.size / g.w;
  // Tile h of the flipped image is the mirror of tile P_h - 1 - h of the window, read and flipped.
  t.y = v.y + (v.flip_rows ? v.size - (at.h + 1) * t.rows : at.h * t.rows);
  t.x = v.x + (v.flip_cols ? v.size - (at.w + 1) * t.cols : at.w * t.cols);
  t.flip_rows = v.flip_rows;
  t.flip_cols = v.flip_cols;
  return t;
}

struct SlideInput::Shared {
  std::atomic<uint64_t> slide_bytes{0};
  uint64_t read_at_start = 0;
};

SlideInput::SlideInput(const SlideInputOptions& o) : o_(o), shared_(std::make_unique<Shared>()) {
  validate(o.input);
  TESSERA_CHECK(o.input.data != "synthetic",
                "--spatial trains on slides: give --data DIR with train.csv and val.csv "
                "manifests (path,label), e.g. from `tessera make-dataset slides`");
  train_ = data::open_dataset(o.input.data, data::Format::kCsv, "train");
  val_ = data::open_dataset(o.input.data, data::Format::kCsv, "val");
  num_classes_ = std::max(train_.num_classes, val_.num_classes);
  // Checked before any slide is opened: a window that no grid tile can hold.
  plan_tile_read(SlideView{0, 0, o.input.image_size}, o.grid, o.at);
  const std::string sizes = on_root(o.input.dist, "slides.sizes", [&] {
    return scan_slides(train_, o.input.image_size) + scan_slides(val_, o.input.image_size);
  });
  std::vector<int64_t> rows, cols;
  const size_t n_train = train_.list.samples.size(), n_val = val_.list.samples.size();
  parse_sizes(sizes, n_train + n_val, rows, cols);
  train_rows_.assign(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(n_train));
  train_cols_.assign(cols.begin(), cols.begin() + static_cast<std::ptrdiff_t>(n_train));
  val_rows_.assign(rows.begin() + static_cast<std::ptrdiff_t>(n_train), rows.end());
  val_cols_.assign(cols.begin() + static_cast<std::ptrdiff_t>(n_train), cols.end());
  TESSERA_CHECK(static_cast<int64_t>(n_train) >= o.grid.data * o.input.batch, "'", o.input.data,
                "/train.csv' lists ", n_train, " slides, fewer than one global batch of ",
                o.grid.data * o.input.batch, " (", o.grid.data, " data group",
                o.grid.data == 1 ? "" : "s", " x --batch-size ", o.input.batch,
                "): add slides or lower --batch-size");
  data::ShardPlan plan;
  plan.dataset_size = static_cast<int64_t>(n_train);
  plan.seed = o.input.seed;
  plan.ranks = o.grid.data;
  plan.batch = o.input.batch;
  steps_per_epoch_ = plan.steps_per_epoch();
  shared_->read_at_start = data::process_read_bytes();
}

SlideInput::~SlideInput() = default;

std::string SlideInput::describe() const {
  std::ostringstream os;
  os << "slides '" << o_.input.data << "' (" << train_.list.samples.size() << " train, "
     << val_.list.samples.size() << " val, " << num_classes_ << " classes), " << o_.input.image_size
     << "x" << o_.input.image_size << " images over a " << o_.grid.h << "x" << o_.grid.w
     << " grid: tiles of " << o_.input.image_size / o_.grid.h << "x"
     << o_.input.image_size / o_.grid.w << ", " << o_.grid.data << " data group"
     << (o_.grid.data == 1 ? "" : "s");
  return os.str();
}

data::Batch SlideInput::read(const data::DataSet& set, const std::vector<int64_t>& rows,
                             const std::vector<int64_t>& cols, const std::vector<int64_t>& indices,
                             int64_t epoch, bool train) const {
  std::vector<torch::Tensor> tiles;
  std::vector<int64_t> labels;
  for (int64_t i : indices) {
    const data::Sample& s = set.list.samples[static_cast<size_t>(i)];
    const SlideView view =
        plan_slide_view(o_.input.seed, epoch, i, rows[static_cast<size_t>(i)],
                        cols[static_cast<size_t>(i)], o_.input.image_size, train);
    const TileRead t = plan_tile_read(view, o_.grid, o_.at);
    data::SlideReader slide(s.image);
    torch::Tensor px = slide.read_region(t.y, t.x, t.rows, t.cols);
    if (t.flip_rows) px = px.flip(0);
    if (t.flip_cols) px = px.flip(1);
    tiles.push_back(data::normalize(px, data::Normalize{}));
    labels.push_back(s.label);
    std::error_code ec;
    const auto file = std::filesystem::file_size(s.image, ec);
    if (!ec) shared_->slide_bytes += file;
  }
  data::Batch b;
  b.images = torch::stack(tiles);
  b.labels = torch::tensor(labels, torch::kLong);
  return b;
}

data::Batch SlideInput::batch(int64_t step, int64_t end) {
  if (!pipe_) {
    data::ShardPlan plan;
    plan.dataset_size = static_cast<int64_t>(train_.list.samples.size());
    plan.seed = o_.input.seed;
    plan.ranks = o_.grid.data;
    plan.batch = o_.input.batch;
    const int64_t per_epoch = steps_per_epoch_;
    std::function<data::Batch(int64_t)> make = [this, plan, per_epoch](int64_t s) {
      return read(train_, train_rows_, train_cols_, data::batch_indices(plan, s, o_.at.data),
                  s / per_epoch, true);
    };
    if (o_.input.pinned) make = [make](int64_t s) { return pinned_batch(make(s)); };  // workers pin
    pipe_ = std::make_unique<data::Prefetcher<data::Batch>>(
        make, o_.input.workers, o_.input.prefetch, step, end, timeout_s());
  }
  return pipe_->next();
}

double SlideInput::waited_seconds() const { return pipe_ ? pipe_->waited_seconds() : 0.0; }

void SlideInput::for_each_eval_batch(
    const std::function<void(const data::Batch&, const std::vector<int64_t>&)>& f) {
  std::vector<int64_t> mine;
  for (int64_t i = o_.at.data; i < val_samples(); i += o_.grid.data) mine.push_back(i);
  for (size_t first = 0; first < mine.size(); first += static_cast<size_t>(o_.input.batch)) {
    const std::vector<int64_t> indices(
        mine.begin() + static_cast<std::ptrdiff_t>(first),
        mine.begin() + static_cast<std::ptrdiff_t>(
                           std::min(mine.size(), first + static_cast<size_t>(o_.input.batch))));
    f(read(val_, val_rows_, val_cols_, indices, 0, false), indices);
  }
}

uint64_t SlideInput::bytes_read() const {
  return data::process_read_bytes() - shared_->read_at_start;
}

uint64_t SlideInput::slide_bytes() const { return shared_->slide_bytes.load(); }

}  // namespace train
}  // namespace tessera
