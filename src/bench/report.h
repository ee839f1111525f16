// Renders a bench report (the JSON of run_bench, schema in docs/benchmarks.md) as a
// markdown table, CSV, or a ratio table against another report.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace treespec::bench {

// Machine and model lines, then one table row per cell, then the greedy check line.
std::string render_markdown(const nlohmann::json& report);

// Header + one row per cell; acceptance_by_depth is ';'-separated in one column.
std::string render_csv(const nlohmann::json& report);

// Cells matched by (model, prompt set, batch, method, budget): tokens/s of A and B and
// their ratio B/A, and each run's speedup over its own `none`. Cells found in only one
// report are listed below the table.
std::string render_compare(const nlohmann::json& a, const nlohmann::json& b, const std::string& name_a,
                           const std::string& name_b);

// Reads a report file; FormatError naming the file if it is not a treespec-bench JSON
// of a known schema version.
nlohmann::json load_report(const std::string& path);

// "12.3 MiB" etc.
std::string human_bytes(double bytes);

// Median of v (0 for an empty v): the statistic every bench table reports.
double median(std::vector<double> v);

}  // namespace treespec::bench
