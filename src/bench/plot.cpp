#include "bench/plot.h"

#include "bench/method_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "bench/svg.h"
#include "treespec/status.h"

namespace treespec::bench {

namespace {

using nlohmann::json;

std::string sanitize(const std::string& s) {
  std::string o;
  for (char c : s) o += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  return o;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw IoError(fmt::format("cannot write plot '{}': {}", path, std::strerror(errno)));
  f << text;
  if (!f) throw IoError(fmt::format("cannot write plot '{}'", path));
}

// Series in first-seen order.
struct SeriesMap {
  std::vector<svg::Series> list;
  svg::Series& get(const std::string& label) {
    for (auto& s : list) {
      if (s.label == label) return s;
    }
    list.push_back({label, {}});
    return list.back();
  }
};

}  // namespace

std::string variant_label(const json& c) {
  const int budget = c.at("budget").get<int>();
  const std::string m = c.at("method").get<std::string>();
  return budget != 0 && c.at("method_name").get<std::string>() != "none"
             ? fmt::format("{} (budget {})", m, budget_label(budget))
             : m;
}

std::vector<std::string> write_plots(const json& report, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError(fmt::format("cannot create plot directory '{}': {}", dir, ec.message()));

  // Groups in report order.
  std::vector<std::pair<std::string, std::string>> groups;
  for (const auto& c : report.at("cells")) {
    std::pair<std::string, std::string> g{c.at("model").get<std::string>(), c.at("prompt_set").get<std::string>()};
    if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  }
  std::vector<std::string> written;
  for (const auto& [model, set] : groups) {
    std::vector<const json*> cells;
    for (const auto& c : report.at("cells")) {
      if (c.at("model") == model && c.at("prompt_set") == set) cells.push_back(&c);
    }
    const std::string suffix = groups.size() == 1 ? "" : "." + sanitize(model) + "." + sanitize(set);
    const std::string where = fmt::format("model {}, prompts {}", model, set);
    auto path = [&](const char* name) { return (std::filesystem::path(dir) / (name + suffix + ".svg")).string(); };
    std::vector<double> batches;
    for (const json* c : cells) {
      const double b = c->at("batch").get<double>();
      if (std::find(batches.begin(), batches.end(), b) == batches.end()) batches.push_back(b);
    }
    std::sort(batches.begin(), batches.end());

    {  // speedup vs batch size
      svg::LineChart ch;
      ch.title = "Speedup over plain decoding vs batch size";
      ch.subtitle = where;
      ch.x_label = "batch size (sequences decoded together)";
      ch.y_label = "speedup (tokens/s / none's tokens/s)";
      ch.x_categorical = true;
      ch.x_categories = batches;
      ch.has_ref_line = true;
      ch.ref_y = 1.0;
      ch.y_min_top = 1.2;
      SeriesMap sm;
      for (double b : batches) {
        for (const json* c : cells) {
          if (c->at("batch").get<double>() == b)
            sm.get(variant_label(*c)).points.emplace_back(b, c->at("speedup").at("median").get<double>());
        }
      }
      ch.series = std::move(sm.list);
      write_file(path("speedup_vs_batch"), svg::render(ch));
      written.push_back(path("speedup_vs_batch"));
    }
    {  // acceptance by depth at the smallest batch
      svg::LineChart ch;
      ch.title = "Acceptance rate by draft depth";
      ch.subtitle = fmt::format("{}, batch {}", where, batches.front());
      ch.x_label = "draft depth (1 = first token after the root)";
      ch.y_label = "accepted / drafted at this depth";
      ch.y_min_top = 1.0;
      SeriesMap sm;
      for (const json* c : cells) {
        if (c->at("batch").get<double>() != batches.front() || c->at("method_name") == "none") continue;
        auto& s = sm.get(variant_label(*c));
        const auto& a = c->at("acceptance_by_depth");
        for (size_t d = 0; d < a.size(); ++d) s.points.emplace_back(static_cast<double>(d + 1), a[d].get<double>());
      }
      ch.series = std::move(sm.list);
      write_file(path("acceptance_by_depth"), svg::render(ch));
      written.push_back(path("acceptance_by_depth"));
    }
    {  // tokens/s vs tree size
      svg::LineChart ch;
      ch.title = "Tokens/s vs tree size";
      ch.subtitle = where;
      ch.x_label = "tree rows per sequence per step (measured)";
      ch.y_label = "tokens/s (median)";
      SeriesMap sm;
      for (double b : batches) {
        for (const json* c : cells) {
          if (c->at("batch").get<double>() != b) continue;
          sm.get(fmt::format("{} b={}", c->at("method").get<std::string>(), b))
              .points.emplace_back(c->at("rows_per_step").get<double>(),
                                   c->at("tokens_per_s").at("median").get<double>());
        }
      }
      for (auto& s : sm.list) std::sort(s.points.begin(), s.points.end());
      ch.series = std::move(sm.list);
      write_file(path("tokens_per_s_vs_tree_size"), svg::render(ch));
      written.push_back(path("tokens_per_s_vs_tree_size"));
    }
    {  // time split per generated token
      svg::StackedBarChart ch;
      ch.title = "Decode time per generated token";
      ch.subtitle = where;
      ch.x_label = "microseconds per generated token (mean over repetitions)";
      ch.segments = {"draft", "forward", "verify", "commit"};
      for (const json* c : cells) {
        const double n = std::max(1.0, c->at("n_generated").get<double>());
        const auto& t = c->at("time_s");
        svg::Bar bar;
        bar.label = fmt::format("{} b={}", variant_label(*c), c->at("batch").get<int>());
        for (const char* k : {"draft", "forward", "verify", "commit"})
          bar.values.push_back(t.at(k).get<double>() / n * 1e6);
        ch.bars.push_back(std::move(bar));
      }
      write_file(path("time_split"), svg::render(ch));
      written.push_back(path("time_split"));
    }
  }
  return written;
}

}  // namespace treespec::bench
