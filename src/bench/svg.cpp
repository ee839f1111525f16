#include "bench/svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace treespec::bench::svg {

namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                    "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

// Plot area and legend geometry (pixels).
constexpr double kW = 760, kLeft = 70, kRight = 230, kTop = 56, kBottom = 60;

// A "nice" tick step (1, 2 or 5 times a power of ten) for about n ticks over range.
double nice_step(double range, int n) {
  if (!(range > 0)) return 1.0;
  const double raw = range / n;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

std::string fmt_tick(double v, double step) {
  if (std::fabs(v) < 1e-12) return "0";
  const int dec = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step)));
  return fmt::format("{:.{}f}", v, std::min(dec, 6));
}

std::string header(double h, const std::string& title, const std::string& subtitle) {
  std::string s = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text class=\"title\" x=\"12\" y=\"20\" font-size=\"15\" font-weight=\"bold\">{2}</text>\n"
      "<text class=\"subtitle\" x=\"12\" y=\"38\" fill=\"#555\">{3}</text>\n",
      kW, h, xml_escape(title), xml_escape(subtitle));
  return s;
}

std::string legend_entry(int i, const std::string& label, bool box) {
  const double x = kW - kRight + 20, y = kTop + 10 + 20 * i;
  const char* color = kPalette[i % kPaletteSize];
  std::string s = "<g class=\"legend\">";
  if (box) {
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"10\" fill=\"{}\"/>", x, y - 9, color);
  } else {
    s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"/>", x, y - 4,
                     x + 14, y - 4, color);
  }
  s += fmt::format("<text class=\"legend-label\" x=\"{}\" y=\"{}\">{}</text></g>\n", x + 20, y, xml_escape(label));
  return s;
}

}  // namespace

std::string xml_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default:
        // Control characters are not allowed in XML 1.0.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') o += ' ';
        else o += c;
    }
  }
  return o;
}

std::string render(const LineChart& c) {
  const double h = 440;
  const double pw = kW - kLeft - kRight, ph = h - kTop - kBottom;
  // Ranges.
  double x0 = 0, x1 = 1, y0 = 0, y1 = c.y_min_top;
  bool any = false;
  for (const auto& s : c.series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      if (!any) {
        x0 = x1 = x;
        if (!c.y_from_zero) y0 = y;
        any = true;
      }
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  }
  if (c.has_ref_line) {
    y0 = std::min(y0, c.ref_y);
    y1 = std::max(y1, c.ref_y);
  }
  if (c.y_from_zero) y0 = std::min(0.0, y0);
  if (y1 <= y0) y1 = y0 + 1;
  const double ystep = nice_step(y1 - y0, 5);
  y0 = std::floor(y0 / ystep) * ystep;
  y1 = std::ceil(y1 / ystep - 1e-9) * ystep;
  if (!c.x_categorical) {
    if (x1 <= x0) {
      x0 -= 1;
      x1 += 1;
    }
    const double pad = (x1 - x0) * 0.05;
    x0 -= pad;
    x1 += pad;
  }
  auto px = [&](double x) {
    if (c.x_categorical) {
      const auto& cat = c.x_categories;
      const auto it = std::find(cat.begin(), cat.end(), x);
      const double i = it == cat.end() ? 0 : static_cast<double>(it - cat.begin());
      const double n = static_cast<double>(std::max<size_t>(cat.size(), 1));
      return kLeft + pw * (i + 0.5) / n;
    }
    return kLeft + pw * (x - x0) / (x1 - x0);
  };
  auto py = [&](double y) { return kTop + ph * (1 - (y - y0) / (y1 - y0)); };

  std::string s = header(h, c.title, c.subtitle);
  s += "<g class=\"axes\" stroke=\"#444\" fill=\"none\">";
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/></g>\n", kLeft, kTop, pw, ph);
  // Y grid and ticks.
  s += "<g class=\"y-ticks\">";
  for (double v = y0; v <= y1 + ystep * 1e-6; v += ystep) {
    s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>", kLeft, py(v),
                     kLeft + pw, py(v));
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>", kLeft - 6, py(v) + 4,
                     fmt_tick(v, ystep));
  }
  s += "</g>\n<g class=\"x-ticks\">";
  if (c.x_categorical) {
    for (double v : c.x_categories) {
      s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>", px(v), kTop + ph + 18,
                       fmt_tick(v, 1));
    }
  } else {
    const double xstep = nice_step(x1 - x0, 6);
    for (double v = std::ceil(x0 / xstep) * xstep; v <= x1; v += xstep) {
      s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#eee\"/>", px(v), kTop,
                       px(v), kTop + ph);
      s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>", px(v), kTop + ph + 18,
                       fmt_tick(v, xstep));
    }
  }
  s += "</g>\n";
  s += fmt::format("<text class=\"x-label\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
                   kLeft + pw / 2, h - 18, xml_escape(c.x_label));
  s += fmt::format(
      "<text class=\"y-label\" x=\"18\" y=\"{:.1f}\" text-anchor=\"middle\" transform=\"rotate(-90 18 "
      "{:.1f})\">{}</text>\n",
      kTop + ph / 2, kTop + ph / 2, xml_escape(c.y_label));
  if (c.has_ref_line) {
    s += fmt::format(
        "<line class=\"ref\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#888\" "
        "stroke-dasharray=\"5,4\"/>\n",
        kLeft, py(c.ref_y), kLeft + pw, py(c.ref_y));
  }
  for (size_t i = 0; i < c.series.size(); ++i) {
    const auto& se = c.series[i];
    const char* color = kPalette[i % kPaletteSize];
    std::string pts;
    for (const auto& [x, y] : se.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      pts += fmt::format("{}{:.1f},{:.1f}", pts.empty() ? "" : " ", px(x), py(y));
    }
    s += fmt::format("<g class=\"series\" data-series=\"{}\">", xml_escape(se.label));
    s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>", pts, color);
    for (const auto& [x, y] : se.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      s += fmt::format(
          "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"><title>{}: ({}, {:.3g})</title></circle>", px(x),
          py(y), color, xml_escape(se.label), fmt_tick(x, 0.01), y);
    }
    s += "</g>\n";
  }
  for (size_t i = 0; i < c.series.size(); ++i) s += legend_entry(static_cast<int>(i), c.series[i].label, false);
  s += "</svg>\n";
  return s;
}

std::string render(const StackedBarChart& c) {
  const double bar_h = 18, gap = 8;
  const double label_w = 230;
  const double h = std::max(200.0, kTop + kBottom + static_cast<double>(c.bars.size()) * (bar_h + gap));
  const double left = label_w, pw = kW - left - kRight;
  double vmax = 0;
  for (const auto& b : c.bars) {
    double t = 0;
    for (double v : b.values) t += std::max(0.0, v);
    vmax = std::max(vmax, t);
  }
  if (vmax <= 0) vmax = 1;
  const double step = nice_step(vmax, 5);
  vmax = std::ceil(vmax / step - 1e-9) * step;
  auto px = [&](double v) { return left + pw * v / vmax; };

  std::string s = header(h, c.title, c.subtitle);
  const double plot_bottom = kTop + static_cast<double>(c.bars.size()) * (bar_h + gap);
  s += "<g class=\"x-ticks\">";
  for (double v = 0; v <= vmax + step * 1e-6; v += step) {
    s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>", px(v), kTop - 4,
                     px(v), plot_bottom);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>", px(v), plot_bottom + 16,
                     fmt_tick(v, step));
  }
  s += "</g>\n";
  s += fmt::format("<text class=\"x-label\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
                   left + pw / 2, plot_bottom + 36, xml_escape(c.x_label));
  for (size_t b = 0; b < c.bars.size(); ++b) {
    const auto& bar = c.bars[b];
    const double y = kTop + static_cast<double>(b) * (bar_h + gap);
    s += fmt::format("<g class=\"bar\" data-bar=\"{}\">", xml_escape(bar.label));
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>", left - 6, y + bar_h - 5,
                     xml_escape(bar.label));
    double acc = 0;
    for (size_t k = 0; k < bar.values.size(); ++k) {
      const double v = std::max(0.0, bar.values[k]);
      const std::string seg = k < c.segments.size() ? c.segments[k] : std::to_string(k);
      s += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\"><title>{}: {:.3g}</title></rect>",
          px(acc), y, px(acc + v) - px(acc), bar_h, kPalette[k % kPaletteSize], xml_escape(seg), v);
      acc += v;
    }
    s += "</g>\n";
  }
  for (size_t k = 0; k < c.segments.size(); ++k) s += legend_entry(static_cast<int>(k), c.segments[k], true);
  s += "</svg>\n";
  return s;
}

}  // namespace treespec::bench::svg
