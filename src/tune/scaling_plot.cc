#include "tune/scaling_plot.h"

namespace tessera {
namespace tune {

std::string efficiency_plot_svg(const std::string& title, const std::vector<Series>& series) {
  Plot p;
  p.title = title;
  p.x.label = "GPUs (log scale)";
  p.x.log = true;
  p.y.label = "scaling efficiency";
  p.y.lo = 0;
  p.y.hi = 1.05;  // room above 1.0, which superlinear points reach
  p.y.step = 0.1;
  p.series = series;
  return plot_svg(p);
}

}  // namespace tune
}  // namespace tessera
