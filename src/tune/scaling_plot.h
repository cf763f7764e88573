// The simulator's picture: scaling efficiency against GPU count (log scale), one line per
// series (common/svg_plot.h draws it). Pure.
#pragma once

#include <string>
#include <vector>

#include "common/svg_plot.h"

namespace tessera {
namespace tune {

using Series = PlotSeries;  // (gpus, efficiency) points

std::string efficiency_plot_svg(const std::string& title, const std::vector<Series>& series);

}  // namespace tune
}  // namespace tessera
