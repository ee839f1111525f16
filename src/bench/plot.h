// SVG charts of a bench report (docs/benchmarks.md shows them):
//   speedup_vs_batch        speedup over none vs batch size, one line per method variant
//   acceptance_by_depth     acceptance rate at each draft depth (smallest batch size)
//   tokens_per_s_vs_tree_size  tokens/s vs measured tree rows per step, one line per
//                           method variant and batch size (points = tree budgets)
//   time_split              decode time per generated token: draft / forward / verify / commit
// One file per chart and per (model, prompt set) group; with a single group the names
// carry no suffix (speedup_vs_batch.svg), otherwise ".<model>.<prompt set>" is added.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace treespec::bench {

// Writes the charts into dir (created if missing); returns the paths written.
// IoError naming the file on failure.
std::vector<std::string> write_plots(const nlohmann::json& report, const std::string& dir);

// Label of a method variant in charts: "lookup", or "lookup (budget 16)".
std::string variant_label(const nlohmann::json& cell);

}  // namespace treespec::bench
