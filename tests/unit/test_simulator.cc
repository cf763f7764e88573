// The machine descriptions, the cost model and the step simulator against closed forms, and
// their refusals of bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "comm/selector.h"
#include "common/error.h"
#include "tune/cost_model.h"
#include "tune/machine.h"
#include "tune/model_gradients.h"
#include "tune/scaling_plot.h"
#include "tune/simulator.h"
#include "tune/timeline_workload.h"

namespace tessera {
namespace tune {
namespace {

using comm::Algorithm;

Machine two_level() {
  Machine m;
  m.name = "test";
  m.nodes = 1000;
  m.ranks_per_node = 4;
  m.intra = {1.0, 40.0};
  m.shm = m.intra;
  m.inter = {5.0, 10.0};
  m.reduce_gbps = 100.0;
  m.coordinator_us_per_request = 2.0;
  return m;
}

// torchvision's resnet50(): 161 parameter tensors, 25,557,032 elements.
TEST(ModelGradients, ResNet50HasTorchvisionsCountAndTotal) {
  const std::vector<size_t> e = resnet50_parameter_elements();
  EXPECT_EQ(e.size(), 161u);
  size_t total = 0;
  for (size_t x : e) total += x;
  EXPECT_EQ(total, 25557032u);
  EXPECT_EQ(e.front(), 64u * 3 * 7 * 7);
  EXPECT_EQ(e[e.size() - 2], 2048u * 1000);
}

TEST(CostModel, OneNodeIsTheSelectorsFormula) {
  const Machine m = two_level();
  for (Algorithm a : modelled_algorithms()) {
    for (double n : {8.0, 65536.0, 64e6}) {
      const double want =
          comm::predict_us(cost_table_of(m), a, {4, 1, 4, true}, static_cast<size_t>(n)) * 1e-6;
      EXPECT_NEAR(allreduce_seconds(m, a, 4, n), want, 1e-15) << comm::algorithm_name(a) << n;
    }
  }
  EXPECT_EQ(allreduce_seconds(m, Algorithm::kRing, 1, 1e6), 0.0);
  EXPECT_EQ(allreduce_seconds(m, Algorithm::kRing, 8, 0), 0.0);
}

TEST(CostModel, AcrossNodesClosedForms) {
  const Machine m = two_level();
  const double p = 64, n = 1e8, ae = 5e-6, be = 1 / 10e9, g = 1 / 100e9;
  // Ring: one stream per node crosses the network.
  EXPECT_NEAR(allreduce_seconds(m, Algorithm::kRing, 64, n),
              2 * (p - 1) * ae + 2 * (p - 1) / p * n * be + (p - 1) / p * n * g, 1e-12);
  // Recursive halving-doubling: the node's 4 ranks share its injection.
  EXPECT_NEAR(allreduce_seconds(m, Algorithm::kRhd, 64, n),
              2 * 6 * ae + 2 * (p - 1) / p * n * be * 4 + n * g, 1e-12);
  // Hierarchical = the node's own formula + the cheaper of ring and tree over 16 nodes on n/4.
  const double local = comm::predict_us(cost_table_of(m), Algorithm::kHierarchical, {4, 1, 4, true},
                                        static_cast<size_t>(n)) *
                       1e-6;
  const double mm = 16, chunk = n / 4;
  const double ring = 2 * (mm - 1) * ae + 2 * (mm - 1) / mm * n * be + (mm - 1) / mm * chunk * g;
  const double seg = 256 * 1024;
  const double tree = 2 * 4 * (ae + seg * be) + n * be + chunk * g;
  EXPECT_NEAR(allreduce_seconds(m, Algorithm::kHierarchical, 64, n), local + std::min(ring, tree),
              1e-12);
  // Auto is the cheapest.
  double best = 1e300;
  for (Algorithm a : modelled_algorithms()) best = std::min(best, allreduce_seconds(m, a, 64, n));
  EXPECT_EQ(allreduce_seconds(m, Algorithm::kAuto, 64, n), best);
  // Latency-bound rings lose to trees at scale.
  EXPECT_GT(allreduce_seconds(m, Algorithm::kRing, 4000, 1e5),
            allreduce_seconds(m, Algorithm::kDbtree, 4000, 1e5));
}

TEST(CostModel, OversubscribedCoresStretchEveryTerm) {
  Machine m = two_level();
  m.ranks_per_node = 16;
  m.cores_per_node = 2;
  const double plain =
      comm::predict_us(cost_table_of(m), Algorithm::kRing, {8, 1, 8, true}, 1 << 20) * 1e-6;
  EXPECT_NEAR(allreduce_seconds(m, Algorithm::kRing, 8, 1 << 20), 4 * plain, 1e-15);
  EXPECT_NEAR(allreduce_seconds(m, Algorithm::kRing, 2, 1 << 20),
              comm::predict_us(cost_table_of(m), Algorithm::kRing, {2, 1, 2, true}, 1 << 20) * 1e-6,
              1e-15);
}

TEST(CostModel, TheCacheTakesTheCoordinatorOffTheCriticalPath) {
  const Machine m = two_level();
  const double vote = allreduce_seconds(m, Algorithm::kAuto, 400, 8 * 3);  // 3 + 161 bits: 3 words
  EXPECT_NEAR(negotiation_seconds(m, 400, 161, 161, true), vote, 1e-15);
  const double gather = (2 * 9 * 5.0 + 400.0 * 161 * 64 * 1e-3 / 10.0 + 400.0 * 161 * 2.0) * 1e-6;
  EXPECT_NEAR(negotiation_seconds(m, 400, 161, 161, false),
              allreduce_seconds(m, Algorithm::kAuto, 400, 8) + gather, 1e-12);
  EXPECT_EQ(negotiation_seconds(m, 1, 161, 161, false), 0.0);
}

Workload one_tensor(double bytes, double compute_s) {
  Workload w;
  w.name = "w";
  w.compute_s = compute_s;
  w.images_per_step = 4;
  w.gradients = {{"g", bytes, 0.0}};
  return w;
}

TEST(Simulator, OneGpuIsTheComputeExactly) {
  const Machine m = two_level();
  const Workload w = workload_from_sizes("r", {1e6, 2e6, 3e6}, 0.3, 8);
  engine::Tunables s;
  s.cycle_time_ms = 1;  // no cycle to wait for: one GPU has nothing to agree on
  const StepResult r = simulate_step(m, w, 1, s);
  EXPECT_DOUBLE_EQ(r.step_s, 0.3);
  EXPECT_DOUBLE_EQ(r.efficiency, 1.0);
  EXPECT_NEAR(r.throughput, 8 / 0.3, 1e-9);
  // Ready times: forward (1/3) then evenly over backward.
  EXPECT_NEAR(w.gradients[0].ready_s, 0.1 + 0.2 / 3, 1e-15);
  EXPECT_NEAR(w.gradients[2].ready_s, 0.3, 1e-15);
}

TEST(Simulator, CommunicationBoundStepIsNegotiationPlusAllreduce) {
  const Machine m = two_level();
  engine::Tunables s;
  s.cycle_time_ms = 0;
  const StepResult r = simulate_step(m, one_tensor(5e8, 1e-6), 64, s);
  const double want =
      negotiation_seconds(m, 64, 1, 1, true) + allreduce_seconds(m, Algorithm::kAuto, 64, 5e8);
  EXPECT_NEAR(r.step_s, want, 1e-12);
  EXPECT_NEAR(r.efficiency, 1e-6 / want, 1e-12);
  EXPECT_EQ(r.buffers, 1);
}

TEST(Simulator, FusionPacksReadyTensorsUpToTheThreshold) {
  const Machine m = two_level();
  Workload w;
  w.name = "ten";
  w.compute_s = 1e-6;
  w.images_per_step = 1;
  for (int i = 0; i < 10; ++i) w.gradients.push_back({"g" + std::to_string(i), 1e6, 0.0});
  engine::Tunables s;
  s.cycle_time_ms = 0;
  s.fusion_threshold = 3000000;
  const StepResult r = simulate_step(m, w, 8, s);
  EXPECT_EQ(r.buffers, 4);  // 3 + 3 + 3 + 1
  EXPECT_NEAR(r.data_s,
              3 * allreduce_seconds(m, Algorithm::kAuto, 8, 3e6) +
                  allreduce_seconds(m, Algorithm::kAuto, 8, 1e6),
              1e-12);
  s.fusion_threshold = 0;
  EXPECT_EQ(simulate_step(m, w, 8, s).buffers, 10);
}

TEST(Simulator, CyclesWaitForTheirTimeAndCacheOffCostsMoreAtScale) {
  const Machine m = two_level();
  const Workload w = workload_from_sizes("r", std::vector<double>(50, 4e5), 0.1, 32);
  engine::Tunables s;
  s.cycle_time_ms = 5;
  const StepResult r = simulate_step(m, w, 8, s);
  EXPECT_LE(r.cycles, 1 + static_cast<int>(std::ceil(0.1 / 0.005)));
  engine::Tunables off = s;
  off.cache_enabled = false;
  double last_eff = 2;
  for (int g : {8, 64, 512, 4000}) {
    const StepResult on = simulate_step(m, w, g, s), no = simulate_step(m, w, g, off);
    EXPECT_GT(no.control_s, on.control_s) << g;
    EXPECT_LE(no.efficiency, on.efficiency + 1e-12) << g;
    EXPECT_LE(on.efficiency, last_eff + 1e-12) << g;
    last_eff = on.efficiency;
  }
}

// The engine's own settings type drives the simulator: an algorithm range text picks each
// buffer's algorithm by its size, as TESSERA_ALLREDUCE does on a communicator.
TEST(Simulator, AlgorithmRangesPickEachBuffersAlgorithm) {
  const Machine m = two_level();
  engine::Tunables s;
  s.cycle_time_ms = 0;
  s.allreduce = "ring:0-1000;rhd:1001-max";
  EXPECT_EQ(simulate_step(m, one_tensor(8, 1.0), 64, s).largest_algorithm, comm::Algorithm::kRing);
  EXPECT_EQ(simulate_step(m, one_tensor(1 << 20, 1.0), 64, s).largest_algorithm,
            comm::Algorithm::kRhd);
  s.allreduce = "ring:0-10;bogus:11-max";
  EXPECT_THROW(simulate_step(m, one_tensor(8, 1.0), 64, s), InvalidArgument);
}

TEST(Simulator, JitterIsTheExpectedSlowestOfNGpus) {
  Machine m = two_level();
  m.compute_jitter = 0.02;
  engine::Tunables s;
  s.cycle_time_ms = 0;
  const StepResult r = simulate_step(m, one_tensor(8, 1.0), 4000, s);
  EXPECT_NEAR(r.step_s, 1.0 * (1 + 0.02 * std::sqrt(2 * std::log(4000.0))), 1e-3);
}

TEST(Machine, PresetsAndJsonAndBadFieldsNamed) {
  const Machine summit = machine_preset("summit");
  EXPECT_EQ(summit.ranks_per_node, 6);
  EXPECT_EQ(summit.intra.gbps, 50.0);
  EXPECT_EQ(summit.inter.gbps, 23.0);
  EXPECT_EQ(summit.rails, 2);
  EXPECT_GE(static_cast<long long>(summit.nodes) * summit.ranks_per_node, 27600);
  const Machine local = machine_preset("local");
  EXPECT_EQ(local.nodes, 1);
  EXPECT_GT(local.intra.gbps, 0);
  const Machine j = machine_from_json(
      R"({"name": "mine", "nodes": 8, "ranks_per_node": 4, "intra": {"latency_us": 1, "gbps": 20},
          "inter": {"latency_us": 2, "gbps": 12.5}, "reduce_gbps": 50})");
  EXPECT_EQ(j.name, "mine");
  EXPECT_EQ(j.inter.gbps, 12.5);
  EXPECT_EQ(j.shm.gbps, 20);
  const Machine p = machine_from_json(R"({"preset": "summit", "nodes": 10})");
  EXPECT_EQ(p.nodes, 10);
  EXPECT_EQ(p.ranks_per_node, 6);
  auto what = [](const std::string& text) {
    try {
      machine_from_json(text);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string base =
      R"("nodes": 8, "ranks_per_node": 4, "intra": {"latency_us": 1, "gbps": 20}, "reduce_gbps": 50)";
  const std::map<std::string, std::string> cases = {
      {"{" + base + "}", "'inter'"},
      {"{" + base + R"(, "inter": {"latency_us": 2}})", "'inter.gbps'"},
      {"{" + base + R"(, "inter": {"latency_us": -2, "gbps": 1}})", "'inter.latency_us'"},
      {"{" + base + R"(, "inter": {"latency_us": 2, "gbps": 0}})", "'inter.gbps'"},
      {"{" + base + R"(, "inter": {"latency_us": 2, "gbps": "fast"}})", "'inter.gbps'"},
      {R"({"preset": "summit", "nodes": -3})", "'nodes'"},
      {R"({"preset": "summit", "ranks_per_node": 2.5})", "'ranks_per_node'"},
      {R"({"preset": "summit", "reduce_gbps": -1})", "'reduce_gbps'"},
      {R"({"preset": "summit", "compute_jitter": -0.1})", "'compute_jitter'"},
      {R"({"preset": "frontier"})", "unknown machine preset 'frontier'"},
      {"[1]", "JSON object"},
      {"{", "not valid JSON"},
  };
  for (const auto& c : cases) {
    const std::string w = what(c.first);
    EXPECT_NE(w.find(c.second), std::string::npos) << c.first << ": " << w;
  }
  EXPECT_THROW(machine_preset("frontier"), InvalidArgument);
  Workload w = workload_from_sizes("r", {1e6}, 0.1, 1);
  EXPECT_THROW(simulate_step(summit, w, 0, engine::Tunables{}), InvalidArgument);
  EXPECT_THROW(simulate_step(summit, w, 4608 * 6 + 1, engine::Tunables{}), InvalidArgument);
  EXPECT_THROW(workload_from_sizes("r", {1e6}, -1, 1), InvalidArgument);
}

TEST(SvgPlot, OneLinePerSeriesWithItsLabel) {
  const std::string svg = efficiency_plot_svg(
      "t <&>", {{"ring", {{1, 1.0}, {6, 0.9}, {132, 0.5}}}, {"tree", {{1, 1.0}, {132, 0.95}}}});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  size_t lines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos;
       at = svg.find("<polyline", at + 1))
    ++lines;
  EXPECT_EQ(lines, 2u);
  EXPECT_NE(svg.find(">ring<"), std::string::npos);
  EXPECT_NE(svg.find("t &lt;&amp;&gt;"), std::string::npos);
}

}  // namespace
}  // namespace tune
}  // namespace tessera

namespace tessera {
namespace tune {
namespace {

// A timeline as the engine and the trainer write it: two steps, gradients enqueued during each
// backward (with their bytes), and a broadcast outside backward that is not a gradient.
std::string two_step_timeline() {
  return R"([
 {"ph":"M","name":"thread_name","pid":0,"tid":1,"args":{"name":"train"}},
 {"ph":"M","name":"thread_name","pid":0,"tid":2,"args":{"name":"grad.fc.weight"}},
 {"ph":"M","name":"thread_name","pid":0,"tid":3,"args":{"name":"grad.conv1.weight"}},
 {"ph":"M","name":"thread_name","pid":0,"tid":4,"args":{"name":"metrics"}},
 {"ph":"X","name":"FORWARD","pid":0,"tid":1,"ts":1000,"dur":3000,"args":{}},
 {"ph":"X","name":"BACKWARD","pid":0,"tid":1,"ts":4000,"dur":6000,"args":{}},
 {"ph":"X","name":"NEGOTIATE","pid":0,"tid":2,"ts":5000,"dur":10,"args":{"path":"coordinator","bytes":4000}},
 {"ph":"X","name":"NEGOTIATE","pid":0,"tid":3,"ts":9000,"dur":10,"args":{"path":"coordinator","bytes":800}},
 {"ph":"X","name":"OPTIMIZER_STEP","pid":0,"tid":1,"ts":10500,"dur":500,"args":{}},
 {"ph":"X","name":"FORWARD","pid":0,"tid":1,"ts":20000,"dur":2000,"args":{}},
 {"ph":"X","name":"BACKWARD","pid":0,"tid":1,"ts":22000,"dur":4000,"args":{}},
 {"ph":"X","name":"NEGOTIATE","pid":0,"tid":2,"ts":23000,"dur":10,"args":{"path":"cache","bit":0,"bytes":4000}},
 {"ph":"X","name":"NEGOTIATE","pid":0,"tid":3,"ts":25500,"dur":10,"args":{"path":"cache","bit":1,"bytes":800}},
 {"ph":"X","name":"ALLREDUCE","pid":0,"tid":3,"ts":25600,"dur":100,"args":{"bytes":800}},
 {"ph":"X","name":"OPTIMIZER_STEP","pid":0,"tid":1,"ts":26200,"dur":800,"args":{}},
 {"ph":"X","name":"NEGOTIATE","pid":0,"tid":4,"ts":27500,"dur":10,"args":{"path":"coordinator","bytes":8}}
])";
}

TEST(TimelineWorkload, TheLastCompleteStepsComputeSizesAndReadyTimes) {
  const Workload w = workload_from_timeline(two_step_timeline(), "t.json", 16);
  // Step 2: forward at 20,000 us, backward ends at 26,000, the update takes 800 us.
  EXPECT_NEAR(w.compute_s, (26000 - 20000 + 800) * 1e-6, 1e-12);
  EXPECT_EQ(w.images_per_step, 16);
  ASSERT_EQ(w.gradients.size(), 2u);
  EXPECT_EQ(w.gradients[0].name, "grad.fc.weight");
  EXPECT_EQ(w.gradients[0].bytes, 4000);
  EXPECT_NEAR(w.gradients[0].ready_s, 3000e-6, 1e-12);
  EXPECT_EQ(w.gradients[1].name, "grad.conv1.weight");
  EXPECT_NEAR(w.gradients[1].ready_s, 5500e-6, 1e-12);
  // One GPU: exactly the recorded compute.
  engine::Tunables s;
  EXPECT_NEAR(simulate_step(two_level(), w, 1, s).step_s, w.compute_s, 1e-15);
}

TEST(TimelineWorkload, WhatIsMissingIsNamed) {
  auto what = [](const std::string& text) {
    try {
      workload_from_timeline(text, "t.json", 4);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(what("[").find("not valid JSON"), std::string::npos);
  EXPECT_NE(what("{}").find("not a JSON array"), std::string::npos);
  EXPECT_NE(what("[]").find("no FORWARD and BACKWARD spans"), std::string::npos);
  EXPECT_NE(what(R"([{"ph":"M","name":"thread_name","tid":1,"args":{"name":"train"}},
                     {"ph":"X","name":"FORWARD","tid":1,"ts":0,"dur":1,"args":{}},
                     {"ph":"X","name":"BACKWARD","tid":1,"ts":1,"dur":1,"args":{}}])")
                .find("no gradient was enqueued"),
            std::string::npos);
  EXPECT_THROW(workload_from_timeline(two_step_timeline(), "t.json", 0), InvalidArgument);
}

}  // namespace
}  // namespace tune
}  // namespace tessera
