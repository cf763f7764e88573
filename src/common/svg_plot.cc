#include "common/svg_plot.h"

#include <algorithm>
#include <sstream>

namespace tessera {
namespace {

constexpr double kW = 720, kH = 440, kLeft = 70, kRight = 170, kTop = 40, kBottom = 50;
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                               "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f"};

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

// 1, 2 or 5 times a power of ten, about a sixth of `span`.
double nice_step(double span) {
  if (!(span > 0)) return 1;
  const double raw = span / 6, ten = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * ten >= raw) return m * ten;
  }
  return 10 * ten;
}

// An axis's value -> pixel map over [px0, px1], clamped to the range drawn.
struct Scale {
  double lo = 0, hi = 1, px0 = 0, px1 = 1;
  bool log = false;
  double at(double v) const {
    const auto f = [&](double u) { return log ? std::log10(std::max(1.0, u)) : u; };
    const double a = f(lo), b = f(hi), t = f(std::min(hi, std::max(lo, v)));
    return px0 + (b > a ? (t - a) / (b - a) : 0.5) * (px1 - px0);
  }
};

Scale scale_of(const Plot& p, bool x, double px0, double px1) {
  const PlotAxis& a = x ? p.x : p.y;
  double lo = 1e300, hi = -1e300;
  for (const PlotSeries& s : p.series) {
    for (const auto& pt : s.points) {
      lo = std::min(lo, x ? pt.first : pt.second);
      hi = std::max(hi, x ? pt.first : pt.second);
    }
  }
  if (!(lo <= hi)) lo = hi = a.log ? 1 : 0;
  Scale s;
  s.lo = std::isnan(a.lo) ? lo : a.lo;
  s.hi = std::isnan(a.hi) ? hi : a.hi;
  if (s.hi <= s.lo) s.hi = s.lo + 1;
  s.log = a.log;
  s.px0 = px0;
  s.px1 = px1;
  return s;
}

// Where the grid lines and labels go: the data's x values on a log axis, steps otherwise.
std::vector<double> ticks(const Plot& p, const PlotAxis& a, const Scale& s, bool x) {
  std::vector<double> t;
  if (a.log) {
    for (const PlotSeries& ser : p.series) {
      for (const auto& pt : ser.points) t.push_back(x ? pt.first : pt.second);
    }
    std::sort(t.begin(), t.end());
    t.erase(std::unique(t.begin(), t.end()), t.end());
    return t;
  }
  const double step = a.step > 0 ? a.step : nice_step(s.hi - s.lo);
  for (double v = std::ceil(s.lo / step - 1e-9) * step; v <= s.hi + step * 1e-9; v += step) {
    t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  }
  return t;
}

void draw_grid(std::ostringstream& o, const Plot& p, const Scale& X, const Scale& Y) {
  for (double v : ticks(p, p.y, Y, false)) {
    o << "<line x1=\"" << kLeft << "\" x2=\"" << kW - kRight << "\" y1=\"" << Y.at(v) << "\" y2=\""
      << Y.at(v) << "\" stroke=\"#ddd\"/>\n";
    o << "<text x=\"" << kLeft - 6 << "\" y=\"" << Y.at(v) + 4 << "\" text-anchor=\"end\">" << v
      << "</text>\n";
  }
  double last_x = -1e9;
  for (double v : ticks(p, p.x, X, true)) {
    if (X.at(v) - last_x < 28) continue;  // keep labels apart
    last_x = X.at(v);
    o << "<line x1=\"" << X.at(v) << "\" x2=\"" << X.at(v) << "\" y1=\"" << kTop << "\" y2=\""
      << kH - kBottom << "\" stroke=\"#eee\"/>\n";
    o << "<text x=\"" << X.at(v) << "\" y=\"" << kH - kBottom + 16 << "\" text-anchor=\"middle\">"
      << v << "</text>\n";
  }
  o << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft << "\" y1=\"" << kTop << "\" y2=\""
    << kH - kBottom << "\" stroke=\"black\"/>\n";
  o << "<line x1=\"" << kLeft << "\" x2=\"" << kW - kRight << "\" y1=\"" << kH - kBottom
    << "\" y2=\"" << kH - kBottom << "\" stroke=\"black\"/>\n";
  o << "<text x=\"" << (kLeft + kW - kRight) / 2 << "\" y=\"" << kH - 12
    << "\" text-anchor=\"middle\">" << escape(p.x.label) << "</text>\n";
  const double mid = (kTop + kH - kBottom) / 2;
  o << "<text x=\"18\" y=\"" << mid << "\" transform=\"rotate(-90 18 " << mid
    << ")\" text-anchor=\"middle\">" << escape(p.y.label) << "</text>\n";
}

void draw_series(std::ostringstream& o, const Plot& p, const Scale& X, const Scale& Y) {
  for (size_t i = 0; i < p.series.size(); ++i) {
    const PlotSeries& s = p.series[i];
    const char* c = kColors[i % 8];
    o << "<polyline fill=\"none\" stroke=\"" << c << "\" stroke-width=\"2\" points=\"";
    for (const auto& pt : s.points) o << X.at(pt.first) << "," << Y.at(pt.second) << " ";
    o << "\"/>\n";
    for (const auto& pt : s.points) {
      o << "<circle cx=\"" << X.at(pt.first) << "\" cy=\"" << Y.at(pt.second)
        << "\" r=\"3\" fill=\"" << c << "\"/>\n";
    }
    const double ly = kTop + 10 + 18 * static_cast<double>(i);
    o << "<line x1=\"" << kW - kRight + 12 << "\" x2=\"" << kW - kRight + 32 << "\" y1=\"" << ly
      << "\" y2=\"" << ly << "\" stroke=\"" << c << "\" stroke-width=\"2\"/>\n";
    o << "<text x=\"" << kW - kRight + 38 << "\" y=\"" << ly + 4 << "\">" << escape(s.label)
      << "</text>\n";
  }
}

// One plot's elements, `dy` pixels down the document.
void draw_plot(std::ostringstream& o, const Plot& p, double dy) {
  o << "<g transform=\"translate(0 " << dy << ")\">\n";
  o << "<text x=\"" << kW / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">"
    << escape(p.title) << "</text>\n";
  const Scale X = scale_of(p, true, kLeft, kW - kRight);
  const Scale Y = scale_of(p, false, kH - kBottom, kTop);
  draw_grid(o, p, X, Y);
  draw_series(o, p, X, Y);
  o << "</g>\n";
}

}  // namespace

std::string plots_svg(const std::vector<Plot>& plots) {
  const double height = kH * static_cast<double>(std::max<size_t>(1, plots.size()));
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  for (size_t i = 0; i < plots.size(); ++i) draw_plot(o, plots[i], kH * static_cast<double>(i));
  o << "</svg>\n";
  return o.str();
}

std::string plot_svg(const Plot& plot) { return plots_svg({plot}); }

}  // namespace tessera
