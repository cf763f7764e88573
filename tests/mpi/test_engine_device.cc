// The engine on device tensors: on every rank's fake device (host memory, streams that run
// their work later on threads), and on GPU 0 where this machine has one. The fake device makes
// the event ordering observable: a stream made slow lags every other, so an engine that did not
// wait for a producer's readiness, or a consumer that could not wait for the completion, reads
// stale data here.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/settings.h"
#include "common/error.h"
#include "engine/engine.h"
#include "gpu/device.h"
#include "gpu/fake_device.h"
#include "mpi/mpi_test_util.h"

namespace tessera {
namespace engine {
namespace {

using testing::Buf;
using testing::hashed_small;

gpu::Clock::time_point soon() { return gpu::Clock::now() + std::chrono::seconds(60); }

std::string error_of(const Handle& h) {
  try {
    h.wait(60);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

class EngineDeviceTest : public testing::WorldTest,
                         public ::testing::WithParamInterface<std::string> {
 protected:
  // The parameter: "<device>/<backend>" ("fake/ipc"); the engine runs over a communicator whose
  // settings force that backend (TESSERA_DEVICE_BACKEND).
  void SetUp() override {
    const size_t slash = GetParam().find('/');
    kind_ = GetParam().substr(0, slash);
    comm::Settings settings = world_->settings();
    settings.device_backend = comm::parse_device_backend(GetParam().substr(slash + 1));
    comm_ = world_->dup(settings);
    if (kind_ == "cuda" && gpu::cuda_device_count() == 0) {
      GTEST_SKIP() << "no GPU: " << gpu::cuda_unavailable_reason();
    }
    if (kind_ == "fake") {
      device_ = std::make_unique<gpu::FakeDevice>(
          gpu::FakeDeviceOptions{0, 200, uint64_t(world_->rank()) + 3});
    } else {
      device_ = gpu::cuda_device(0);
    }
  }
  void use(gpu::FakeDeviceOptions o) {
    if (kind_ != "fake") GTEST_SKIP() << "the fake device's slow streams only";
    device_ = std::make_unique<gpu::FakeDevice>(o);
  }
  EngineOptions fast() const {
    EngineOptions o = options_for(world_->settings());
    o.tunables.cycle_time_ms = 1;
    return o;
  }
  // A device copy of `b` (the copy has run when this returns).
  std::shared_ptr<void> upload(const Buf& b) {
    auto d = device_->allocate(b.bytes.size());
    auto s = device_->new_stream();
    s->copy(d.get(), b.bytes.data(), b.bytes.size());
    s->record()->synchronize(soon(), "upload");
    return d;
  }
  // An allreduce of ten floats (1..10) on this rank's device; the request owns its buffers.
  Request device_allreduce(const std::string& name) {
    const Buf x = input(DataType::kFloat32, 10, 1);
    auto dx = upload(x);
    auto dy = device_->allocate(40);
    Request r =
        make_request(name, OpType::kAllreduce, DataType::kFloat32, {10}, dx.get(), dy.get());
    r.device = device_.get();
    r.keep_alive = {dx, dy};
    return r;
  }
  std::vector<char> download(const void* d, size_t bytes) {
    std::vector<char> out(bytes);
    auto s = device_->new_stream();
    s->copy(out.data(), d, bytes);
    s->record()->synchronize(soon(), "download");
    return out;
  }
  Buf input(DataType dt, size_t count, unsigned salt) const {
    Buf b(dt, count);
    for (size_t i = 0; i < count; ++i) b.set(i, hashed_small(salt, world_->rank(), i));
    return b;
  }
  // The sum over ranks of input(dt, count, salt), times `factor`.
  Buf sum_of_inputs(DataType dt, size_t count, unsigned salt, double factor) const {
    Buf b(dt, count);
    for (size_t i = 0; i < count; ++i) {
      double s = 0;
      for (int q = 0; q < world_->size(); ++q) s += hashed_small(salt, q, i);
      b.set(i, s * factor);
    }
    return b;
  }
  static std::vector<char> first(const Buf& b, size_t bytes) {
    return std::vector<char>(b.bytes.begin(), b.bytes.begin() + static_cast<long>(bytes));
  }

  std::string kind_;                          // "fake" or "cuda"
  std::unique_ptr<comm::Communicator> comm_;  // world, with the backend of the parameter
  std::unique_ptr<gpu::Device> device_;
};

// Each dtype, alone and fused with others, with scale factors and averaging: the same bytes as
// the host engine gives for the same requests.
TEST_P(EngineDeviceTest, AllreduceEqualsTheHostEngineBitForBit) {
  Engine engine(*comm_, fast());
  engine.set_device(*device_);
  const std::vector<size_t> counts = {1, 7, 1000, 3001};
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                      DataType::kBFloat16, DataType::kInt32, DataType::kUInt8}) {
    for (bool fused : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (fused ? " fused" : " alone"));
      const bool fl = is_floating(dt);
      std::vector<Buf> ins, host_out;
      std::vector<std::shared_ptr<void>> d_in, d_out;
      std::vector<Request> host, dev;
      for (size_t k = 0; k < counts.size(); ++k) {
        const size_t n = counts[k];
        ins.push_back(input(dt, n, static_cast<unsigned>(k)));
        host_out.emplace_back(dt, n);
        d_in.push_back(upload(ins.back()));
        d_out.push_back(device_->allocate(ins.back().bytes.size()));
        const std::string name =
            std::string(dtype_name(dt)) + (fused ? ".f." : ".a.") + std::to_string(k);
        for (bool on_device : {false, true}) {
          Request r = make_request(name + (on_device ? ".dev" : ".host"), OpType::kAllreduce, dt,
                                   {static_cast<int64_t>(n)},
                                   on_device ? d_in.back().get() : ins.back().data(),
                                   on_device ? d_out.back().get() : host_out.back().data());
          r.spec.reduce_op = fl ? ReduceOp::kAverage : ReduceOp::kSum;
          r.spec.prescale = fl ? 0.5 : 1.0;
          r.spec.postscale = fl ? 3.0 : 1.0;
          if (on_device) r.device = device_.get();
          (on_device ? dev : host).push_back(std::move(r));
        }
      }
      for (auto* batch : {&host, &dev}) {
        std::vector<Handle> hs;
        if (fused) {
          hs = engine.enqueue_group(*batch);
        } else {
          for (auto& r : *batch) hs.push_back(engine.enqueue(r));
        }
        for (auto& h : hs) h.wait(60);
      }
      for (size_t k = 0; k < counts.size(); ++k) {
        const size_t bytes = counts[k] * dtype_size(dt);
        EXPECT_EQ(download(d_out[k].get(), bytes), first(host_out[k], bytes)) << "tensor " << k;
      }
    }
  }
}

// Broadcast, allgather with rows differing by rank, reduce-scatter and alltoall: the host
// engine's bytes.
TEST_P(EngineDeviceTest, OtherCollectivesEqualTheHostEngine) {
  Engine engine(*comm_, fast());
  engine.set_device(*device_);
  const int n = world_->size(), r = world_->rank();
  const DataType dt = DataType::kFloat32;
  const size_t rows = static_cast<size_t>(2 * n), cols = 5, count = rows * cols;
  const Buf in = input(dt, count, 9);
  auto d_in = upload(in);
  const std::vector<int64_t> shape = {static_cast<int64_t>(rows), static_cast<int64_t>(cols)};
  // broadcast from the last rank, in place.
  Buf host_b = in;
  auto d_b = upload(in);
  Request hb = make_request("b.host", OpType::kBroadcast, dt, shape, nullptr, host_b.data());
  Request rb = make_request("b.dev", OpType::kBroadcast, dt, shape, nullptr, d_b.get());
  hb.spec.root = rb.spec.root = n - 1;
  rb.device = device_.get();
  engine.enqueue(hb).wait(60);
  engine.enqueue(rb).wait(60);
  EXPECT_EQ(download(d_b.get(), count * 4), first(host_b, count * 4)) << "broadcast";
  // allgather: rank q gives q + 1 rows.
  const std::vector<int64_t> mine = {r + 1, static_cast<int64_t>(cols)};
  Handle hg = engine.enqueue(
      make_request("g.host", OpType::kAllgather, dt, mine, in.bytes.data(), nullptr));
  Request rg = make_request("g.dev", OpType::kAllgather, dt, mine, d_in.get(), nullptr);
  rg.device = device_.get();
  Handle dg = engine.enqueue(rg);
  hg.wait(60);
  dg.wait(60);
  EXPECT_EQ(dg.result_shape(), hg.result_shape());
  ASSERT_NE(dg.device_result(), nullptr);
  EXPECT_EQ(download(dg.device_result().get(), hg.result().size()), hg.result()) << "allgather";
  // reduce-scatter (max) and alltoall.
  for (OpType op : {OpType::kReduceScatter, OpType::kAlltoall}) {
    const size_t out_count = op == OpType::kAlltoall ? count : count / static_cast<size_t>(n);
    Buf host_out(dt, out_count);
    auto d_out = device_->allocate(out_count * 4);
    Request h = make_request(std::string(op_type_name(op)) + ".host", op, dt, shape,
                             in.bytes.data(), host_out.data());
    Request d = make_request(std::string(op_type_name(op)) + ".dev", op, dt, shape, d_in.get(),
                             d_out.get());
    h.spec.reduce_op = d.spec.reduce_op = ReduceOp::kMax;
    d.device = device_.get();
    engine.enqueue(h).wait(60);
    engine.enqueue(d).wait(60);
    EXPECT_EQ(download(d_out.get(), out_count * 4), first(host_out, out_count * 4))
        << op_type_name(op);
  }
}

// The producers write the inputs on their own streams, the first far slower than the second,
// and the requests arrive in the other order: the engine's stream must wait for each
// readiness event (the inputs hold zeros until then).
TEST_P(EngineDeviceTest, TheEngineWaitsForEachProducersReadiness) {
  gpu::FakeDeviceOptions o{0, 200, uint64_t(world_->rank()) + 11};
  o.slow_stream = 0;  // p1
  o.slow_delay_us = 30000;
  use(o);
  auto p1 = device_->new_stream();
  auto p2 = device_->new_stream();
  Engine engine(*comm_, fast());
  engine.set_device(*device_);
  const DataType dt = DataType::kFloat32;
  const size_t count = 777;
  for (bool grouped : {false, true}) {
    SCOPED_TRACE(grouped ? "grouped" : "one by one");
    const Buf a = input(dt, count, 1), b = input(dt, count, 2), zeros(dt, count);
    auto da = upload(zeros), db = upload(zeros);
    auto oa = device_->allocate(count * 4), ob = device_->allocate(count * 4);
    p1->copy(da.get(), a.bytes.data(), count * 4);
    p2->copy(db.get(), b.bytes.data(), count * 4);
    const std::string tag = grouped ? ".g" : ".s";
    std::vector<Request> rs = {
        make_request("b" + tag, OpType::kAllreduce, dt, {long(count)}, db.get(), ob.get()),
        make_request("a" + tag, OpType::kAllreduce, dt, {long(count)}, da.get(), oa.get())};
    rs[0].ready = p2->record();
    rs[1].ready = p1->record();
    for (auto& r : rs) {
      r.spec.reduce_op = ReduceOp::kSum;
      r.device = device_.get();
    }
    std::vector<Handle> hs;
    if (grouped) {
      hs = engine.enqueue_group(rs);
    } else {
      for (auto& r : rs) hs.push_back(engine.enqueue(r));
    }
    for (auto& h : hs) h.wait(60);
    EXPECT_EQ(download(oa.get(), count * 4), first(sum_of_inputs(dt, count, 1, 1), count * 4));
    EXPECT_EQ(download(ob.get(), count * 4), first(sum_of_inputs(dt, count, 2, 1), count * 4));
  }
}

// The engine's stream is the slow one: once the handles are done on the host, the results are
// still being written; a consumer stream that waits on the completion event reads them whole.
// The engine holds the tensors (keep_alive) until then, and lets go after.
TEST_P(EngineDeviceTest, AConsumerStreamWaitsOnTheCompletionEvent) {
  gpu::FakeDeviceOptions o{0, 200, uint64_t(world_->rank()) + 21};
  o.slow_stream = 1;  // made second: the engine's, at its first device batch
  o.slow_delay_us = 30000;
  use(o);
  auto consumer = device_->new_stream();
  std::weak_ptr<void> input_alive;
  {
    Engine engine(*comm_, fast());
    engine.set_device(*device_);
    const DataType dt = DataType::kFloat32;
    const size_t count = 1001;
    const Buf a = input(dt, count, 3), b = input(dt, count, 4);
    auto da = upload(a), db = upload(b);
    auto oa = device_->allocate(count * 4), ob = device_->allocate(count * 4);
    std::vector<Request> rs = {
        make_request("a", OpType::kAllreduce, dt, {long(count)}, da.get(), oa.get()),
        make_request("b", OpType::kAllreduce, dt, {long(count)}, db.get(), ob.get())};
    for (auto& r : rs) {
      r.spec.reduce_op = ReduceOp::kSum;
      r.spec.postscale = 2.0;  // copied out of the fusion buffer on the slow stream
      r.device = device_.get();
      r.keep_alive = {da, db};
    }
    input_alive = da;
    da.reset();
    std::vector<Handle> hs = engine.enqueue_group(std::move(rs));  // the engine's refs only
    std::vector<char> got_a(count * 4), got_b(count * 4);
    for (auto& h : hs) ASSERT_TRUE(h.wait_for(60));
    auto done = hs[0].completion();
    ASSERT_NE(done, nullptr);
    if (!done->done()) {
      EXPECT_FALSE(input_alive.expired()) << "freed under the device's feet";
    }
    consumer->wait(done);
    consumer->copy(got_a.data(), oa.get(), count * 4);
    consumer->copy(got_b.data(), ob.get(), count * 4);
    consumer->record()->synchronize(soon(), "the consumer's copies");
    EXPECT_EQ(got_a, first(sum_of_inputs(dt, count, 3, 2.0), count * 4));
    EXPECT_EQ(got_b, first(sum_of_inputs(dt, count, 4, 2.0), count * 4));
    for (auto& h : hs) EXPECT_TRUE(h.poll());
  }
  EXPECT_TRUE(input_alive.expired()) << "the engine kept a tensor after its work was done";
}

// A device operation that fails (injected, as an ECC error would be) reaches wait() on every
// rank with its message: in the engine's own work, and in a producer's work it waited on.
TEST_P(EngineDeviceTest, AFailingDeviceOperationReachesWait) {
  use({0, 200, uint64_t(world_->rank()) + 31});
  auto* fake = static_cast<gpu::FakeDevice*>(device_.get());
  const DataType dt = DataType::kFloat32;
  const Buf a = input(dt, 100, 5);
  for (bool in_producer : {false, true}) {
    SCOPED_TRACE(in_producer ? "producer" : "engine");
    Engine engine(*comm_, fast());
    engine.set_device(*device_);
    auto da = upload(a);
    auto out = device_->allocate(400);
    Request r = make_request("x", OpType::kAllreduce, dt, {100}, da.get(), out.get());
    r.spec.reduce_op = ReduceOp::kSum;
    r.device = device_.get();
    auto producer = device_->new_stream();
    fake->fail_next("injected: uncorrectable ECC error");
    if (in_producer) {
      producer->copy(da.get(), a.bytes.data(), 400);
      r.ready = producer->record();
    }
    Handle h = engine.enqueue(r);
    try {
      h.wait(60);
      ADD_FAILURE() << "expected DeviceError";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("injected: uncorrectable ECC error"), std::string::npos)
          << e.what();
    }
  }
}

TEST(EngineDeviceHandle, AFailureSeenOnlyByTheCompletionEventReachesWait) {
  gpu::FakeDevice fake({0, 100, 5});
  auto s = fake.new_stream();
  int x = 1, y = 0;
  fake.fail_next("injected: the kernel faulted");
  s->copy(&y, &x, sizeof(int));
  auto state = std::make_shared<HandleState>();
  state->name = "t";
  state->completion = s->record();
  state->finish(nullptr);
  Handle h(state);
  try {
    h.wait(60);
    ADD_FAILURE() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("the kernel faulted"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(h.poll());
}

// Ranks that disagree on host vs device for one name fail on every rank, naming the ranks.
TEST_P(EngineDeviceTest, HostAndDeviceTensorsOfOneNameFailOnEveryRank) {
  if (world_->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  Engine engine(*comm_, fast());
  engine.set_device(*device_);
  Buf x(DataType::kFloat32, 10), y(DataType::kFloat32, 10);
  auto dx = upload(x);
  auto dy = device_->allocate(40);
  const bool host = world_->rank() == 0;
  Request r = make_request("mixed", OpType::kAllreduce, DataType::kFloat32, {10},
                           host ? x.data() : dx.get(), host ? y.data() : dy.get());
  if (!host) r.device = device_.get();
  const std::string what = error_of(engine.enqueue(r));
  EXPECT_NE(what.find("'mixed'"), std::string::npos) << what;
  EXPECT_NE(what.find("device cpu vs cuda"), std::string::npos) << what;
  EXPECT_NE(what.find("ranks 0 vs rank"), std::string::npos) << what;
}

TEST_P(EngineDeviceTest, ATensorOnAnotherDeviceThanTheRanksIsRefused) {
  use({0, 10, 1});
  gpu::FakeDevice other({0, 10, 2}, 1);
  Engine engine(*comm_, fast());
  int x = 0, y = 0;
  Request r = make_request("elsewhere", OpType::kAllreduce, DataType::kInt32, {1}, &x, &y);
  r.device = &other;
  try {
    engine.enqueue(r);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("call set_device"), std::string::npos) << e.what();
  }
  engine.set_device(*device_);
  try {
    engine.enqueue(r);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'elsewhere' is on fake:1"), std::string::npos) << what;
    EXPECT_NE(what.find("uses fake:0"), std::string::npos) << what;
  }
  EXPECT_THROW(engine.set_device(other), InvalidArgument);
  engine.set_device(*device_);  // the same again is fine
}

// NCCL forced (TESSERA_DEVICE_BACKEND=nccl) on ranks that share a device: every rank's engine
// fails the tensor naming the ranks, and goes on.
TEST_P(EngineDeviceTest, ForcedNcclOnRanksSharingADeviceFailsNamingThem) {
  if (world_->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  comm::Settings nccl = world_->settings();
  nccl.device_backend = comm::DeviceBackend::kNccl;
  auto c = world_->dup(nccl);
  Engine engine(*c, fast());
  engine.set_device(*device_);
  const std::string what = error_of(engine.enqueue(device_allreduce("forced")));
  const bool named = what.find("ranks 0 and 1") != std::string::npos ||
                     what.find("ranks 0, 1") != std::string::npos ||
                     what.find("NCCL needs CUDA devices") != std::string::npos;
  EXPECT_TRUE(named) << what;
  // The engine goes on: the same tensor on host memory reduces.
  float h = 1, sum = 0;
  engine.enqueue(make_request("after", OpType::kAllreduce, DataType::kFloat32, {1}, &h, &sum))
      .wait(60);
  EXPECT_EQ(sum, static_cast<float>(world_->size()));
}

// join() takes host tensors only for now: a device allreduce while a rank has joined fails on
// every rank alike, and the join still completes.
TEST_P(EngineDeviceTest, ADeviceTensorWhileARankHasJoinedFailsEverywhere) {
  if (world_->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  Engine engine(*comm_, fast());
  engine.set_device(*device_);
  if (world_->rank() == 0) {
    engine.join().wait(60);
    return;
  }
  const std::string what = error_of(engine.enqueue(device_allreduce("late")));
  EXPECT_NE(what.find("join() takes host tensors only"), std::string::npos) << what;
  engine.join().wait(60);
}

INSTANTIATE_TEST_SUITE_P(Devices, EngineDeviceTest,
                         ::testing::Values("fake/ipc", "fake/staged", "cuda/ipc", "cuda/staged"),
                         [](const auto& info) {
                           std::string name = info.param;
                           name[name.find('/')] = '_';
                           return name;
                         });

}  // namespace
}  // namespace engine
}  // namespace tessera
