// A line plot as SVG text: efficiency against GPU count (log scale), one line per series. Pure.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tessera {
namespace tune {

struct Series {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (gpus, efficiency)
};

std::string efficiency_plot_svg(const std::string& title, const std::vector<Series>& series);

}  // namespace tune
}  // namespace tessera
