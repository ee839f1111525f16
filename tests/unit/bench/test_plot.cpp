// SVG plots: well-formed XML (parsed), one series per method variant with matching
// legend labels, points where the data says, escaping of odd labels.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "bench/plot.h"
#include "bench/svg.h"
#include "bench_test_util.h"
#include "common/test_util.h"

using namespace treespec;
using nlohmann::json;

namespace {

json cell(const std::string& method, const std::string& name, int batch, int budget, double speedup, double tps,
          double rows, std::vector<double> by_depth) {
  json c;
  c["model"] = "m";
  c["prompt_set"] = "p";
  c["batch"] = batch;
  c["method"] = method;
  c["method_name"] = name;
  c["budget"] = budget;
  c["speedup"] = {{"median", speedup}, {"min", speedup}, {"max", speedup}};
  c["tokens_per_s"] = {{"median", tps}, {"min", tps}, {"max", tps}, {"values", {tps}}};
  c["rows_per_step"] = rows;
  c["acceptance_by_depth"] = by_depth;
  c["n_generated"] = 100;
  c["time_s"] = {{"draft", 0.001}, {"forward", 0.02}, {"verify", 0.002}, {"commit", 0.0005}};
  return c;
}

// A report with none, a method with an XML-hostile label, and a budget sweep.
json synthetic_report() {
  json r;
  r["cells"] = json::array();
  for (int b : {1, 2, 4, 8}) {
    r["cells"].push_back(cell("none", "none", b, 0, 1.0, 1000.0 * b, 1.0, {}));
    r["cells"].push_back(cell("lookup:x=<&>", "lookup", b, 0, 0.5 + 0.1 * b, 600.0 * b, 4.0, {0.5, 0.3, 0.1}));
    for (int budget : {4, 16}) {
      r["cells"].push_back(cell("lookup", "lookup", b, budget, 0.8, 700.0 * b + budget, budget * 0.9, {0.4, 0.2}));
    }
  }
  return r;
}

struct Chart {
  test::XmlNode root;
  std::vector<std::string> series;       // data-series labels in order
  std::vector<std::string> legend;       // legend-label texts in order
  std::map<std::string, size_t> points;  // label -> points in its polyline
};

Chart load_chart(const std::string& path) {
  Chart c;
  c.root = test::parse_xml(test::read_file(path));
  EXPECT_EQ(c.root.name, "svg");
  EXPECT_EQ(c.root.attr("xmlns"), "http://www.w3.org/2000/svg");
  for (const auto* g : c.root.find_all("g")) {
    if (g->attr("class") == "series") {
      c.series.push_back(g->attr("data-series"));
      const auto polys = g->find_all("polyline");
      EXPECT_EQ(polys.size(), 1u) << "series " << g->attr("data-series");
      if (polys.empty()) continue;
      const std::string pts = polys[0]->attr("points");
      size_t n = pts.empty() ? 0 : 1;
      for (char ch : pts) n += ch == ' ';
      c.points[g->attr("data-series")] = n;
      EXPECT_EQ(g->find_all("circle").size(), n);
    }
  }
  for (const auto* t : c.root.find_all("text")) {
    if (t->attr("class") == "legend-label") c.legend.push_back(t->text);
  }
  return c;
}

}  // namespace

TEST(Plot, XmlCheckerRejectsMalformedDocuments) {
  EXPECT_NO_THROW(test::parse_xml("<?xml version=\"1.0\"?>\n<a x=\"1\"><b/>t&amp;<!-- c --><c y='2'>z</c></a>\n"));
  EXPECT_THROW(test::parse_xml("<a><b></a></b>"), std::runtime_error);
  EXPECT_THROW(test::parse_xml("<a x=1/>"), std::runtime_error);
  EXPECT_THROW(test::parse_xml("<a>x & y</a>"), std::runtime_error);
  EXPECT_THROW(test::parse_xml("<a>x < y</a>"), std::runtime_error);
  EXPECT_THROW(test::parse_xml("<a/><b/>"), std::runtime_error);
  EXPECT_THROW(test::parse_xml("<a x=\"1\" x=\"2\"/>"), std::runtime_error);
  EXPECT_THROW(test::parse_xml("<a>"), std::runtime_error);
  EXPECT_THROW(test::parse_xml("<a x=\"<\"/>"), std::runtime_error);
}

TEST(Plot, ChartsHaveOneSeriesPerMethodVariant) {
  const std::string dir = test::temp_dir() + "/plots";
  const auto files = bench::write_plots(synthetic_report(), dir);
  ASSERT_EQ(files.size(), 4u);
  for (const char* name : {"speedup_vs_batch", "acceptance_by_depth", "tokens_per_s_vs_tree_size", "time_split"}) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/" + name + ".svg")) << name;
  }

  const Chart sp = load_chart(dir + "/speedup_vs_batch.svg");
  const std::vector<std::string> variants = {"none", "lookup:x=<&>", "lookup (budget 4)", "lookup (budget 16)"};
  EXPECT_EQ(sp.series, variants);
  EXPECT_EQ(sp.legend, variants);
  for (const auto& v : variants) EXPECT_EQ(sp.points.at(v), 4u) << v;  // one point per batch size
  // The raw file escapes the label.
  EXPECT_NE(test::read_file(dir + "/speedup_vs_batch.svg").find("lookup:x=&lt;&amp;&gt;"), std::string::npos);

  const Chart acc = load_chart(dir + "/acceptance_by_depth.svg");
  EXPECT_EQ(acc.series,
            (std::vector<std::string>{"lookup:x=<&>", "lookup (budget 4)", "lookup (budget 16)"}));  // no none
  EXPECT_EQ(acc.points.at("lookup:x=<&>"), 3u);
  EXPECT_EQ(acc.points.at("lookup (budget 4)"), 2u);

  const Chart tree = load_chart(dir + "/tokens_per_s_vs_tree_size.svg");
  // Per method label and batch size; budgets are the points along a line.
  EXPECT_EQ(tree.series.size(), 3u * 4u);
  EXPECT_EQ(tree.points.at("lookup b=1"), 2u);
  EXPECT_EQ(tree.points.at("none b=8"), 1u);
  EXPECT_EQ(tree.legend, tree.series);

  const test::XmlNode ts = test::parse_xml(test::read_file(dir + "/time_split.svg"));
  std::vector<std::string> legend;
  for (const auto* t : ts.find_all("text")) {
    if (t->attr("class") == "legend-label") legend.push_back(t->text);
  }
  EXPECT_EQ(legend, (std::vector<std::string>{"draft", "forward", "verify", "commit"}));
  size_t bars = 0;
  for (const auto* g : ts.find_all("g")) {
    if (g->attr("class") != "bar") continue;
    ++bars;
    EXPECT_EQ(g->find_all("rect").size(), 4u) << g->attr("data-bar");
  }
  EXPECT_EQ(bars, synthetic_report()["cells"].size());
}

TEST(Plot, SeveralGroupsGetSuffixedFiles) {
  json r = synthetic_report();
  json other = r["cells"][0];
  other["model"] = "second model";
  r["cells"].push_back(other);
  const std::string dir = test::temp_dir();
  const auto files = bench::write_plots(r, dir);
  EXPECT_EQ(files.size(), 8u);
  EXPECT_TRUE(std::filesystem::exists(dir + "/speedup_vs_batch.m.p.svg"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/time_split.second_model.p.svg"));
  for (const auto& f : files) EXPECT_NO_THROW(test::parse_xml(test::read_file(f))) << f;
}

TEST(Plot, EmptyAndDegenerateData) {
  bench::svg::LineChart ch;
  ch.title = "t & <t>";
  ch.series.push_back({"one point", {{3.0, 5.0}}});
  ch.series.push_back({"empty", {}});
  ch.series.push_back({"nan", {{1.0, std::nan("")}}});
  const test::XmlNode n = test::parse_xml(bench::svg::render(ch));
  EXPECT_EQ(n.name, "svg");
  bench::svg::StackedBarChart bc;
  EXPECT_NO_THROW(test::parse_xml(bench::svg::render(bc)));
}
