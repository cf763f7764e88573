// wait_until_enqueued against a fake nonblocking communicator that behaves as NCCL's does with
// config.blocking = 0: a collective answers "in progress" and its work reaches the stream only
// later, when the communicator is polled. An event recorded at once then completes without the
// result (what NcclComm did before issue 33, treating ncclInProgress as success); waiting until
// enqueued orders the event after it.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <vector>

#include "common/error.h"
#include "gpu/fake_device.h"
#include "gpu/nonblocking.h"

namespace tessera {
namespace gpu {
namespace {

Clock::time_point soon() { return Clock::now() + std::chrono::seconds(30); }

// Enqueues its copy on the `enqueue_after`-th poll; `fail` makes that poll report an error.
class FakeNonblockingComm {
 public:
  explicit FakeNonblockingComm(int enqueue_after, bool fail = false)
      : enqueue_after_(enqueue_after), fail_(fail) {}
  CallState allreduce(Stream& s, const float* in, float* out, size_t n) {
    pending_ = [&s, in, out, n] { s.copy(out, in, n * sizeof(float)); };
    return CallState::kInProgress;
  }
  CallState poll(std::string& error) {
    ++polls_;
    if (polls_ < enqueue_after_) return CallState::kInProgress;
    if (fail_) {
      error = "unhandled system error (a peer went away)";
      return CallState::kFailed;
    }
    if (pending_) pending_();
    pending_ = nullptr;
    return CallState::kDone;
  }
  int polls() const { return polls_; }

 private:
  int enqueue_after_;
  bool fail_;
  int polls_ = 0;
  std::function<void()> pending_;
};

// A fake device's stream, an input of 3s and an output of 0s.
class Nonblocking : public ::testing::Test {
 protected:
  FakeDevice device;
  std::unique_ptr<Stream> stream = device.new_stream();
  const std::vector<float> in = std::vector<float>(1000, 3.0f);
  std::vector<float> out = std::vector<float>(1000, 0.0f);
};

TEST_F(Nonblocking, AnEventRecordedWhileInProgressCompletesWithoutTheResult) {
  FakeNonblockingComm comm(3);
  ASSERT_EQ(comm.allreduce(*stream, in.data(), out.data(), in.size()), CallState::kInProgress);
  stream->record()->synchronize(soon(), "the too-early event");
  EXPECT_EQ(out[0], 0.0f) << "the fake must show the hazard: nothing was on the stream yet";
  std::string error;
  while (comm.poll(error) == CallState::kInProgress) {
  }
  stream->record()->synchronize(soon(), "the drain");
}

TEST_F(Nonblocking, WaitingUntilEnqueuedOrdersTheEventAfterTheResult) {
  FakeNonblockingComm comm(3);
  wait_until_enqueued(
      comm.allreduce(*stream, in.data(), out.data(), in.size()),
      [&](std::string& e) { return comm.poll(e); }, soon(), "allreduce");
  EXPECT_EQ(comm.polls(), 3);
  stream->record()->synchronize(soon(), "the event after the call");
  EXPECT_EQ(out, in);
}

TEST_F(Nonblocking, DoneAtOnceDoesNotPoll) {
  int polls = 0;
  wait_until_enqueued(
      CallState::kDone, [&](std::string&) { return ++polls, CallState::kInProgress; }, soon(), "x");
  EXPECT_EQ(polls, 0);
}

TEST_F(Nonblocking, AFailedPollIsADeviceErrorNamingTheCall) {
  FakeNonblockingComm comm(2, /*fail=*/true);
  try {
    wait_until_enqueued(
        comm.allreduce(*stream, in.data(), out.data(), in.size()),
        [&](std::string& e) { return comm.poll(e); }, soon(), "ncclAllReduce");
    FAIL() << "no error";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("ncclAllReduce failed: unhandled system error"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(Nonblocking, StuckInProgressEndsAtTheDeadline) {
  const auto start = Clock::now();
  EXPECT_THROW(wait_until_enqueued(
                   CallState::kInProgress, [](std::string&) { return CallState::kInProgress; },
                   Clock::now() + std::chrono::milliseconds(50), "ncclBroadcast"),
               TimeoutError);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace gpu
}  // namespace tessera
