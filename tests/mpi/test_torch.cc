// The libtorch API under mpirun: tensor collectives against closed forms, parameter and
// optimizer broadcast, the DistributedOptimizer (average, accumulation, groups, compression,
// unused parameters, the too-many-passes error) and SyncBatchNorm against single-process
// BatchNorm on the concatenated batch.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "comm/communicator.h"
#include "common/error.h"
#include "engine/engine.h"
#include "mpi/torch_test_util.h"
#include "tessera/torch.h"
#include "torch/context.h"

namespace tessera {
namespace {

using testing::TorchTest;

// f64 comparisons with a one-process reference that adds in another order. Measured at 1 to 4
// ranks (the "[ tolerance ]" lines): at most 2.1e-15 (momentum, 3 ranks); about 140 times that.
constexpr double kF64Tolerance = 3e-13;

const std::vector<torch::ScalarType> kTypes = {torch::kFloat,    torch::kDouble, torch::kHalf,
                                               torch::kBFloat16, torch::kInt,    torch::kLong,
                                               torch::kByte};

TEST_F(TorchTest, AllreduceEveryDtypeAgainstClosedForm) {
  for (torch::ScalarType t : kTypes) {
    // Element i on rank r is (r + 1) + (i % 5): the sum over ranks is n(n+1)/2 + n (i % 5).
    torch::Tensor x = (torch::arange(7) % 5 + (r() + 1)).to(t).reshape({7, 1});
    torch::Tensor expect = (torch::arange(7) % 5 * n() + n() * (n() + 1) / 2).reshape({7, 1});
    torch::Tensor s = allreduce(x, std::string("sum.") + c10::toString(t), ReduceOp::kSum);
    EXPECT_EQ(s.scalar_type(), t);
    EXPECT_TRUE(torch::equal(s.to(torch::kLong), expect)) << c10::toString(t);
    if (torch::isFloatingType(t)) {
      torch::Tensor a = allreduce(x, std::string("avg.") + c10::toString(t));
      // (n + 1) / 2 + i % 5: halves and small integers, exact in every floating dtype.
      EXPECT_TRUE(torch::equal(a.to(torch::kDouble), expect.to(torch::kDouble) / n()))
          << c10::toString(t) << ": " << a.reshape({-1});
    }
  }
}

TEST_F(TorchTest, InPlaceAsyncNonContiguousAndScaled) {
  torch::Tensor base = torch::arange(12, torch::kFloat).reshape({3, 4}) * (r() + 1);
  torch::Tensor t = base.t();  // not contiguous: reduced through a copy, written back
  ASSERT_FALSE(t.is_contiguous());
  TensorHandle h = allreduce_async_(t, "inplace.t", ReduceOp::kSum);
  synchronize(h);
  const double k = n() * (n() + 1) / 2.0;
  EXPECT_TRUE(torch::equal(t, torch::arange(12, torch::kFloat).reshape({3, 4}).t() * k));
  torch::Tensor y = allreduce(torch::ones({5}), "scaled", ReduceOp::kSum, 2.0, 0.5);
  EXPECT_TRUE(torch::equal(y, torch::full({5}, static_cast<float>(n()))));
}

// A channels-last tensor (a ResNet's gradients under channels-last training) is reduced in its
// own memory order: no copy to NCHW and back, and an out-of-place result keeps the layout.
TEST_F(TorchTest, ChannelsLastIsReducedInItsOwnLayout) {
  const auto cl = torch::MemoryFormat::ChannelsLast;
  torch::Tensor x = (torch::arange(2 * 3 * 4 * 5, torch::kDouble).reshape({2, 3, 4, 5}) * (r() + 1))
                        .contiguous(cl);
  ASSERT_FALSE(x.is_contiguous());
  const torch::Tensor want = x * (n() + 1) / 2.0 * n() / (r() + 1);
  torch::Tensor y = allreduce(x, "cl.out", ReduceOp::kSum);
  EXPECT_TRUE(y.is_contiguous(cl));
  EXPECT_TRUE(torch::equal(y, want));
  void* before = x.data_ptr();
  allreduce_(x, "cl.in", ReduceOp::kSum);
  EXPECT_EQ(x.data_ptr(), before);
  EXPECT_TRUE(x.is_contiguous(cl));
  EXPECT_TRUE(torch::equal(x, want));
  torch::Tensor b = broadcast(x * (r() + 1), 0, "cl.bcast");
  EXPECT_TRUE(b.is_contiguous(cl));
  EXPECT_TRUE(torch::equal(b, want));
}

// Ranks whose tensors of one name differ in memory layout would pair unrelated elements: an
// error on every rank naming the tensor and both layouts.
TEST_F(TorchTest, LayoutsThatDifferAcrossRanksFailOnEveryRank) {
  if (n() < 2) GTEST_SKIP() << "needs 2 ranks";
  torch::Tensor x = torch::ones({2, 3, 3, 3});  // square: the shapes alone would agree
  if (r() == 0) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
  try {
    allreduce(x, "cl.mixed", ReduceOp::kSum);
    FAIL() << "no error";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'cl.mixed'"), std::string::npos) << what;
    EXPECT_NE(what.find("memory layout"), std::string::npos) << what;
  }
}

TEST_F(TorchTest, GroupedAllreduce) {
  std::vector<torch::Tensor> ts = {torch::full({3}, r() + 1.0), torch::full({2, 2}, 2.0 * r()),
                                   torch::full({1}, 1.0)};
  auto out = grouped_allreduce(ts, "grouped", ReduceOp::kSum);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(torch::equal(out[0], torch::full({3}, n() * (n() + 1) / 2.0)));
  EXPECT_TRUE(torch::equal(out[1], torch::full({2, 2}, 1.0 * n() * (n() - 1))));
  EXPECT_TRUE(torch::equal(out[2], torch::full({1}, 1.0 * n())));
}

TEST_F(TorchTest, AllgatherUnevenFirstDimension) {
  // Rank r contributes r + 1 rows filled with r.
  torch::Tensor x = torch::full({r() + 1, 2}, static_cast<double>(r()), torch::kDouble);
  torch::Tensor g = allgather(x, "gather");
  ASSERT_EQ(g.size(0), n() * (n() + 1) / 2);
  int64_t row = 0;
  for (int k = 0; k < n(); ++k) {
    for (int j = 0; j <= k; ++j, ++row) {
      EXPECT_EQ(g[row][0].item<double>(), k);
      EXPECT_EQ(g[row][1].item<double>(), k);
    }
  }
}

TEST_F(TorchTest, BroadcastAndAlltoall) {
  const int root = n() - 1;
  torch::Tensor x = torch::full({4}, static_cast<int64_t>(r() * 10), torch::kLong);
  EXPECT_TRUE(torch::equal(broadcast(x, root, "bcast"), torch::full({4}, int64_t{root * 10})));
  EXPECT_EQ(x[0].item<int64_t>(), r() * 10);  // out of place
  broadcast_(x, 0, "bcast_");
  EXPECT_TRUE(torch::equal(x, torch::zeros({4}, torch::kLong)));
  // Block j of rank r holds 100 r + j; rank r receives block r of every rank k: 100 k + r.
  torch::Tensor a = (torch::arange(n()) + 100 * r()).to(torch::kInt).reshape({n(), 1});
  torch::Tensor b = alltoall(a, "a2a");
  for (int k = 0; k < n(); ++k) EXPECT_EQ(b[k][0].item<int>(), 100 * k + r());
}

TEST_F(TorchTest, BadInputAndDisagreementAreErrorsOnEveryRank) {
  try {
    allreduce(torch::ones({2}, torch::kComplexFloat), "complex");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("accepted: uint8, int8, int16"), std::string::npos);
  }
  // bool travels as bytes and reduces logically (Horovod takes bool tensors): Sum is "or".
  const torch::Tensor flags = torch::tensor({r() == 0, false});
  EXPECT_TRUE(torch::equal(allreduce(flags, "bool", ReduceOp::kSum), torch::tensor({true, false})));
  EXPECT_TRUE(
      torch::equal(allreduce(flags, "bool.and", ReduceOp::kMin), torch::tensor({n() == 1, false})));
  const torch::Tensor gathered = allgather(flags, "bool.gather");  // rank 0's first
  EXPECT_EQ(gathered.scalar_type(), torch::kBool);
  EXPECT_TRUE(torch::equal(gathered.slice(0, 0, 2), torch::tensor({true, false})));
  EXPECT_THROW(allreduce(flags, "bool.avg"), InvalidArgument);
  if (n() < 2) return;
  // Rank 0 sends 3 elements, the others 4: every rank fails naming the tensor.
  try {
    allreduce(torch::ones({r() == 0 ? 3 : 4}), "disagree");
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'disagree'"), std::string::npos) << m;
    EXPECT_NE(m.find("shape"), std::string::npos) << m;
  }
}

TEST_F(TorchTest, BroadcastParametersAndOptimizerState) {
  torch::manual_seed(100 + r());  // every rank starts elsewhere
  torch::nn::Sequential net(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3));
  net->train();
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  if (r() == 0) {  // only the root has momentum buffers and a changed rate
    net->forward(torch::randn({5, 4})).sum().backward();
    sgd.step();
    static_cast<torch::optim::SGDOptions&>(sgd.param_groups()[0].options()).lr(0.25);
  }
  broadcast_parameters(*net, 0);
  broadcast_optimizer_state(sgd, 0);
  for (const auto& kv : net->named_parameters()) {
    torch::Tensor all = allgather(kv.value().detach().unsqueeze(0), "check." + kv.key());
    for (int k = 1; k < n(); ++k) EXPECT_TRUE(torch::equal(all[k], all[0])) << kv.key();
  }
  for (const auto& kv : net->named_buffers()) {
    torch::Tensor all = allgather(kv.value().unsqueeze(0).to(torch::kDouble), "checkb." + kv.key());
    for (int k = 1; k < n(); ++k) EXPECT_TRUE(torch::equal(all[k], all[0])) << kv.key();
  }
  EXPECT_DOUBLE_EQ(static_cast<torch::optim::SGDOptions&>(sgd.param_groups()[0].options()).lr(),
                   0.25);
  // The next step moves every replica identically (momentum buffers came along).
  torch::manual_seed(7);
  net->zero_grad();
  net->forward(torch::randn({5, 4})).sum().backward();
  sgd.step();
  torch::Tensor w = net->named_parameters()["0.weight"].detach().unsqueeze(0);
  torch::Tensor all = allgather(w, "check.after");
  for (int k = 1; k < n(); ++k) EXPECT_TRUE(torch::equal(all[k], all[0]));
}

// A linear model y = x W^T; rank r's data is a fixed function of r, so the test can compute
// every rank's gradient itself and compare the DistributedOptimizer's result to the average.
struct Linear {
  torch::nn::Linear fc{nullptr};
  torch::nn::Linear unused{nullptr};
  torch::nn::Sequential net{nullptr};
  // In f64 by default, so comparisons with the reference measure the arithmetic, not rounding.
  explicit Linear(torch::Dtype dtype = torch::kDouble) {
    torch::manual_seed(3);
    fc = torch::nn::Linear(torch::nn::LinearOptions(6, 2).bias(true));
    unused = torch::nn::Linear(2, 2);  // never in the forward
    net = torch::nn::Sequential();
    net->push_back("fc", fc);
    net->push_back("unused", unused);
    net->to(dtype);
  }
  static torch::Tensor data(int rank, int pass) {
    return torch::arange(24, torch::kFloat).reshape({4, 6}) / 10 + rank + 0.5 * pass;
  }
  torch::Tensor loss(const torch::Tensor& x) {
    const torch::Tensor y = fc->forward(x.to(fc->weight.scalar_type()));
    return (y * y).sum();
  }
  // The gradient of fc.weight that one rank computes over `passes` passes.
  torch::Tensor local_grad(int rank, int passes) {
    torch::Tensor g = torch::zeros_like(fc->weight);
    for (int p = 0; p < passes; ++p) {
      fc->zero_grad();
      loss(data(rank, p)).backward();
      g += fc->weight.grad();
    }
    fc->zero_grad();
    return g;
  }
};

TEST_F(TorchTest, DistributedOptimizerAveragesAccumulatesAndGroups) {
  // f64, summed in another order than the reference's. Measured at 1 to 4 ranks: at most 1.6e-16
  // here, 2.1e-15 in the f64 tests below; kF64Tolerance is over 100 times the larger.
  testing::Tolerance exact("DistributedOptimizer average, f64", kF64Tolerance);
  // fp16 on the wire: each rank's gradient and the sum are rounded to 11 bits, which bounds the
  // error by 2 x 2^-11 = 1e-3 of the largest value (measured: at most 7.1e-4 at 1 to 4 ranks).
  testing::Tolerance fp16("DistributedOptimizer average, fp16 compression", 1e-3);
  for (int passes : {1, 2}) {
    for (int groups : {0, 1, 2}) {
      for (Compression c : {Compression::kNone, Compression::kFloat16}) {
        // fp16 on the wire compresses f32 gradients (as in training); f64 otherwise.
        Linear m(c == Compression::kNone ? torch::kDouble : torch::kFloat);
        torch::Tensor expect = torch::zeros_like(m.fc->weight);
        for (int k = 0; k < n(); ++k) expect += m.local_grad(k, passes);
        expect /= n();
        torch::optim::SGD sgd(m.net->parameters(), torch::optim::SGDOptions(1.0));
        DistributedOptions o;
        o.backward_passes_per_step = passes;
        o.groups = groups;
        o.compression = c;
        DistributedOptimizer opt(sgd, m.net->named_parameters(), o);
        const torch::Tensor before = m.fc->weight.detach().clone();
        opt.zero_grad();
        for (int p = 0; p < passes; ++p) m.loss(Linear::data(r(), p)).backward();
        opt.synchronize();
        testing::Tolerance& close = c == Compression::kNone ? exact : fp16;
        EXPECT_TRUE(close(m.fc->weight.grad(), expect))
            << "passes " << passes << " groups " << groups;
        // The unused layer got zeros (reduced like the rest, so no rank waits for it).
        EXPECT_TRUE(torch::equal(m.unused->weight.grad(), torch::zeros_like(m.unused->weight)));
        sgd.step();
        // SGD with lr 1 subtracts the averaged gradient: the same arithmetic, the same bits.
        EXPECT_TRUE(torch::equal(m.fc->weight.detach(), before - m.fc->weight.grad()));
      }
    }
  }
}

TEST_F(TorchTest, DistributedOptimizerStepAfterStepMatchesTheAverage) {
  // Several steps with momentum (the second and later through the response cache), against
  // one process that averages every rank's gradients itself.
  Linear m, ref;
  torch::optim::SGD sgd(m.net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  torch::optim::SGD sgd_ref(ref.net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  DistributedOptions o;
  o.prefix = "multistep.";
  DistributedOptimizer opt(sgd, m.net->named_parameters(), o);
  testing::Tolerance close("DistributedOptimizer with momentum, 4 steps, f64", kF64Tolerance);
  for (int step = 0; step < 4; ++step) {
    torch::Tensor w = torch::zeros_like(ref.fc->weight), b = torch::zeros_like(ref.fc->bias);
    for (int k = 0; k < n(); ++k) {
      sgd_ref.zero_grad();
      ref.loss(Linear::data(k, 0)).backward();
      w += ref.fc->weight.grad() / n();
      b += ref.fc->bias.grad() / n();
    }
    sgd_ref.zero_grad();
    ref.fc->weight.mutable_grad() = w;
    ref.fc->bias.mutable_grad() = b;
    sgd_ref.step();
    opt.zero_grad();
    m.loss(Linear::data(r(), 0)).backward();
    opt.step();
    EXPECT_TRUE(close(m.fc->weight, ref.fc->weight)) << "step " << step;
    EXPECT_TRUE(close(m.fc->bias, ref.fc->bias)) << "step " << step;
  }
}

// synchronize() to inspect the gradients, then step(): reduced once (a sum reduced twice would
// be n times too large), as Horovod's skip_synchronize; zero_grad() drops an inspected step.
TEST_F(TorchTest, StepAfterTheCallersSynchronizeDoesNotReduceAgain) {
  Linear m(torch::kDouble);
  torch::Tensor sum = torch::zeros_like(m.fc->weight);  // before the hooks exist
  for (int k = 0; k < n(); ++k) sum += m.local_grad(k, 1);
  torch::optim::SGD sgd(m.net->parameters(), torch::optim::SGDOptions(1.0));
  DistributedOptions o;
  o.op = ReduceOp::kSum;
  o.prefix = "inspect.";
  DistributedOptimizer opt(sgd, m.net->named_parameters(), o);
  for (int round = 0; round < 2; ++round) {  // the second: after a dropped step
    const torch::Tensor before = m.fc->weight.detach().clone();
    opt.zero_grad();
    m.loss(Linear::data(r(), 0)).backward();
    opt.synchronize();
    EXPECT_LT(testing::relative_difference(m.fc->weight.grad(), sum), kF64Tolerance);
    if (round == 0) {
      opt.zero_grad();  // dropped: no step
      continue;
    }
    opt.step();
    EXPECT_LT(testing::relative_difference(m.fc->weight.detach(), before - sum), kF64Tolerance);
  }
}

// Module::to re-makes a parameter's gradient accumulator when its device or dtype changes; the
// hook on the old one would never run again.
TEST_F(TorchTest, AModelMovedAfterTheOptimizerWasMadeIsAClearError) {
  Linear m(torch::kFloat);
  torch::optim::SGD sgd(m.net->parameters(), torch::optim::SGDOptions(0.1));
  DistributedOptions o;
  o.prefix = "moved.";
  DistributedOptimizer opt(sgd, m.net->named_parameters(), o);
  m.net->to(torch::kDouble);
  m.loss(Linear::data(r(), 0)).backward();
  try {
    opt.step();
    FAIL() << "a step over detached hooks must fail";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'fc.weight' changed device or dtype"), std::string::npos)
        << e.what();
  }
}

TEST_F(TorchTest, MoreBackwardPassesThanDeclaredIsAClearError) {
  Linear m;
  torch::optim::SGD sgd(m.net->parameters(), torch::optim::SGDOptions(0.1));
  DistributedOptions o;
  o.backward_passes_per_step = 1;
  DistributedOptimizer opt(sgd, m.net->named_parameters(), o);
  m.loss(Linear::data(r(), 0)).backward();
  try {
    m.loss(Linear::data(r(), 1)).backward();
    FAIL() << "a second backward before step() must fail";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("backward_passes_per_step is 1"), std::string::npos)
        << e.what();
  }
  opt.synchronize();  // what was enqueued completes; the optimizer stays usable
  opt.zero_grad();
  m.loss(Linear::data(r(), 0)).backward();
  opt.step();
}

TEST_F(TorchTest, GradientHooksFireDuringBackward) {
  // The last layer's gradient allreduce must run while backward is still going: the hook on
  // the input's gradient (computed after every parameter gradient of "last") blocks backward
  // until the engine has completed a tensor. Were allreduces enqueued only at step(), nothing
  // would complete and the wait would run out.
  torch::manual_seed(1);
  torch::nn::Linear first(8, 8), last(8, 2);
  torch::nn::Sequential net;
  net->push_back("first", first);
  net->push_back("last", last);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
  DistributedOptions o;
  o.prefix = "overlap.";
  DistributedOptimizer opt(sgd, net->named_parameters(), o);
  torch::Tensor hidden;
  const uint64_t before = global_engine().stats().tensors_done;
  bool completed_during_backward = false;
  torch::Tensor x = torch::randn({4, 8});
  hidden = torch::relu(first->forward(x));
  hidden.register_hook([&](torch::Tensor g) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      if (global_engine().stats().tensors_done > before) {
        completed_during_backward = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return g;
  });
  last->forward(hidden).sum().backward();
  EXPECT_TRUE(completed_during_backward);
  opt.step();
}

TEST_F(TorchTest, SyncBatchNormMatchesBatchNormOnTheConcatenatedBatch) {
  // Rank r holds r + 1 samples (unequal local batches); the reference concatenates them all.
  const int64_t c = 3;
  torch::manual_seed(11);
  std::vector<torch::Tensor> parts;
  for (int k = 0; k < n(); ++k) parts.push_back(torch::randn({k + 1, c, 4, 5}, torch::kDouble));
  torch::Tensor cotangent_all = torch::randn({n() * (n() + 1) / 2, c, 4, 5}, torch::kDouble);
  torch::Tensor full = torch::cat(parts).set_requires_grad(true);
  torch::Tensor w_ref = torch::tensor({1.5, 0.5, -1.0}, torch::kDouble).set_requires_grad(true);
  torch::Tensor b_ref = torch::tensor({0.1, 0.2, 0.3}, torch::kDouble).set_requires_grad(true);
  torch::Tensor rm = torch::zeros({c}, torch::kDouble), rv = torch::ones({c}, torch::kDouble);
  torch::Tensor y_ref = torch::batch_norm(full, w_ref, b_ref, rm, rv, true, 0.1, 1e-5, false);
  (y_ref * cotangent_all).sum().backward();

  const int64_t offset = r() * (r() + 1) / 2, mine = r() + 1;
  BatchNormOptions opts;
  opts.num_features = c;
  opts.sync = true;
  opts.name = "test.syncbn";
  BatchNorm2d bn(opts);
  bn->to(torch::kDouble);
  {
    torch::NoGradGuard g;
    bn->weight.copy_(w_ref.detach());
    bn->bias.copy_(b_ref.detach());
  }
  torch::Tensor x = parts[static_cast<size_t>(r())].clone().set_requires_grad(true);
  torch::Tensor y = bn->forward(x);
  (y * cotangent_all.narrow(0, offset, mine)).sum().backward();
  EXPECT_TRUE(torch::allclose(y, y_ref.narrow(0, offset, mine), 1e-10, 1e-10));
  EXPECT_TRUE(torch::allclose(x.grad(), full.grad().narrow(0, offset, mine), 1e-10, 1e-10));
  // Parameter gradients are each rank's share: their sum is the reference gradient.
  EXPECT_TRUE(torch::allclose(allreduce(bn->weight.grad(), "wsum", ReduceOp::kSum), w_ref.grad(),
                              1e-10, 1e-10));
  EXPECT_TRUE(torch::allclose(allreduce(bn->bias.grad(), "bsum", ReduceOp::kSum), b_ref.grad(),
                              1e-10, 1e-10));
  EXPECT_TRUE(torch::allclose(bn->running_mean, rm, 1e-10, 1e-10));
  EXPECT_TRUE(torch::allclose(bn->running_var, rv, 1e-10, 1e-10));
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 1);
}

// conv - BatchNorm - ReLU - pool - linear, trained a few steps: N ranks with SyncBatchNorm and
// the DistributedOptimizer against one process with BatchNorm on the concatenated batch.
struct TinyNet : torch::nn::Module {
  explicit TinyNet(bool sync) {
    torch::manual_seed(5);
    conv =
        register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3).bias(false)));
    BatchNormOptions o;
    o.num_features = 4;
    o.sync = sync;
    o.name = "tiny.bn";
    bn = register_module("bn", BatchNorm2d(o));
    fc = register_module("fc", torch::nn::Linear(4, 2));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return fc(torch::relu(bn(conv(x))).mean({2, 3}));
  }
  torch::nn::Conv2d conv{nullptr};
  BatchNorm2d bn{nullptr};
  torch::nn::Linear fc{nullptr};
};

TEST_F(TorchTest, SyncBatchNormTrainingMatchesOneProcessStepByStep) {
  const int64_t b = 2;
  auto batch = [&](int step, int64_t rank_lo, int64_t count) {
    torch::manual_seed(1000 + step);
    torch::Tensor all = torch::randn({b * n(), 3, 6, 6}, torch::kDouble);
    return all.narrow(0, rank_lo * b, count);
  };
  auto target = [&](int step) {
    torch::manual_seed(2000 + step);
    return torch::randn({b * n(), 2}, torch::kDouble);
  };
  auto dist = std::make_shared<TinyNet>(true);
  auto ref = std::make_shared<TinyNet>(false);
  dist->to(torch::kDouble);
  ref->to(torch::kDouble);
  torch::optim::SGD sgd(dist->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD sgd_ref(ref->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  DistributedOptions o;
  o.prefix = "tiny.";
  DistributedOptimizer opt(sgd, dist->named_parameters(), o);
  testing::Tolerance close("SyncBatchNorm training, 4 steps, f64", kF64Tolerance);
  for (int step = 0; step < 4; ++step) {
    opt.zero_grad();
    torch::Tensor y = dist->forward(batch(step, r(), b));
    torch::nn::functional::mse_loss(y, target(step).narrow(0, r() * b, b)).backward();
    opt.step();
    sgd_ref.zero_grad();
    torch::nn::functional::mse_loss(ref->forward(batch(step, 0, b * n())), target(step)).backward();
    sgd_ref.step();
    auto pd = dist->named_parameters(), pr = ref->named_parameters();
    for (const auto& kv : pd) {
      EXPECT_TRUE(close(kv.value(), pr[kv.key()])) << "step " << step << " " << kv.key() << "\n"
                                                   << kv.value() << pr[kv.key()];
    }
  }
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

using testing::TorchTest;

// Disagreements between ranks (docs/reliability.md): each is an error on every rank that names
// what differs and the ranks on each side.

TEST_F(TorchTest, DifferentModelsFailOnEveryRankNamingTheParameterAndTheRanks) {
  if (n() < 2) GTEST_SKIP() << "needs 2 ranks";
  const bool other = r() == n() - 1;
  torch::nn::Sequential net(torch::nn::Linear(6, other ? 3 : 2));
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
  std::string lows;
  for (int q = 0; q + 1 < n(); ++q) lows += (q ? ", " : "") + std::to_string(q);
  const std::string expect = "'0.weight' is [2, 6] Float on rank" +
                             std::string(n() > 2 ? "s " : " ") + lows +
                             " but [3, 6] Float on rank " + std::to_string(n() - 1);
  try {
    DistributedOptimizer opt(sgd, net->named_parameters());
    FAIL() << "different models must not make an optimizer";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
  }
  try {
    broadcast_parameters(*net, 0);
    FAIL() << "different models must not broadcast";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
  }
  // A missing parameter (one rank's layer has no bias) names it too.
  torch::nn::Sequential nobias(torch::nn::Linear(torch::nn::LinearOptions(6, 2).bias(!other)));
  torch::optim::SGD sgd2(nobias->parameters(), torch::optim::SGDOptions(0.1));
  try {
    DistributedOptimizer opt(sgd2, nobias->named_parameters());
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'0.bias' is on rank"), std::string::npos) << e.what();
  }
  verify_across_ranks("a test's description", "same: 1\n");  // agreeing ranks pass
}

TEST_F(TorchTest, ARankThatSkippedAStepFailsEveryRanksNextStepNamingTheRanks) {
  if (n() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int skipper = n() - 1;
  Linear m;
  torch::optim::SGD sgd(m.net->parameters(), torch::optim::SGDOptions(0.01));
  DistributedOptions o;
  o.prefix = "skip.";
  std::string error;
  {
    DistributedOptimizer opt(sgd, m.net->named_parameters(), o);
    for (int step = 0; step < 4 && error.empty(); ++step) {
      if (r() == skipper && step == 1) continue;  // this rank's batch 1 is skipped
      opt.set_step(step);
      opt.zero_grad();
      m.loss(Linear::data(r(), step)).backward();
      try {
        opt.step();
      } catch (const InvalidArgument& e) {
        error = e.what();
      }
    }
    // The others' step 2 met the skipper's step 3: every rank fails there.
    std::string others;
    for (int q = 0; q < skipper; ++q) others += (q ? " " : "") + std::to_string(q);
    EXPECT_NE(
        error.find("the ranks are at different steps (rank" + std::string(n() > 2 ? "s " : " ") +
                   others + " at step 2, rank " + std::to_string(skipper) + " at step 3"),
        std::string::npos)
        << error;
    EXPECT_NE(error.find("'tessera.step.skip.'"), std::string::npos) << error;
  }  // its hooks go: the next optimizer hooks the same parameters
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

using testing::TorchTest;

// Uneven data: rank k has k + 2 batches. A rank that runs out joins; the others' steps average
// over the ranks still training only, as one process averaging those ranks' gradients would.
TEST_F(TorchTest, JoinLetsRanksWithLessDataFinishAndAveragesOverTheOthers) {
  Linear m, ref;
  torch::optim::SGD sgd(m.net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  torch::optim::SGD sgd_ref(ref.net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  DistributedOptions o;
  o.prefix = "uneven.";
  DistributedOptimizer opt(sgd, m.net->named_parameters(), o);
  testing::Tolerance close("join: the average over the ranks with data, f64", kF64Tolerance);
  const int mine = r() + 2;
  for (int step = 0; step < n() + 1; ++step) {
    // The reference: the average over the ranks that still have batch `step`.
    torch::Tensor w = torch::zeros_like(ref.fc->weight), b = torch::zeros_like(ref.fc->bias);
    int contributors = 0;
    for (int k = 0; k < n(); ++k) {
      if (step >= k + 2) continue;
      ++contributors;
      sgd_ref.zero_grad();
      ref.loss(Linear::data(k, step)).backward();
      w += ref.fc->weight.grad();
      b += ref.fc->bias.grad();
    }
    sgd_ref.zero_grad();
    ref.fc->weight.mutable_grad() = w / contributors;
    ref.fc->bias.mutable_grad() = b / contributors;
    sgd_ref.step();
    if (step >= mine) continue;
    opt.set_step(step);  // the step check also runs with joined ranks (they add its identity)
    opt.zero_grad();
    m.loss(Linear::data(r(), step)).backward();
    opt.step();
    EXPECT_TRUE(close(m.fc->weight, ref.fc->weight)) << "step " << step;
    EXPECT_TRUE(close(m.fc->bias, ref.fc->bias)) << "step " << step;
  }
  join();
  // Every rank has joined: the set runs as before.
  EXPECT_EQ(allreduce(torch::ones({3}), "after.join", ReduceOp::kSum)[0].item<float>(),
            static_cast<float>(n()));
  if (n() < 2) return;
  // Only allreduce can run while a rank has joined: a broadcast fails on the ranks that call
  // it, naming the joined rank, and they can still join afterwards.
  if (r() == 0) {
    join();
  } else {
    try {
      broadcast(torch::ones({2}), 1, "while.joined");
      ADD_FAILURE() << "a broadcast ran while rank 0 had joined";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(
          std::string(e.what()).find("'while.joined' (broadcast) ran while ranks 0 had joined"),
          std::string::npos)
          << e.what();
    }
    join();
  }
  // A max (the identity of max is the lowest value, not zero) and an int sum.
  if (r() == 0) {
    join();
  } else {
    const torch::Tensor lowest = torch::full({2}, -5.0);
    EXPECT_EQ(allreduce(lowest, "max.joined", ReduceOp::kMax)[0].item<float>(), -5.0f);
    EXPECT_EQ(
        allreduce(torch::ones({2}, torch::kInt), "isum.joined", ReduceOp::kSum)[1].item<int>(),
        n() - 1);
    join();
  }
}

}  // namespace
}  // namespace tessera

// The settings path of tessera::init: sources, their precedence, and a config file that exists
// or differs on some hosts only. Run through resolve_init_options and comm::init, the two steps
// of init, since init itself has run for the suite.
namespace tessera {
namespace {

using testing::TorchTest;

std::string temp_path(const std::string& name) { return ::testing::TempDir() + name; }

void write_config(const std::string& path, const std::string& knobs_json) {
  std::ofstream(path) << "{\"knobs\": " << knobs_json << "}\n";
}

// What comm::init says about these options on every rank ("agreed" when it accepts them).
std::string agreement_of(const InitOptions& options) {
  try {
    comm::init(nullptr, nullptr, resolve_init_options(options));
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "agreed";
}

TEST_F(TorchTest, InitOptionsExplicitBeatsEnvironmentBeatsConfigFile) {
  const std::string path = temp_path("tessera_precedence_" + std::to_string(r()) + ".json");
  write_config(path,
               R"({"TESSERA_FUSION_THRESHOLD": "1MiB", "TESSERA_CYCLE_TIME": "3",
                   "TESSERA_IDLE_BACKOFF": "30"})");
  InitOptions o;
  o.config_file = path;
  o.set(engine::kFusionThreshold, size_t{2} << 20);
  // setenv is a test's tool here (before any thread reads the environment in this call).
  ::setenv("TESSERA_IDLE_BACKOFF", "20", 1);
  const ResolvedSettings mine = resolve_init_options(o);
  ::unsetenv("TESSERA_IDLE_BACKOFF");
  EXPECT_EQ(mine.error, "");
  const engine::EngineOptions e = engine::options_from(mine.values);
  EXPECT_EQ(e.tunables.fusion_threshold, size_t{2} << 20);       // explicit over the file
  EXPECT_EQ(e.idle_backoff_ms, 20.0);                            // environment over the file
  EXPECT_EQ(e.tunables.cycle_time_ms, 3.0);                      // the file over the default
  EXPECT_EQ(e.stall_check_s, engine::kStallCheckTime.fallback);  // nobody: the default
  o.read_environment = false;
  EXPECT_EQ(engine::options_from(resolve_init_options(o).values).idle_backoff_ms, 30.0);
  std::remove(path.c_str());
}

TEST_F(TorchTest, UnknownSettingsNameTheNearestKnownOne) {
  InitOptions o;
  o.settings["TESSERA_FUSION_TRESHOLD"] = "1MiB";
  const std::string why = agreement_of(o);
  EXPECT_NE(why.find("unknown setting TESSERA_FUSION_TRESHOLD (did you mean "
                     "TESSERA_FUSION_THRESHOLD?)"),
            std::string::npos)
      << why;
  o.settings = {{"TESSERA_CACHE_CAPACITY", "-3"}};
  const std::string range = agreement_of(o);
  EXPECT_NE(range.find("TESSERA_CACHE_CAPACITY='-3' is not accepted: out of range; accepted: an "
                       "integer from 0 to 1048576"),
            std::string::npos)
      << range;
}

TEST_F(TorchTest, AConfigFileOnSomeHostsOnlyFailsOnEveryRank) {
  if (n() < 2) GTEST_SKIP() << "needs two ranks";
  const std::string path = temp_path("tessera_hosts_" + std::to_string(r()) + ".json");
  InitOptions o;
  o.read_environment = false;
  o.config_file = path;
  // Present on rank 0's host only: the others cannot read it, and every rank says so.
  std::remove(path.c_str());
  if (r() == 0) write_config(path, R"({"TESSERA_FUSION_THRESHOLD": "64MiB"})");
  const std::string missing = agreement_of(o);
  EXPECT_NE(missing.find("rank 1: "), std::string::npos) << missing;
  EXPECT_NE(missing.find("tessera_hosts_1.json"), std::string::npos) << missing;
  EXPECT_EQ(missing.find("rank 0: "), std::string::npos) << missing;
  // Present everywhere with different values: named, with the ranks that hold each.
  if (r() != 0) write_config(path, R"({"TESSERA_FUSION_THRESHOLD": "32MiB"})");
  const std::string differ = agreement_of(o);
  EXPECT_NE(differ.find("TESSERA_FUSION_THRESHOLD differs between ranks"), std::string::npos)
      << differ;
  EXPECT_NE(differ.find("'64MiB' on rank 0"), std::string::npos) << differ;
  std::string others = n() == 2 ? "'32MiB' on rank 1" : "'32MiB' on ranks 1";
  for (int q = 2; q < n(); ++q) others += ", " + std::to_string(q);
  EXPECT_NE(differ.find(others), std::string::npos) << differ;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tessera
