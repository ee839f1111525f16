#include "bench/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "bench/bench.h"
#include "bench/method_spec.h"
#include "treespec/status.h"

namespace treespec::bench {

namespace {

using nlohmann::json;

std::string md_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '|') o += "\\|";
    else o += c;
  }
  return o;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

std::string num(double v, int prec) { return fmt::format("{:.{}f}", v, prec); }

std::string tps_text(const json& t) {
  return fmt::format("{:.1f} [{:.1f}–{:.1f}]", t.at("median").get<double>(), t.at("min").get<double>(),
                     t.at("max").get<double>());
}

std::string time_split(const json& c) {
  const auto& t = c.at("time_s");
  const double d = t.at("draft").get<double>(), f = t.at("forward").get<double>(), v = t.at("verify").get<double>(),
               k = t.at("commit").get<double>();
  const double s = d + f + v + k;
  if (s <= 0) return "-";
  return fmt::format("{:.0f}/{:.0f}/{:.0f}/{:.0f}", 100 * d / s, 100 * f / s, 100 * v / s, 100 * k / s);
}

std::string by_depth_text(const json& c, size_t max_n) {
  const auto& a = c.at("acceptance_by_depth");
  if (a.empty()) return "-";
  std::string s;
  for (size_t i = 0; i < a.size() && i < max_n; ++i) {
    if (i) s += ' ';
    s += num(a[i].get<double>(), 2);
  }
  if (a.size() > max_n) s += " …";
  return s;
}

std::string bandwidth_text(const json& membw) {
  if (!membw.is_object()) return "not measured";
  std::string s;
  for (const auto& smp : membw.at("samples")) {
    s += fmt::format("{}{:.1f} GB/s with {} thread{}", s.empty() ? "" : ", ", smp.at("gb_per_s").get<double>(),
                     smp.at("n_threads").get<int>(), smp.at("n_threads").get<int>() == 1 ? "" : "s");
  }
  return s + fmt::format(" ({} MiB buffer, probe {})", membw.at("bytes").get<uint64_t>() >> 20,
                         membw.at("probe").get<std::string>());
}

using Key = std::tuple<std::string, std::string, int, std::string, int>;
Key key_of(const json& c) {
  return {c.at("model").get<std::string>(), c.at("prompt_set").get<std::string>(), c.at("batch").get<int>(),
          c.at("method").get<std::string>(), c.at("budget").get<int>()};
}

}  // namespace

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string human_bytes(double b) {
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{:.0f} B", b);
}

std::string render_markdown(const json& r) {
  std::string out;
  const auto& m = r.at("machine");
  out += fmt::format("Machine: {} ({} hardware threads), kernels {}, {}\n", m.at("cpu_model").get<std::string>(),
                     m.at("n_cpus").get<int>(), m.at("isa").get<std::string>(), m.at("os").get<std::string>());
  out += fmt::format("DRAM read bandwidth: {}\n", bandwidth_text(m.at("membw")));
  for (const auto& mod : r.at("models")) {
    out += fmt::format("Model {}: {} parameters, {} of weights read per step ({})\n", mod.at("name").get<std::string>(),
                       mod.at("n_params").get<uint64_t>(), human_bytes(mod.at("weight_bytes").get<double>()),
                       mod.at("path").get<std::string>());
  }
  const auto& cfg = r.at("config");
  for (const auto& ps : r.at("prompt_sets")) {
    out += fmt::format("Prompts {}: {} of {} ({}{}), mean {:.1f} tokens{}\n", ps.at("name").get<std::string>(),
                       ps.at("n_prompts").get<int64_t>(), ps.at("n_available").get<int64_t>(),
                       ps.at("format").get<std::string>(),
                       ps.at("field").get<std::string>().empty() ? "" : ", field " + ps.at("field").get<std::string>(),
                       ps.at("prompt_tokens_mean").get<double>(),
                       ps.at("n_truncated").get<int64_t>()
                           ? fmt::format(", {} cut to --max-prompt-tokens", ps.at("n_truncated").get<int64_t>())
                           : "");
  }
  std::string decoding = cfg.value("sampling", std::string("greedy"));
  if (!decoding.empty()) decoding[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(decoding[0])));
  out += fmt::format(
      "{}, -n {}{}, {} repetition{}, {} thread{}; tok/s counts decode steps of all sequences "
      "(median [min–max]); speedup = median of per-repetition ratios to none\n\n",
      decoding, cfg.at("n_predict").get<int>(), cfg.at("ignore_eos").get<bool>() ? " (ignore EOS)" : "",
      cfg.at("reps").get<int>(), cfg.at("reps").get<int>() == 1 ? "" : "s", cfg.at("n_threads").get<int>(),
      cfg.at("n_threads").get<int>() == 1 ? "" : "s");
  out +=
      "| model | prompts | batch | method | budget | tok/s | speedup | tok/step | rows/step | acceptance by depth | "
      "draft/fwd/verify/commit % | peak RSS | = none |\n";
  out += "|---|---|--:|---|--:|--:|--:|--:|--:|---|---|--:|---|\n";
  // Reports from before sampling in the bench have no outputs_checked: greedy, checked.
  const bool checked = cfg.value("outputs_checked", true);
  for (const auto& c : r.at("cells")) {
    const bool none = c.at("method_name").get<std::string>() == "none";
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {:.2f}x | {:.2f} | {:.1f} | {} | {} | {} | {} |\n",
                       md_escape(c.at("model").get<std::string>()), md_escape(c.at("prompt_set").get<std::string>()),
                       c.at("batch").get<int>(), md_escape(c.at("method").get<std::string>()),
                       none ? "-" : budget_label(c.at("budget").get<int>()), tps_text(c.at("tokens_per_s")),
                       c.at("speedup").at("median").get<double>(), c.at("mean_accepted_length").get<double>(),
                       c.at("rows_per_step").get<double>(), by_depth_text(c, 5), time_split(c),
                       human_bytes(c.at("peak_rss_bytes").get<double>()),
                       !checked                           ? "n/a"
                       : c.at("greedy_match").get<bool>() ? "yes"
                                                          : "**NO**");
  }
  const size_t n = r.at("cells").size();
  if (!checked) {
    out += fmt::format("\nOutputs not compared: sampling ({}) with a verifier that is exact in distribution only.\n",
                       cfg.at("sampling").get<std::string>());
  } else {
    out += r.at("greedy_ok").get<bool>() ? fmt::format("\nOutputs: identical to none in all {} cells ({}).\n", n,
                                                       cfg.at("sampling").get<std::string>())
                                         : "\nOutputs: MISMATCH with none (see the = none column and stderr).\n";
  }
  return out;
}

std::string render_csv(const json& r) {
  std::string out =
      "model,prompt_set,batch,method,method_name,budget,reps,tokens_per_s_median,tokens_per_s_min,tokens_per_s_max,"
      "speedup_median,speedup_min,speedup_max,mean_accepted_length,acceptance_rate,acceptance_by_depth,rows_per_step,"
      "seqs_per_forward,n_generated,n_steps,n_forwards,decode_s,prefill_s,time_draft_s,time_forward_s,time_verify_s,"
      "time_commit_s,peak_rss_bytes,weight_read_gb_per_s,bandwidth_fraction,greedy_match\n";
  for (const auto& c : r.at("cells")) {
    std::string depth;
    for (const auto& a : c.at("acceptance_by_depth")) {
      if (!depth.empty()) depth += ';';
      depth += fmt::format("{:.4f}", a.get<double>());
    }
    const auto& t = c.at("tokens_per_s");
    const auto& s = c.at("speedup");
    const auto& ts = c.at("time_s");
    const auto& bf = c.at("bandwidth_fraction");
    out += fmt::format(
        "{},{},{},{},{},{},{},{:.3f},{:.3f},{:.3f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{},{:.3f},{:.3f},{},{},{},"
        "{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{},{:.4f},{},{}\n",
        csv_field(c.at("model").get<std::string>()), csv_field(c.at("prompt_set").get<std::string>()),
        c.at("batch").get<int>(), csv_field(c.at("method").get<std::string>()),
        csv_field(c.at("method_name").get<std::string>()), c.at("budget").get<int>(), c.at("reps").get<int>(),
        t.at("median").get<double>(), t.at("min").get<double>(), t.at("max").get<double>(),
        s.at("median").get<double>(), s.at("min").get<double>(), s.at("max").get<double>(),
        c.at("mean_accepted_length").get<double>(), c.at("acceptance_rate").get<double>(), depth,
        c.at("rows_per_step").get<double>(), c.at("seqs_per_forward").get<double>(), c.at("n_generated").get<int64_t>(),
        c.at("n_steps").get<int64_t>(), c.at("n_forwards").get<int64_t>(), c.at("decode_s").get<double>(),
        c.at("prefill_s").get<double>(), ts.at("draft").get<double>(), ts.at("forward").get<double>(),
        ts.at("verify").get<double>(), ts.at("commit").get<double>(), c.at("peak_rss_bytes").get<uint64_t>(),
        c.at("weight_read_gb_per_s").get<double>(),
        bf.is_null() ? std::string() : fmt::format("{:.4f}", bf.get<double>()),
        c.at("greedy_match").get<bool>() ? "true" : "false");
  }
  return out;
}

std::string render_compare(const json& a, const json& b, const std::string& name_a, const std::string& name_b) {
  std::string out;
  auto machine = [](const json& r) {
    const auto& m = r.at("machine");
    return fmt::format("{}, {} threads, kernels {}", m.at("cpu_model").get<std::string>(),
                       r.at("config").at("n_threads").get<int>(), m.at("isa").get<std::string>());
  };
  out += fmt::format("A = {} ({}; {})\nB = {} ({}; {})\n", name_a, a.value("created_utc", "?"), machine(a), name_b,
                     b.value("created_utc", "?"), machine(b));
  if (a.at("machine").at("cpu_model") != b.at("machine").at("cpu_model")) {
    out += "Note: different CPUs; B/A mixes machine and code differences.\n";
  }
  out +=
      "\n| model | prompts | batch | method | budget | tok/s A | tok/s B | B/A | speedup A | speedup B | tok/step A | "
      "tok/step B |\n";
  out += "|---|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|\n";
  std::map<Key, const json*> in_b;
  for (const auto& c : b.at("cells")) in_b[key_of(c)] = &c;
  std::vector<std::string> only_a, only_b;
  std::map<Key, bool> seen;
  for (const auto& ca : a.at("cells")) {
    const Key k = key_of(ca);
    const auto it = in_b.find(k);
    const std::string label = fmt::format("{} / {} / batch {} / {} / budget {}", std::get<0>(k), std::get<1>(k),
                                          std::get<2>(k), std::get<3>(k), budget_label(std::get<4>(k)));
    if (it == in_b.end()) {
      only_a.push_back(label);
      continue;
    }
    seen[k] = true;
    const json& cb = *it->second;
    const double ta = ca.at("tokens_per_s").at("median").get<double>(),
                 tb = cb.at("tokens_per_s").at("median").get<double>();
    const bool none = ca.at("method_name").get<std::string>() == "none";
    out += fmt::format("| {} | {} | {} | {} | {} | {:.1f} | {:.1f} | {} | {:.2f}x | {:.2f}x | {:.2f} | {:.2f} |\n",
                       md_escape(std::get<0>(k)), md_escape(std::get<1>(k)), std::get<2>(k), md_escape(std::get<3>(k)),
                       none ? "-" : budget_label(std::get<4>(k)), ta, tb, ta > 0 ? fmt::format("{:.3f}", tb / ta) : "-",
                       ca.at("speedup").at("median").get<double>(), cb.at("speedup").at("median").get<double>(),
                       ca.at("mean_accepted_length").get<double>(), cb.at("mean_accepted_length").get<double>());
  }
  for (const auto& cb : b.at("cells")) {
    const Key k = key_of(cb);
    if (!seen.count(k)) {
      only_b.push_back(fmt::format("{} / {} / batch {} / {} / budget {}", std::get<0>(k), std::get<1>(k),
                                   std::get<2>(k), std::get<3>(k), budget_label(std::get<4>(k))));
    }
  }
  for (const auto& s : only_a) out += "\nonly in A: " + s;
  for (const auto& s : only_b) out += "\nonly in B: " + s;
  if (!only_a.empty() || !only_b.empty()) out += "\n";
  return out;
}

json load_report(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IoError(fmt::format("cannot open bench report '{}'", path));
  json j;
  try {
    j = json::parse(f);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    throw FormatError(fmt::format("{}: not valid JSON ({})", path, e.what()));
  }
  if (!j.is_object() || j.value("schema", "") != "treespec-bench") {
    throw FormatError(fmt::format("{}: not a treespec bench report (no \"schema\": \"treespec-bench\")", path));
  }
  if (j.value("schema_version", 0) != kSchemaVersion) {
    throw FormatError(fmt::format("{}: bench schema_version {} is not supported (this build reads {})", path,
                                  j.value("schema_version", 0), kSchemaVersion));
  }
  for (const char* k : {"machine", "config", "models", "prompt_sets", "cells", "greedy_ok"}) {
    if (!j.contains(k)) throw FormatError(fmt::format("{}: bench report has no '{}'", path, k));
  }
  return j;
}

}  // namespace treespec::bench
