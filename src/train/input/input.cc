#include "train/input/input.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <sstream>

#include "common/error.h"
#include "data/reshuffle.h"
#include "data/sampler.h"
#include "tessera/torch.h"
#include "train/device/device_feed.h"

namespace tessera {
namespace train {
namespace {

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

data::Exchange world_exchange(const std::string& name) {
  data::Exchange ex;
  ex.rank = rank();
  ex.ranks = size();
  auto calls = std::make_shared<int64_t>(0);
  ex.alltoallv = [name, calls](const std::string& send, const std::vector<size_t>& counts) {
    torch::Tensor bytes = torch::empty({static_cast<int64_t>(send.size())}, torch::kUInt8);
    if (!send.empty()) std::memcpy(bytes.data_ptr(), send.data(), send.size());
    TensorHandle h = alltoall_async(bytes, name + "." + std::to_string((*calls)++), 0,
                                    std::vector<int64_t>(counts.begin(), counts.end()));
    const torch::Tensor got = synchronize(h).contiguous();
    return std::string(static_cast<const char*>(got.data_ptr()), static_cast<size_t>(got.numel()));
  };
  return ex;
}

TrainInput::TrainInput(const InputOptions& o) : o_(o) {
  validate(o);
  if (o.dist) {
    rank_ = rank();
    world_ = size();
  }
  if (o.data == "synthetic") {
    TESSERA_CHECK(!o.global_shuffle, "--global-shuffle needs a data set on disk (--data DIR)");
    segmentation_ = o.segmentation;
    num_classes_ = segmentation_ ? data::SyntheticShapes::kSegmentationClasses
                                 : data::SyntheticShapes::kClasses;
    synth_train_ = std::make_unique<data::SyntheticShapes>(o.train_size, o.image_size, o.seed);
    synth_val_ =
        std::make_unique<data::SyntheticShapes>(o.val_size, o.image_size, o.seed ^ 0x7e55e7a11ull);
    train_samples_ = o.train_size;
  } else {
    const data::Format format = data::parse_format(o.format);
    train_set_ = std::make_unique<data::DataSet>(data::open_dataset(o.data, format, "train"));
    val_set_ = std::make_unique<data::DataSet>(data::open_dataset(o.data, format, "val"));
    TESSERA_CHECK(
        format != data::Format::kFolder || val_set_->list.classes == train_set_->list.classes, "'",
        o.data, "/val' holds other class folders than '", o.data, "/train' (",
        val_set_->list.classes.size(), " against ", train_set_->list.classes.size(),
        "); they must be the same");
    segmentation_ = train_set_->segmentation;
    num_classes_ = std::max(train_set_->num_classes, val_set_->num_classes);
    train_set_->num_classes = val_set_->num_classes = num_classes_;
    train_samples_ = static_cast<int64_t>(train_set_->list.samples.size());
  }
  data::ShardPlan plan;
  plan.dataset_size = train_samples_;
  plan.ranks = world_;
  plan.batch = o.batch;
  steps_per_epoch_ = plan.steps_per_epoch();  // throws when one global batch does not fit
  if (train_set_) {
    std::vector<int64_t> shard =
        o.global_shuffle ? data::global_shuffle_shard(train_samples_, o.seed, 0, rank_, world_)
                         : data::strided_shard(train_samples_, rank_, world_);
    data::SourceOptions so;
    so.image_size = o.image_size;
    so.seed = o.seed;
    so.keep_decoded = o.keep_decoded;
    so.quiet = o.quiet;
    so.min_scale = o.min_scale;
    so.max_scale = o.max_scale;
    train_src_ = std::make_unique<data::SampleSource>(*train_set_, std::move(shard), so);
    so.train = false;
    const int64_t val_n = static_cast<int64_t>(val_set_->list.samples.size());
    // A val set smaller than the ranks leaves some ranks without val samples; they evaluate none.
    std::vector<int64_t> val_shard;
    for (int64_t i = rank_; i < val_n; i += world_) val_shard.push_back(i);
    val_src_ = std::make_unique<data::SampleSource>(*val_set_, std::move(val_shard), so);
    if (o.global_shuffle && o.dist) exchange_ = world_exchange("data.reshuffle");
  }
}

TrainInput::~TrainInput() = default;

std::string TrainInput::describe() const {
  std::ostringstream os;
  if (!train_set_) {
    os << "synthetic shapes (" << o_.train_size << " train, " << o_.val_size << " val samples, "
       << num_classes_ << " classes)";
  } else {
    os << data::format_name(train_set_->format) << " data set '" << o_.data << "' ("
       << train_samples_ << " train, " << val_set_->list.samples.size() << " val samples, "
       << num_classes_ << " classes), " << o_.workers << " workers, "
       << (o_.global_shuffle ? "global shuffle" : "shuffle within each rank's shard");
  }
  return os.str();
}

void TrainInput::begin_epoch(int64_t epoch, int64_t first, int64_t end) {
  const int64_t b = o_.batch;
  std::function<data::Batch(int64_t)> make;
  if (synth_train_) {
    data::ShardPlan plan;
    plan.dataset_size = train_samples_;
    plan.seed = o_.seed;
    plan.ranks = world_;
    plan.batch = b;
    auto order =
        std::make_shared<std::vector<int64_t>>(data::epoch_order(train_samples_, o_.seed, epoch));
    make = [this, plan, order](int64_t step) {
      return synth_train_->get(data::batch_indices(plan, *order, step, rank_));
    };
  } else {
    data::ShardedStore& store = train_src_->store();
    if (o_.global_shuffle && shard_epoch_ != epoch) {
      if (epoch_ < 0) {
        // A resume into a later epoch: nothing is in memory yet, so take that epoch's shard
        // straight from the files.
        store.reassign(data::global_shuffle_shard(train_samples_, o_.seed, epoch, rank_, world_),
                       {});
      } else if (exchange_) {
        data::global_reshuffle(*exchange_, store, o_.seed, epoch);
      } else {
        store.reassign(data::global_shuffle_shard(train_samples_, o_.seed, epoch, 0, 1),
                       store.take());
      }
      shard_epoch_ = epoch;
    }
    positions_.resize(store.size());
    if (o_.global_shuffle) {
      std::iota(positions_.begin(), positions_.end(), int64_t{0});  // the shard is in order
    } else {
      positions_ =
          data::shard_epoch_order(static_cast<int64_t>(store.size()), o_.seed, rank_, epoch);
    }
    const int64_t epoch_start = epoch * steps_per_epoch_;
    make = [this, epoch, epoch_start, b](int64_t step) {
      return train_src_->make_batch(positions_, static_cast<size_t>((step - epoch_start) * b),
                                    static_cast<size_t>(b), epoch);
    };
  }
  epoch_ = epoch;
  if (o_.pinned) make = [make](int64_t step) { return pinned_batch(make(step)); };  // workers pin
  pipe_ = std::make_unique<data::Prefetcher<data::Batch>>(make, o_.workers, o_.prefetch, first, end,
                                                          timeout_s());
}

data::Batch TrainInput::batch(int64_t step, int64_t end) {
  const int64_t epoch = step / steps_per_epoch_;
  if (epoch != epoch_) {
    if (epoch_ >= 0) close_epoch();
    begin_epoch(epoch, step, std::min(end, (epoch + 1) * steps_per_epoch_));
  }
  return pipe_->next();
}

double TrainInput::waited_seconds() const {
  return waited_before_ + (pipe_ ? pipe_->waited_seconds() : 0.0);
}

void TrainInput::close_epoch() {
  if (!pipe_) return;
  waited_before_ += pipe_->waited_seconds();
  pipe_.reset();  // joins the workers
  if (!train_src_) return;
  data::ShardedStore& store = train_src_->store();
  if (!first_epoch_closed_) {
    first_epoch_closed_ = true;
    store.load_all();
    torch::Tensor m = torch::tensor(
        {static_cast<int64_t>(store.memory_bytes()), static_cast<int64_t>(store.file_bytes_read())},
        torch::kLong);
    if (o_.dist) allreduce_(m, "data.memory", ReduceOp::kSum);
    std::ostringstream os;
    os << "rank " << rank_ << " holds " << store.size() << " samples in "
       << mib(static_cast<double>(store.memory_bytes())) << " ("
       << (o_.keep_decoded ? "decoded" : "encoded") << "); all ranks "
       << mib(static_cast<double>(m[0].item<int64_t>())) << " in memory, "
       << mib(static_cast<double>(m[1].item<int64_t>())) << " read from files";
    memory_report_ = os.str();
    read_at_epoch1_ = store.file_bytes_read();
    if (!o_.quiet && rank_ == 0) std::printf("data: %s\n", memory_report_.c_str());
  } else {
    bytes_after_first_ = store.file_bytes_read() - read_at_epoch1_;
  }

  // Pool the corrupt files every rank skipped.
  std::vector<data::CorruptSample> mine = train_src_->corrupt();
  std::vector<data::CorruptSample> all = mine;
  if (o_.dist) {
    std::string lines;
    for (const auto& c : mine) lines += std::to_string(c.index) + "\t" + c.reason + "\n";
    torch::Tensor t =
        torch::from_blob(lines.data(), {static_cast<int64_t>(lines.size())}, torch::kUInt8).clone();
    torch::Tensor g = allgather(t, "data.corrupt.e" + std::to_string(epoch_));
    std::istringstream in(std::string(reinterpret_cast<const char*>(g.data_ptr<uint8_t>()),
                                      static_cast<size_t>(g.numel())));
    all.clear();
    std::string line;
    while (std::getline(in, line)) {
      const size_t tab = line.find('\t');
      all.push_back({std::stoll(line.substr(0, tab)), line.substr(tab + 1)});
    }
    train_src_->mark_corrupt(all);
    all = train_src_->corrupt();  // distinct, by index
  }
  if (all.empty()) return;
  const double fraction = static_cast<double>(all.size()) / static_cast<double>(train_samples_);
  std::ostringstream list;
  for (const auto& c : all) list << "\n  " << c.reason;
  if (fraction > o_.max_corrupt) {
    std::ostringstream os;
    os << all.size() << " of the " << train_samples_ << " training samples (" << fraction * 100
       << "%) are corrupt, more than --max-corrupt " << o_.max_corrupt * 100
       << "% allows; fix or remove them, or raise --max-corrupt:" << list.str();
    throw InvalidArgument(os.str());
  }
  if (!o_.quiet && rank_ == 0) {
    std::printf("epoch %lld: %zu corrupt training samples skipped so far (%.2f%% of %lld):%s\n",
                static_cast<long long>(epoch_), all.size(), fraction * 100,
                static_cast<long long>(train_samples_), list.str().c_str());
    std::fflush(stdout);
  }
}

void TrainInput::finish() { close_epoch(); }

std::string TrainInput::memory_report() const { return memory_report_; }

void TrainInput::for_each_eval_batch(const std::function<void(const data::Batch&)>& f) {
  const int64_t b = o_.batch;
  if (synth_val_) {
    std::vector<int64_t> mine;
    for (int64_t i = rank_; i < synth_val_->size(); i += world_) mine.push_back(i);
    for (size_t begin = 0; begin < mine.size(); begin += static_cast<size_t>(b)) {
      const size_t end = std::min(mine.size(), begin + static_cast<size_t>(b));
      f(synth_val_->get(std::vector<int64_t>(mine.begin() + static_cast<long>(begin),
                                             mine.begin() + static_cast<long>(end))));
    }
    return;
  }
  const int64_t n = static_cast<int64_t>(val_src_->store().size());
  if (n == 0) return;
  auto positions = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(n));
  std::iota(positions->begin(), positions->end(), int64_t{0});
  const int64_t batches = (n + b - 1) / b;
  data::Prefetcher<data::Batch> pipe(
      [this, positions, b, n](int64_t k) {
        const int64_t begin = k * b;
        return val_src_->make_batch(*positions, static_cast<size_t>(begin),
                                    static_cast<size_t>(std::min(b, n - begin)), 0);
      },
      o_.workers, o_.prefetch, 0, batches, timeout_s());
  for (int64_t k = 0; k < batches; ++k) {
    data::Batch batch = pipe.next();
    if (batch.images.size(0) > 0) f(batch);
  }
}

}  // namespace train
}  // namespace tessera
