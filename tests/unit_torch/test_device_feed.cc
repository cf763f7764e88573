// DeviceFeed: step s+1's batch is taken and its copy started as soon as step s has its own;
// each batch is made ready before the next copy starts; nothing is taken past the run's end.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "train/device/device_feed.h"

namespace tessera {
namespace train {
namespace {

// Batch s holds images filled with s; every call is logged.
class CountingInput : public StepInput {
 public:
  explicit CountingInput(std::vector<std::string>& log) : log_(log) {}
  int64_t num_classes() const override { return 2; }
  int64_t steps_per_epoch() const override { return 100; }
  std::string describe() const override { return "counting"; }
  data::Batch batch(int64_t step, int64_t end) override {
    log_.push_back("take " + std::to_string(step) + "<" + std::to_string(end));
    data::Batch b;
    b.images = torch::full({1, 3, 2, 2}, static_cast<float>(step));
    b.labels = torch::full({1}, step, torch::kLong);
    return b;
  }
  void finish() override {}
  double waited_seconds() const override { return 0; }

 private:
  std::vector<std::string>& log_;
};

class LoggingCopier : public DeviceCopier {
 public:
  explicit LoggingCopier(std::vector<std::string>& log) : log_(log) {}
  data::Batch start(const data::Batch& host) override {
    log_.push_back("start " + std::to_string(host.labels.item<int64_t>()));
    return host;
  }
  void ready(data::Batch& b) override {
    log_.push_back("ready " + std::to_string(b.labels.item<int64_t>()));
  }

 private:
  std::vector<std::string>& log_;
};

TEST(DeviceFeed, TheNextBatchIsQueuedAsEachStepGetsItsOwn) {
  std::vector<std::string> log;
  CountingInput input(log);
  DeviceFeed feed(input, std::make_unique<LoggingCopier>(log));
  for (int64_t s = 5; s < 8; ++s) {  // a resumed run: the first step is 5
    const data::Batch b = feed.batch(s, 8);
    EXPECT_EQ(b.images[0][2][1][1].item<float>(), static_cast<float>(s));
    log.push_back("step " + std::to_string(s));
  }
  const std::vector<std::string> expect = {
      "take 5<8", "start 5",  "ready 5", "take 6<8", "start 6", "step 5",   // 6 copies during 5
      "ready 6",  "take 7<8", "start 7", "step 6",   "ready 7", "step 7"};  // nothing past 7
  EXPECT_EQ(log, expect);
}

// The CPU's copier hands the tensors through; the CUDA one is checked by scripts/gpu_check.sh.
TEST(DeviceFeed, TheCpuCopierKeepsTheBatch) {
  std::unique_ptr<DeviceCopier> c = make_device_copier(torch::kCPU);
  data::Batch host;
  host.images = torch::rand({2, 3, 4, 4});
  host.masks = torch::zeros({2, 4, 4}, torch::kLong);
  data::Batch d = c->start(host);
  c->ready(d);
  EXPECT_TRUE(d.images.equal(host.images));
  EXPECT_TRUE(d.masks.equal(host.masks));
  EXPECT_FALSE(d.labels.defined());
}

TEST(DeviceFeed, PinnedBatchesHoldTheSameValues) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "pinned memory needs a CUDA libtorch and a GPU";
  data::Batch host;
  host.images = torch::rand({2, 3, 4, 4});
  host.labels = torch::arange(2);
  const data::Batch p = pinned_batch(host);
  EXPECT_TRUE(p.images.is_pinned());
  EXPECT_TRUE(p.images.equal(host.images));
  EXPECT_TRUE(p.labels.equal(host.labels));
  EXPECT_FALSE(p.masks.defined());
}

}  // namespace
}  // namespace train
}  // namespace tessera
