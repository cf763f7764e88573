// --memory-format: parse, convert a model in place, convert a batch.
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "train/device/memory_layout.h"

namespace tessera {
namespace train {
namespace {

TEST(MemoryLayout, NamesAndTheErrorListingThem) {
  EXPECT_EQ(parse_memory_format("contiguous"), MemoryFormat::kContiguous);
  EXPECT_EQ(parse_memory_format("channels-last"), MemoryFormat::kChannelsLast);
  EXPECT_EQ(parse_memory_format("channels_last"), MemoryFormat::kChannelsLast);
  try {
    parse_memory_format("nhwc");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("accepted: contiguous (NCHW), channels-last (NHWC)"),
              std::string::npos)
        << e.what();
  }
}

// The 4-d weights change layout, not identity or value; the rest stays as it was; and back.
TEST(MemoryLayout, AModelChangesLayoutInPlace) {
  torch::nn::Sequential net(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3)),
                            torch::nn::BatchNorm2d(8));
  torch::Tensor w = net->named_parameters()["0.weight"];
  const torch::Tensor before = w.detach().clone();
  const void* identity = w.unsafeGetTensorImpl();
  to_memory_format(*net, MemoryFormat::kChannelsLast);
  torch::Tensor after = net->named_parameters()["0.weight"];
  EXPECT_EQ(after.unsafeGetTensorImpl(), identity);
  EXPECT_TRUE(after.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_FALSE(after.is_contiguous());
  EXPECT_TRUE(after.equal(before));
  EXPECT_TRUE(net->named_parameters()["1.weight"].is_contiguous());  // 1-d
  // Gradients follow the parameter's layout.
  net->forward(torch::randn({2, 3, 9, 9})).sum().backward();
  EXPECT_TRUE(after.grad().is_contiguous(at::MemoryFormat::ChannelsLast));
  to_memory_format(*net, MemoryFormat::kContiguous);
  EXPECT_TRUE(w.is_contiguous());
  EXPECT_TRUE(w.equal(before));
}

TEST(MemoryLayout, BatchesAreConvertedOnlyWhenFourDimensional) {
  const torch::Tensor x = torch::randn({2, 3, 4, 5});
  const torch::Tensor nhwc = in_memory_format(x, MemoryFormat::kChannelsLast);
  EXPECT_TRUE(nhwc.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(nhwc.equal(x));
  EXPECT_TRUE(in_memory_format(nhwc, MemoryFormat::kContiguous).is_contiguous());
  const torch::Tensor labels = torch::arange(4);
  EXPECT_TRUE(in_memory_format(labels, MemoryFormat::kChannelsLast).is_same(labels));
}

}  // namespace
}  // namespace train
}  // namespace tessera
