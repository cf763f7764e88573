// The selector: the TESSERA_ALLREDUCE grammar, can_use, choice by cost (formula and measured),
// the calibration fit, and the cost table's JSON.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "comm/selector.h"
#include "common/error.h"

namespace tessera {
namespace comm {
namespace {

constexpr size_t kMax = std::numeric_limits<size_t>::max();

TEST(Override, Grammar) {
  EXPECT_TRUE(parse_override("").empty());
  EXPECT_TRUE(parse_override("  ").empty());
  auto one = parse_override("ring");
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].algorithm, Algorithm::kRing);
  EXPECT_EQ(one[0].lo, 0u);
  EXPECT_EQ(one[0].hi, kMax);
  auto two = parse_override("dbtree:0-65536;ring:65537-max");
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].algorithm, Algorithm::kDbtree);
  EXPECT_EQ(two[0].hi, 65536u);
  EXPECT_EQ(two[1].lo, 65537u);
  EXPECT_EQ(two[1].hi, kMax);
  auto suffixes = parse_override(" rhd : 0 - 64K ; hierarchical:65537-1M; ");
  ASSERT_EQ(suffixes.size(), 2u);
  EXPECT_EQ(suffixes[0].hi, 65536u);
  EXPECT_EQ(suffixes[1].algorithm, Algorithm::kHierarchical);
  // The bad part is quoted, and what is accepted is said.
  const std::pair<const char*, const char*> bad[] = {
      {"ring:0-10;warp:11-max", "'warp:11-max'"},
      {"ring:10", "'ring:10'"},
      {"ring:5-1", "'ring:5-1'"},
      {"ring:0-1X", "'ring:0-1X'"},
      {"ring:0-100;rhd:50-200", "'rhd:50-200'"},
      {"ring;;rhd", "''"},
  };
  for (const auto& b : bad) {
    try {
      parse_override(b.first);
      ADD_FAILURE() << b.first << " was accepted";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("bad part ") + b.second), std::string::npos) << what;
      EXPECT_NE(what.find("accepted"), std::string::npos) << what;
    }
  }
}

TEST(Selector, OverrideWinsInsideItsRangeAndAutoOutside) {
  CostTable t;
  const CommShape shape{4, 1, 4, true};
  const auto ranges = parse_override("dbtree:0-1023;auto:1024-2047;mpi:2048-4095");
  EXPECT_EQ(select_allreduce(t, ranges, shape, 10), Algorithm::kDbtree);
  EXPECT_EQ(select_allreduce(t, ranges, shape, 3000), Algorithm::kMpi);
  EXPECT_EQ(select_allreduce(t, ranges, shape, 1500), select_allreduce(t, {}, shape, 1500));
  EXPECT_EQ(select_allreduce(t, ranges, shape, 1 << 20), select_allreduce(t, {}, shape, 1 << 20));
}

TEST(Selector, HierarchicalNeedsUniformNodes) {
  const CommShape uneven{5, 3, 2, false};
  EXPECT_FALSE(can_use(Algorithm::kHierarchical, uneven));
  EXPECT_TRUE(can_use(Algorithm::kRing, uneven));
  CostTable t;
  for (size_t bytes : {8ul, 1ul << 20, 1ul << 27}) {
    EXPECT_NE(select_allreduce(t, {}, uneven, bytes), Algorithm::kHierarchical);
  }
  EXPECT_THROW(select_allreduce(t, parse_override("hierarchical"), uneven, 8), InvalidArgument);
}

TEST(Selector, FormulasFollowTheirCosts) {
  CostTable t;
  const CommShape one_node{4, 1, 4, true};
  // Shared memory beats messages on one node at every size with the built-in parameters.
  for (size_t bytes = 8; bytes <= (size_t{1} << 28); bytes *= 8) {
    EXPECT_EQ(select_allreduce(t, {}, one_node, bytes), Algorithm::kHierarchical) << bytes;
  }
  // Predictions grow with size.
  for (Algorithm a : all_algorithms()) {
    EXPECT_LT(predict_us(t, a, one_node, 1024), predict_us(t, a, one_node, 1 << 24))
        << algorithm_name(a);
  }
  // Without shared memory between nodes, large messages prefer bandwidth-optimal ring to
  // recursive doubling at two ranks per ... many nodes, one rank each.
  const CommShape flat{16, 16, 1, true};
  EXPECT_LT(predict_us(t, Algorithm::kRing, flat, 1 << 26),
            predict_us(t, Algorithm::kDbtree, flat, 1 << 26));
}

TEST(Selector, MeasuredCurvesDecideWhenTheShapeMatches) {
  CostTable t;
  MeasuredCurve ring{Algorithm::kRing, 2, 1, {{8, 10.0}, {1024, 20.0}, {1 << 20, 100.0}}};
  MeasuredCurve rhd{Algorithm::kRhd, 2, 1, {{8, 5.0}, {1024, 30.0}, {1 << 20, 300.0}}};
  // Everything else measured as slow.
  t.measured = {ring, rhd};
  for (Algorithm a :
       {Algorithm::kDbtree, Algorithm::kMulticolor, Algorithm::kHierarchical, Algorithm::kMpi}) {
    t.measured.push_back({a, 2, 1, {{8, 1000.0}, {1 << 20, 100000.0}}});
  }
  const CommShape shape{2, 1, 2, true};
  EXPECT_EQ(select_allreduce(t, {}, shape, 8), Algorithm::kRhd);
  EXPECT_EQ(select_allreduce(t, {}, shape, 1 << 20), Algorithm::kRing);
  // Interpolation is log-log between points and exact at them.
  EXPECT_DOUBLE_EQ(predict_us(t, Algorithm::kRing, shape, 1024), 20.0);
  const double mid = predict_us(t, Algorithm::kRing, shape, 91);  // ~ geometric mid of 8..1024
  EXPECT_GT(mid, 10.0);
  EXPECT_LT(mid, 20.0);
  // Past the last point: linear in bytes.
  EXPECT_DOUBLE_EQ(predict_us(t, Algorithm::kRing, shape, 1 << 21), 200.0);
  // A different shape falls back to the formulas.
  const CommShape other{4, 1, 4, true};
  EXPECT_EQ(predict_us(t, Algorithm::kRing, other, 1024),
            predict_us(CostTable{}, Algorithm::kRing, other, 1024));
}

TEST(Selector, FitLinkRecoversParameters) {
  // y = 3 * a + 0.001 * b exactly.
  std::vector<std::array<double, 3>> rows;
  for (double b : {100.0, 1e4, 1e6, 1e8}) rows.push_back({2.0, b, 3 * 2.0 + 0.001 * b});
  const LinkCost l = fit_link(rows);
  EXPECT_NEAR(l.alpha_us, 3.0, 1e-6);
  EXPECT_NEAR(l.beta_us_per_byte, 0.001, 1e-9);
  EXPECT_THROW(fit_link({{2.0, 5.0, 1.0}}), InvalidArgument);
}

TEST(CostTableJson, RoundTripsAndRejectsBadFields) {
  CostTable t;
  t.p2p = {1.5, 0.0002};
  t.shm = {0.25, 0.00005};
  t.reduce_us_per_byte = 0.0001;
  t.measured.push_back({Algorithm::kHierarchical, 2, 1, {{8, 0.3}, {1 << 20, 90.0}}});
  const CostTable u = cost_table_from_json(cost_table_to_json(t));
  EXPECT_EQ(u.p2p.alpha_us, 1.5);
  EXPECT_EQ(u.shm.beta_us_per_byte, 0.00005);
  ASSERT_EQ(u.measured.size(), 1u);
  EXPECT_EQ(u.measured[0].algorithm, Algorithm::kHierarchical);
  EXPECT_EQ(u.measured[0].points[1].second, 90.0);
  EXPECT_THROW(cost_table_from_json("{"), InvalidArgument);
  EXPECT_THROW(cost_table_from_json(R"({"p2p": {"alpha_us": "fast"}})"), InvalidArgument);
  EXPECT_THROW(cost_table_from_json(R"({"measured": [{"algorithm": "warp", "ranks": 2,
      "nodes": 1, "points": []}]})"),
               InvalidArgument);
  EXPECT_THROW(cost_table_from_json(R"({"measured": [{"algorithm": "ring", "ranks": 2,
      "nodes": 1, "points": [[8, -1]]}]})"),
               InvalidArgument);
}

TEST(AlgorithmNames, RoundTripAndUnknownListsAccepted) {
  for (Algorithm a : all_algorithms()) EXPECT_EQ(parse_algorithm(algorithm_name(a)), a);
  EXPECT_EQ(parse_algorithm("auto"), Algorithm::kAuto);
  try {
    parse_algorithm("nccl");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(
        std::string(e.what()).find("accepted: auto ring rhd dbtree multicolor hierarchical mpi"),
        std::string::npos);
  }
}

}  // namespace
}  // namespace comm
}  // namespace tessera
