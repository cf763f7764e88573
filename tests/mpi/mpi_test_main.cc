// gtest main for the multi-rank tests (run under mpirun): opens the process's tessera session
// (runtime/session.h: settings from the environment, MPI, liveness; no engine, which the tests
// make), lets rank 0 print the usual output, prints every other rank's failures prefixed "[rank
// N]", and exits with the maximum status over all ranks, so one failing rank fails the test.
#include <gtest/gtest.h>

#include <cstdio>

#include "comm/collectives.h"
#include "comm/communicator.h"
#include "runtime/session.h"

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n[rank %d] %s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), rank_, r.message());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  tessera::runtime::SessionOptions options;
  options.engine = false;
  options.argc = &argc;
  options.argv = &argv;
  tessera::runtime::Session session(options);
  ::testing::InitGoogleTest(&argc, argv);
  int status = 0;
  {
    tessera::comm::Communicator* world = &session.world();
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    if (world->rank() != 0) {
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new RankFailurePrinter(world->rank()));
    }
    int local = RUN_ALL_TESTS();
    tessera::comm::AllreduceOptions max;
    max.op = tessera::ReduceOp::kMax;
    max.algorithm = tessera::comm::Algorithm::kMpi;
    tessera::comm::allreduce(*world, &local, &status, 1, tessera::DataType::kInt32, max);
    if (world->rank() == 0 && status != 0) {
      std::fprintf(stderr, "at least one rank failed (exit status %d)\n", status);
    }
  }
  session.end();
  return status;
}
