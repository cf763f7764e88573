#include "tune/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace tessera {
namespace tune {
namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

}  // namespace

std::string efficiency_plot_svg(const std::string& title, const std::vector<Series>& series) {
  const double W = 720, H = 440, left = 70, right = 170, top = 40, bottom = 50;
  double xmin = 1e300, xmax = -1e300;
  for (const Series& s : series) {
    for (const auto& p : s.points) {
      xmin = std::min(xmin, p.first);
      xmax = std::max(xmax, p.first);
    }
  }
  if (!(xmin <= xmax)) xmin = xmax = 1;
  const double lx0 = std::log10(std::max(1.0, xmin)), lx1 = std::log10(std::max(1.0, xmax));
  const double span = lx1 > lx0 ? lx1 - lx0 : 1;
  auto X = [&](double g) {
    return left + (std::log10(std::max(1.0, g)) - lx0) / span * (W - left - right);
  };
  auto Y = [&](double e) {
    return top + (1 - std::min(1.05, std::max(0.0, e)) / 1.05) * (H - top - bottom);
  };
  static const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                 "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f"};
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">"
    << escape(title) << "</text>\n";
  // Axes, efficiency grid every 0.1, GPU ticks at powers of ten and the series' own counts.
  for (int i = 0; i <= 10; ++i) {
    const double e = i / 10.0;
    o << "<line x1=\"" << left << "\" x2=\"" << W - right << "\" y1=\"" << Y(e) << "\" y2=\""
      << Y(e) << "\" stroke=\"#ddd\"/>\n";
    o << "<text x=\"" << left - 6 << "\" y=\"" << Y(e) + 4 << "\" text-anchor=\"end\">" << e
      << "</text>\n";
  }
  std::vector<double> ticks;
  for (const Series& s : series) {
    for (const auto& p : s.points) ticks.push_back(p.first);
  }
  std::sort(ticks.begin(), ticks.end());
  ticks.erase(std::unique(ticks.begin(), ticks.end()), ticks.end());
  double last_x = -1e9;
  for (double t : ticks) {
    if (X(t) - last_x < 28) continue;  // keep labels apart
    last_x = X(t);
    o << "<line x1=\"" << X(t) << "\" x2=\"" << X(t) << "\" y1=\"" << top << "\" y2=\""
      << H - bottom << "\" stroke=\"#eee\"/>\n";
    o << "<text x=\"" << X(t) << "\" y=\"" << H - bottom + 16 << "\" text-anchor=\"middle\">" << t
      << "</text>\n";
  }
  o << "<line x1=\"" << left << "\" x2=\"" << left << "\" y1=\"" << top << "\" y2=\"" << H - bottom
    << "\" stroke=\"black\"/>\n";
  o << "<line x1=\"" << left << "\" x2=\"" << W - right << "\" y1=\"" << H - bottom << "\" y2=\""
    << H - bottom << "\" stroke=\"black\"/>\n";
  o << "<text x=\"" << (left + W - right) / 2 << "\" y=\"" << H - 12
    << "\" text-anchor=\"middle\">GPUs (log scale)</text>\n";
  o << "<text x=\"18\" y=\"" << (top + H - bottom) / 2 << "\" transform=\"rotate(-90 18 "
    << (top + H - bottom) / 2 << ")\" text-anchor=\"middle\">scaling efficiency</text>\n";
  for (size_t i = 0; i < series.size(); ++i) {
    const char* c = colors[i % 8];
    o << "<polyline fill=\"none\" stroke=\"" << c << "\" stroke-width=\"2\" points=\"";
    for (const auto& p : series[i].points) o << X(p.first) << "," << Y(p.second) << " ";
    o << "\"/>\n";
    for (const auto& p : series[i].points) {
      o << "<circle cx=\"" << X(p.first) << "\" cy=\"" << Y(p.second) << "\" r=\"3\" fill=\"" << c
        << "\"/>\n";
    }
    const double ly = top + 10 + 18 * static_cast<double>(i);
    o << "<line x1=\"" << W - right + 12 << "\" x2=\"" << W - right + 32 << "\" y1=\"" << ly
      << "\" y2=\"" << ly << "\" stroke=\"" << c << "\" stroke-width=\"2\"/>\n";
    o << "<text x=\"" << W - right + 38 << "\" y=\"" << ly + 4 << "\">" << escape(series[i].label)
      << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace tune
}  // namespace tessera
