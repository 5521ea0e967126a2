// SVG line charts for ftrun bench (svg_chart.hpp). The plot area is fixed, so
// charts looked at side by side stay comparable; the canvas grows to the
// right and down for the legend, whose labels name whole configurations.
#include "svg_chart.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>

#include <ft/core/error.hpp>

namespace ftrun {
namespace {

constexpr double kPlotCanvasWidth = 800, kHeight = 450;  // the canvas without the legend
constexpr double kLeft = 72, kTop = 44, kBottom = 394;  // the plot area; its right edge is 20 px from the legend
constexpr double kLegendRow = 20;
constexpr double kCharWidth = 7;  // a generous average at 12px sans-serif: text has no measured width in SVG
constexpr std::size_t kLegendMaxChars = 72;

// Hues far apart, and lightness varied too, so that eight lines on one chart can still be told apart.
constexpr const char* kPalette[] = {"#1f5fbf", "#e8710a", "#188038", "#c5221f",
                                    "#7b3fc4", "#8d5524", "#d01c8b", "#12939a"};

struct Range {
  double lo, hi;
};

// An axis whose ends are multiples of its tick step.
struct Axis {
  double lo, hi, step;
  int ticks() const { return static_cast<int>(std::lround((hi - lo) / step)); }
  double tick(int i) const {
    const double v = lo + i * step;
    return std::abs(v) < step * 1e-9 ? 0.0 : v;  // no "-0" or 1e-17 from accumulated rounding
  }
};

struct Frame {
  double left, top, right, bottom;
  Axis x, y;
  double px(double v) const { return left + (v - x.lo) / (x.hi - x.lo) * (right - left); }
  double py(double v) const { return bottom - (v - y.lo) / (y.hi - y.lo) * (bottom - top); }
};

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void appendf(std::string& out, const char* format, ...) {
  std::va_list args, again;
  va_start(args, format);
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  if (n > 0) {
    const std::size_t start = out.size();
    out.resize(start + static_cast<std::size_t>(n) + 1);
    std::vsnprintf(out.data() + start, static_cast<std::size_t>(n) + 1, format, again);
    out.pop_back();  // the terminating NUL vsnprintf writes
  }
  va_end(again);
}

// Control characters other than tab and newline are not allowed anywhere in XML 1.0, so they are dropped.
std::string escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n') out += c;
    }
  }
  return out;
}

bool is_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

std::size_t code_points(const std::string& text) {
  return static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) { return !is_continuation(c); }));
}

// Cut at a code point boundary so a long name still leaves valid UTF-8.
std::string fit(const std::string& text, std::size_t max_chars) {
  if (code_points(text) <= max_chars) return text;
  std::size_t end = 0;
  for (std::size_t kept = 0; end < text.size(); ++end)
    if (!is_continuation(text[end]) && kept++ == max_chars - 1) break;
  return text.substr(0, end) + "\u2026";
}

bool finite_point(const ChartSeries& s, std::size_t i) { return std::isfinite(s.x[i]) && std::isfinite(s.y[i]); }

std::size_t point_count(const ChartSeries& s) { return std::min(s.x.size(), s.y.size()); }

Range data_range(const Chart& chart, bool along_x) {
  Range r{std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()};
  for (const ChartSeries& s : chart.series)
    for (std::size_t i = 0; i < point_count(s); ++i)
      if (finite_point(s, i)) {
        const double v = along_x ? s.x[i] : s.y[i];
        r = {std::min(r.lo, v), std::max(r.hi, v)};
      }
  if (r.lo > r.hi) return {0, 1};
  return r;
}

Range padded(Range r, bool from_zero) {
  if (from_zero) r = {std::min(r.lo, 0.0), std::max(r.hi, 0.0)};
  if (r.hi > r.lo) return r;
  if (r.lo == 0) return {from_zero ? 0.0 : -1.0, 1.0};
  // One distinct value: room on both sides puts it inside the plot instead of on a zero-width axis.
  const double pad = std::abs(r.lo) * 0.1;
  return {r.lo - pad, r.hi + pad};
}

// The smallest of 1, 2, 2.5, 5 x 10^k that cuts the span into at most five steps.
double nice_step(double span) {
  const double raw = span / 5;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 2.5, 5.0})
    if (m * magnitude >= raw * (1 - 1e-9)) return m * magnitude;
  return 10 * magnitude;
}

Axis nice_axis(Range r) {
  const double step = nice_step(r.hi - r.lo);
  return {std::floor(r.lo / step + 1e-9) * step, std::ceil(r.hi / step - 1e-9) * step, step};
}

// 1500 -> "1.5k", 2.5e6 -> "2.5M", 3e9 -> "3G", 0.25 -> "0.25": as many decimals as the value needs at the axis'
// step, so 1200 and 1225 do not both read "1.2k".
std::string tick_label(double v, double step) {
  if (v == 0) return "0";
  char buffer[64];
  if (std::abs(v) < 1e-3) {
    std::snprintf(buffer, sizeof buffer, "%.3g", v);
    return buffer;
  }
  struct Unit {
    double scale;
    const char* suffix;
  };
  constexpr Unit kUnits[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}, {1, ""}};
  const Unit* unit = std::find_if(std::begin(kUnits), std::end(kUnits) - 1,
                                  [&](const Unit& u) { return std::abs(v) >= u.scale; });
  for (int decimals = 0; decimals <= 6; ++decimals) {
    std::snprintf(buffer, sizeof buffer, "%.*f", decimals, v / unit->scale);
    if (std::abs(std::strtod(buffer, nullptr) * unit->scale - v) <= step * 1e-6) break;
  }
  return std::string(buffer) + unit->suffix;
}

double legend_width(const Chart& chart) {
  if (chart.series.empty()) return 0;
  std::size_t chars = 0;
  for (const ChartSeries& s : chart.series) chars = std::max(chars, code_points(fit(s.label, kLegendMaxChars)));
  return 38 + static_cast<double>(chars) * kCharWidth;
}

const char* colour_of(const ChartSeries& s, std::size_t index) {
  constexpr long n = std::size(kPalette);
  const long c = s.colour >= 0 ? s.colour : static_cast<long>(index);
  return kPalette[c % n];
}

void draw_grid(std::string& out, const Frame& f) {
  out += "<g stroke=\"#e3e3e3\" stroke-width=\"1\">\n";
  for (int i = 0; i <= f.x.ticks(); ++i) {
    const double x = f.px(f.x.tick(i));
    appendf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", x, f.top, x, f.bottom);
  }
  for (int i = 0; i <= f.y.ticks(); ++i) {
    const double y = f.py(f.y.tick(i));
    appendf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", f.left, y, f.right, y);
  }
  out += "</g>\n";
}

void draw_axes(std::string& out, const Frame& f, const Chart& chart) {
  appendf(out, "<path d=\"M%.1f %.1fV%.1fH%.1f\" fill=\"none\" stroke=\"#444\" stroke-width=\"1\"/>\n", f.left, f.top,
          f.bottom, f.right);
  out += "<g font-size=\"12\" fill=\"#333\">\n";
  for (int i = 0; i <= f.x.ticks(); ++i) {
    const double v = f.x.tick(i);
    appendf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", f.px(v), f.bottom + 18,
            tick_label(v, f.x.step).c_str());
  }
  for (int i = 0; i <= f.y.ticks(); ++i) {
    const double v = f.y.tick(i);
    appendf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", f.left - 8, f.py(v) + 4,
            tick_label(v, f.y.step).c_str());
  }
  out += "</g>\n";

  const double middle_x = (f.left + f.right) / 2, middle_y = (f.top + f.bottom) / 2;
  const auto plot_chars = [](double pixels) { return static_cast<std::size_t>(pixels / kCharWidth); };
  out += "<g font-size=\"13\" fill=\"#222\" text-anchor=\"middle\">\n";
  appendf(out, "<text x=\"%.1f\" y=\"%.1f\">", middle_x, f.bottom + 42);
  out += escape(fit(chart.x_label, plot_chars(f.right - f.left))) + "</text>\n";
  appendf(out, "<text transform=\"translate(18 %.1f) rotate(-90)\">", middle_y);
  out += escape(fit(chart.y_label, plot_chars(f.bottom - f.top))) + "</text>\n";
  out += "</g>\n";
}

// Hollow markers tell an estimate's points from a measurement's where the two lines cross.
void append_marker(std::string& out, double x, double y, const char* colour, bool dashed) {
  if (dashed)
    appendf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#fff\" stroke=\"%s\" stroke-width=\"1.5\"/>\n", x, y,
            colour);
  else
    appendf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", x, y, colour);
}

const char* dash_attribute(bool dashed) { return dashed ? " stroke-dasharray=\"6 4\"" : ""; }

// A point that is not finite breaks the line rather than being bridged: a gap shows a missing measurement
// (a batch size that ran out of memory, say) instead of inventing one.
void draw_series(std::string& out, const Frame& f, const ChartSeries& s, const char* colour) {
  std::string points;
  std::size_t in_run = 0;
  const auto flush = [&] {
    if (in_run >= 2)
      appendf(out, "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s/>\n", points.c_str(),
              colour, dash_attribute(s.dashed));
    points.clear();
    in_run = 0;
  };
  for (std::size_t i = 0; i < point_count(s); ++i) {
    if (!finite_point(s, i)) {
      flush();
      continue;
    }
    appendf(points, "%s%.1f,%.1f", points.empty() ? "" : " ", f.px(s.x[i]), f.py(s.y[i]));
    ++in_run;
  }
  flush();
  for (std::size_t i = 0; i < point_count(s); ++i)
    if (finite_point(s, i)) append_marker(out, f.px(s.x[i]), f.py(s.y[i]), colour, s.dashed);
}

void draw_legend(std::string& out, const Chart& chart, double x) {
  out += "<g font-size=\"12\" fill=\"#222\">\n";
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const ChartSeries& s = chart.series[i];
    const char* colour = colour_of(s, i);
    const double y = kTop + 8 + kLegendRow * static_cast<double>(i);
    appendf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>\n", x, y,
            x + 26, y, colour, dash_attribute(s.dashed));
    append_marker(out, x + 13, y, colour, s.dashed);
    appendf(out, "<text x=\"%.1f\" y=\"%.1f\">", x + 34, y + 4);
    out += escape(fit(s.label, kLegendMaxChars)) + "</text>\n";
  }
  out += "</g>\n";
}

}  // namespace

std::string svg_line_chart(const Chart& chart) {
  const double legend = legend_width(chart);
  const double right = kPlotCanvasWidth - 20;
  const double width = kPlotCanvasWidth + legend;
  const double height = std::max(kHeight, kTop + 8 + kLegendRow * static_cast<double>(chart.series.size()));
  const Frame frame{kLeft,
                    kTop,
                    right,
                    kBottom,
                    nice_axis(padded(data_range(chart, true), false)),
                    nice_axis(padded(data_range(chart, false), chart.y_from_zero))};

  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  appendf(out,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
          "font-family=\"Helvetica, Arial, sans-serif\">\n",
          width, height, width, height);
  out += "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n";
  appendf(out, "<text x=\"%.1f\" y=\"26\" font-size=\"16\" font-weight=\"bold\" fill=\"#111\" text-anchor=\"middle\">",
          width / 2);
  out += escape(fit(chart.title, static_cast<std::size_t>(width / 9))) + "</text>\n";
  draw_grid(out, frame);
  draw_axes(out, frame, chart);
  for (std::size_t i = 0; i < chart.series.size(); ++i)
    draw_series(out, frame, chart.series[i], colour_of(chart.series[i], i));
  draw_legend(out, chart, right + 16);
  out += "</svg>\n";
  return out;
}

void write_svg_line_chart(const Chart& chart, const std::string& path) {
  const std::string text = svg_line_chart(chart);
  const std::string temporary = path + ".tmp";
  std::FILE* file = std::fopen(temporary.c_str(), "wb");
  if (!file) throw ft::Error(path + ": cannot be written (" + std::strerror(errno) + ")");
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed || std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(temporary.c_str());
    throw ft::Error(path + ": cannot be written (" + reason + ")");
  }
}

}  // namespace ftrun
