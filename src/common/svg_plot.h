// Line plots as SVG text (pure): the simulator's scaling curves (tune/simulator_plot.h) and the
// trainer's loss and metric curves (train/curve.h) draw through the same code.
#pragma once

#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

struct PlotSeries {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in this order
};

struct PlotAxis {
  std::string label;
  // Log scale (base 10; values below 1 are drawn at 1). Its ticks are the data's own x values;
  // a linear axis gets 1-2-5 steps.
  bool log = false;
  // The range drawn; NaN: the data's. Values outside are drawn at the edge.
  double lo = NAN, hi = NAN;
  double step = 0;  // grid step of a linear axis; 0: a 1-2-5 step giving about 6 lines
};

struct Plot {
  std::string title;
  PlotAxis x, y;
  std::vector<PlotSeries> series;
};

// One plot, 720 x 440 pixels, a legend on the right.
std::string plot_svg(const Plot& plot);
// Plots stacked top to bottom in one document.
std::string plots_svg(const std::vector<Plot>& plots);

}  // namespace tessera
