// Minimal SVG charts written as text (no plotting library): line charts with markers
// and a legend, and horizontal stacked bars. Every series is a
// <g class="series" data-series="LABEL"> holding one <polyline> and its point markers,
// and every series has a legend entry <text class="legend-label">LABEL</text>, so
// tests and scripts can find series by label.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace treespec::bench::svg {

struct Series {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in order
};

struct LineChart {
  std::string title;
  std::string subtitle;
  std::string x_label;
  std::string y_label;
  std::vector<Series> series;
  // Categorical x: the given values at evenly spaced positions (batch sizes 1,2,4,8);
  // otherwise a linear axis.
  bool x_categorical = false;
  std::vector<double> x_categories;
  bool y_from_zero = true;
  double y_min_top = 0.0;     // the y axis reaches at least this
  bool has_ref_line = false;  // dashed horizontal line at y = ref_y (e.g. speedup 1)
  double ref_y = 0.0;
};

struct Bar {
  std::string label;
  std::vector<double> values;  // one per segment, stacked left to right
};

struct StackedBarChart {
  std::string title;
  std::string subtitle;
  std::string x_label;
  std::vector<std::string> segments;  // legend names, one per value
  std::vector<Bar> bars;
};

std::string render(const LineChart& chart);
std::string render(const StackedBarChart& chart);

// Escapes & < > " ' for XML text and attribute values.
std::string xml_escape(const std::string& s);

}  // namespace treespec::bench::svg
