#pragma once
// Line charts of benchmark results for `ftrun bench`: tokens/s against batch
// size per configuration, peak memory against batch size with the estimate
// dashed beside the measurement, seconds per step along a run. Written as SVG
// by hand so that no plotting library is needed at run time and the result is
// a file any browser opens.
#include <string>
#include <vector>

namespace ftrun {

struct ChartSeries {
  std::string label;         // legend text
  std::vector<double> x, y;  // same length; points drawn in the given order
  bool dashed = false;       // e.g. an estimate beside its measurement
  int colour = -1;           // index into the palette; -1: the series' own index
};

struct Chart {
  std::string title, x_label, y_label;
  std::vector<ChartSeries> series;
  bool y_from_zero = true;  // the y axis starts at 0 unless false
};

// The chart as a complete SVG document (UTF-8 text). Points with a NaN or
// infinite coordinate are left out, and the line breaks there.
std::string svg_line_chart(const Chart& chart);

// Writes it to `path` atomically (a temporary file in the same directory, then
// rename); throws ft::Error when the file cannot be written.
void write_svg_line_chart(const Chart& chart, const std::string& path);

}  // namespace ftrun
