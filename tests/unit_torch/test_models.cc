// Models: parameter counts, names and shapes as torchvision's, output shapes, dilation.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "common/error.h"
#include "models/registry.h"
#include "models/state_dict.h"
#include "tune/model_gradients.h"

namespace tessera {
namespace models {
namespace {

int64_t count_parameters(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

std::map<std::string, std::vector<int64_t>> shapes(torch::nn::Module& m) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& kv : state_dict(m)) out[kv.first] = kv.second.sizes().vec();
  return out;
}

TEST(ResNet, ParameterCountsAreTorchvisions) {
  // torchvision.models.resnet18() / resnet50(): 11,689,512 and 25,557,032 parameters; their
  // state_dicts hold 122 and 320 entries (parameters and buffers).
  ModelSpec s;
  s.name = "resnet18";
  Model r18 = make_model(s);
  EXPECT_EQ(count_parameters(r18.module()), 11689512);
  EXPECT_EQ(state_dict(r18.module()).size(), 122u);
  s.name = "resnet50";
  Model r50 = make_model(s);
  EXPECT_EQ(count_parameters(r50.module()), 25557032);
  EXPECT_EQ(state_dict(r50.module()).size(), 320u);
}

// The benchmarks' libtorch-free list of ResNet-50's gradient sizes is the built model's.
TEST(ResNet, TheTuneListOfResNet50sParametersIsTheModels) {
  ModelSpec s;
  s.name = "resnet50";
  Model r50 = make_model(s);
  std::vector<size_t> built;
  for (const auto& p : r50.module().parameters()) built.push_back(static_cast<size_t>(p.numel()));
  EXPECT_EQ(tune::resnet50_parameter_elements(), built);
}

TEST(ResNet, NamesAndShapesAreTorchvisions) {
  ModelSpec s;
  s.name = "resnet50";
  Model m = make_model(s);
  auto sh = shapes(m.module());
  using V = std::vector<int64_t>;
  EXPECT_EQ(sh.at("conv1.weight"), (V{64, 3, 7, 7}));
  EXPECT_EQ(sh.at("bn1.running_var"), (V{64}));
  EXPECT_EQ(sh.at("bn1.num_batches_tracked"), (V{}));
  EXPECT_EQ(sh.at("layer1.0.conv1.weight"), (V{64, 64, 1, 1}));
  EXPECT_EQ(sh.at("layer1.0.downsample.0.weight"), (V{256, 64, 1, 1}));
  EXPECT_EQ(sh.at("layer1.0.downsample.1.running_mean"), (V{256}));
  EXPECT_EQ(sh.at("layer2.0.conv2.weight"), (V{128, 128, 3, 3}));
  EXPECT_EQ(sh.at("layer3.5.bn3.weight"), (V{1024}));
  EXPECT_EQ(sh.at("layer4.2.conv3.weight"), (V{2048, 512, 1, 1}));
  EXPECT_EQ(sh.at("fc.weight"), (V{1000, 2048}));
  EXPECT_EQ(sh.at("fc.bias"), (V{1000}));
  EXPECT_EQ(sh.count("layer4.3.conv1.weight"), 0u);
  s.name = "resnet18";
  Model r18 = make_model(s);
  auto s18 = shapes(r18.module());
  EXPECT_EQ(s18.at("layer2.0.downsample.0.weight"), (V{128, 64, 1, 1}));
  EXPECT_EQ(s18.at("layer4.1.conv2.weight"), (V{512, 512, 3, 3}));
  EXPECT_EQ(s18.count("layer1.0.downsample.0.weight"), 0u);
}

TEST(ResNet, ForwardShapes) {
  torch::NoGradGuard g;
  ModelSpec s;
  s.name = "resnet18";
  s.num_classes = 7;
  Model m = make_model(s);
  m.module().eval();
  EXPECT_EQ(m.forward(torch::randn({2, 3, 64, 64})).sizes(), (std::vector<int64_t>{2, 7}));
  EXPECT_EQ(m.task(), Task::kClassification);
}

TEST(DeepLab, OutputStrideByDilation) {
  torch::NoGradGuard g;
  for (int depth : {18, 50}) {
    for (int os : {16, 8}) {
      ResNetOptions o;
      o.depth = depth;
      o.num_classes = 0;
      o.replace_stride_with_dilation = {false, os == 8, true};
      ResNet r(o);
      r->eval();
      ResNetFeatures f = r->features(torch::randn({1, 3, 64, 64}));
      EXPECT_EQ(f.high.size(2), 64 / os) << depth << " " << os;
      EXPECT_EQ(f.low.size(2), 16);
      EXPECT_EQ(f.high.size(1), depth == 18 ? 512 : 2048);
      EXPECT_EQ(f.low.size(1), depth == 18 ? 64 : 256);
    }
  }
}

TEST(DeepLab, LogitsAtInputResolutionAndBackboneNames) {
  torch::NoGradGuard g;
  for (int os : {16, 8}) {
    ModelSpec s;
    s.name = "deeplabv3plus_resnet18";
    s.num_classes = 5;
    s.output_stride = os;
    Model m = make_model(s);
    m.module().eval();
    EXPECT_EQ(m.forward(torch::randn({2, 3, 48, 80})).sizes(),
              (std::vector<int64_t>{2, 5, 48, 80}));
    auto sh = shapes(m.module());
    EXPECT_EQ(sh.at("backbone.conv1.weight"), (std::vector<int64_t>{64, 3, 7, 7}));
    EXPECT_EQ(sh.count("backbone.fc.weight"), 0u);
    EXPECT_EQ(sh.at("aspp.convs.0.0.weight"), (std::vector<int64_t>{256, 512, 1, 1}));
    EXPECT_EQ(sh.at("aspp.convs.3.0.weight"), (std::vector<int64_t>{256, 512, 3, 3}));
    EXPECT_EQ(sh.at("aspp.project.0.weight"), (std::vector<int64_t>{256, 1280, 1, 1}));
    EXPECT_EQ(sh.at("decoder.reduce.0.weight"), (std::vector<int64_t>{48, 64, 1, 1}));
    EXPECT_EQ(sh.at("decoder.fuse.0.0.weight"), (std::vector<int64_t>{256, 304, 3, 3}));
    EXPECT_EQ(sh.at("classifier.weight"), (std::vector<int64_t>{5, 256, 1, 1}));
  }
  EXPECT_EQ(aspp_rates(16), (std::array<int64_t, 3>{6, 12, 18}));
  EXPECT_EQ(aspp_rates(8), (std::array<int64_t, 3>{12, 24, 36}));
  EXPECT_THROW(aspp_rates(32), InvalidArgument);
}

TEST(Registry, UnknownModelNamesTheAcceptedOnes) {
  ModelSpec s;
  s.name = "vgg16";
  try {
    make_model(s);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown model 'vgg16'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("deeplabv3plus_resnet50"), std::string::npos);
  }
}

TEST(StateDict, RoundTripThroughPyTorchsFormat) {
  ModelSpec s;
  s.name = "resnet18";
  s.num_classes = 10;
  Model a = make_model(s);
  const std::string path = ::testing::TempDir() + "/tessera_r18.pt";
  write_state_dict(state_dict(a.module()), path);
  torch::manual_seed(123);  // b starts from other weights
  Model b = make_model(s);
  LoadReport r = load_state_dict(b.module(), read_state_dict(path), path);
  EXPECT_EQ(r.loaded.size(), 122u);
  EXPECT_TRUE(r.missing.empty());
  EXPECT_TRUE(r.unused.empty());
  auto sa = state_dict(a.module()), sb = state_dict(b.module());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_TRUE(torch::equal(sa[i].second, sb[i].second)) << sa[i].first;
  }
}

TEST(StateDict, BackboneTakesAClassifiersWeightsAndShapesMustFit) {
  ModelSpec s;
  s.name = "resnet18";
  Model cls = make_model(s);
  const std::string path = ::testing::TempDir() + "/tessera_r18_cls.pt";
  write_state_dict(state_dict(cls.module()), path);
  s.name = "deeplabv3plus_resnet18";
  s.num_classes = 4;
  Model seg = make_model(s);
  LoadReport r = load_state_dict(seg.module(), read_state_dict(path), path);
  EXPECT_EQ(r.loaded.size(), 120u);  // all but fc.weight and fc.bias
  EXPECT_EQ(r.unused, (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_FALSE(r.missing.empty());  // the head keeps its initialisation
  EXPECT_TRUE(torch::equal(cls.module().named_parameters()["layer3.1.conv2.weight"],
                           seg.module().named_parameters()["backbone.layer3.1.conv2.weight"]));
  // A 10-class fc does not fit a 1000-class one: an error naming the file and both shapes.
  s.name = "resnet18";
  s.num_classes = 10;
  Model ten = make_model(s);
  try {
    load_state_dict(ten.module(), read_state_dict(path), path);
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find("fc.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("[1000, 512]"), std::string::npos) << m;
  }
}

TEST(StateDict, MissingOrForeignFilesAreClearErrors) {
  EXPECT_THROW(read_state_dict("/nonexistent/weights.pt"), InvalidArgument);
  const std::string path = ::testing::TempDir() + "/tessera_not_a_zip.pt";
  {
    std::ofstream f(path);
    f << "hello";
  }
  try {
    read_state_dict(path);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("not a PyTorch zip archive"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace models
}  // namespace tessera
