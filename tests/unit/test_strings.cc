#include <gtest/gtest.h>

#include "common/strings.h"
#include "common/svg_plot.h"

namespace tessera {
namespace {

TEST(Strings, TrimRemovesOnlyTheGivenCharactersAtEitherEnd) {
  EXPECT_EQ(trim(""), "");
  EXPECT_EQ(trim(" \t "), "");
  EXPECT_EQ(trim("a"), "a");
  EXPECT_EQ(trim("\t a b \t"), "a b");  // inner space stays
  EXPECT_EQ(trim(" x\r"), "x\r");       // by default only spaces and tabs
  EXPECT_EQ(trim(" x\r\n", " \t\r\n"), "x");
  EXPECT_EQ(trim("\r\n", " \t\r\n"), "");
}

// The published FNV-1a 64 test vectors: checkpoints written on one machine must check on any.
TEST(Strings, Fnv1a64MatchesThePublishedVectors) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
  const std::string s = "foobar";
  EXPECT_EQ(fnv1a64(s.data(), 3), fnv1a64("foo"));
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// A linear plot: the first and last points sit on the axes' ends, the grid steps are 1-2-5
// numbers, and a fixed range clamps what lies outside it.
TEST(SvgPlot, LinearAxesMapTheDataRangeOntoThePlot) {
  Plot p;
  p.title = "loss";
  p.x.label = "step";
  p.y.label = "value";
  p.series = {{"loss", {{0, 2.0}, {350, 1.0}, {700, 0.0}}}};
  const std::string svg = plot_svg(p);
  // x: 0..700 over pixels 70..550; y: 2..0 over pixels 40..390 (top is high).
  EXPECT_NE(svg.find("points=\"70,40 310,215 550,390 \""), std::string::npos) << svg;
  // 700 / 6 rounds up to steps of 200; 2 / 6 to steps of 0.5.
  for (const char* label : {">0<", ">200<", ">600<", ">0.5<", ">1.5<", ">2<"}) {
    EXPECT_NE(svg.find(label), std::string::npos) << label;
  }
  EXPECT_EQ(svg.find(">100<"), std::string::npos);
  EXPECT_EQ(svg.find(">800<"), std::string::npos);
  p.y.lo = 0.5;
  p.y.hi = 1.5;
  const std::string clamped = plot_svg(p);
  EXPECT_NE(clamped.find("points=\"70,40 310,215 550,390 \""), std::string::npos) << clamped;
  const std::string two = plots_svg({p, p});
  EXPECT_NE(two.find("height=\"880\""), std::string::npos);
  EXPECT_NE(two.find("translate(0 440)"), std::string::npos);
}

}  // namespace
}  // namespace tessera
