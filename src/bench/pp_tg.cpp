#include "bench/pp_tg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "bench/machine.h"
#include "bench/report.h"
#include "core/timer.h"
#include "kv/kv_cache.h"
#include "model/batch.h"
#include "model/model.h"
#include "treespec/status.h"

namespace treespec::bench {

using nlohmann::json;

namespace {

// One timed run of a test: seconds for n_prompt prefill tokens or n_gen one-row steps.
class Runner {
 public:
  Runner(const model::Model& m, int32_t n_threads, const kv::KvShape& kv, int32_t n_batch)
      : m_(m), ctx_(m, n_threads), kv_(kv), n_batch_(n_batch), logits_(static_cast<size_t>(m.hparams().n_vocab)) {}

  double prompt(int32_t n) {
    kv_.clear(0);
    const double t0 = core::now_s();
    for (int32_t b = 0; b < n; b += n_batch_) {
      const int32_t k = std::min(n_batch_, n - b);
      step(b, k);
    }
    return core::now_s() - t0;
  }

  double generate(int32_t n) {
    kv_.clear(0);
    const double t0 = core::now_s();
    for (int32_t i = 0; i < n; ++i) step(i, 1);
    return core::now_s() - t0;
  }

 private:
  // Rows for positions [first, first + n) with arbitrary tokens, logits of the last row,
  // committed as the engine commits a prefill chunk.
  void step(int32_t first, int32_t n) {
    const int32_t vocab = m_.hparams().n_vocab;
    toks_.resize(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i)
      toks_[static_cast<size_t>(i)] = static_cast<int32_t>((static_cast<int64_t>(first + i) * 7919 + 3) % vocab);
    batch_.clear();
    batch_.add_chain(0, kv_.n_past(0), toks_);
    const int32_t last[1] = {n - 1};
    Status st = m_.forward(ctx_, batch_, kv_, last, logits_.data());
    if (!st.ok()) throw Error("bench --pp/--tg: forward pass failed: " + st.message());
    chain_.resize(static_cast<size_t>(n));
    std::iota(chain_.begin(), chain_.end(), 0);
    st = kv_.commit(0, chain_);
    if (!st.ok()) throw Error("bench --pp/--tg: KV commit failed: " + st.message());
  }

  const model::Model& m_;
  model::ForwardContext ctx_;
  kv::KvCache kv_;
  int32_t n_batch_;
  model::Batch batch_;
  std::vector<int32_t> toks_, chain_;
  std::vector<float> logits_;
};

json summary(const std::string& model, const model::Model& m, int32_t n_threads, const std::string& test,
             int32_t n_prompt, int32_t n_gen, const std::vector<double>& ts) {
  const size_t k = ts.size();
  const double mean = std::accumulate(ts.begin(), ts.end(), 0.0) / static_cast<double>(k);
  double var = 0.0;
  for (double v : ts) var += (v - mean) * (v - mean);
  const double sd = k > 1 ? std::sqrt(var / static_cast<double>(k - 1)) : 0.0;
  std::error_code ec;
  const auto size = std::filesystem::file_size(model, ec);
  return {{"model", model},
          {"size_bytes", ec ? 0 : size},
          {"n_params", m.n_params()},
          {"n_threads", n_threads},
          {"test", test},
          {"n_prompt", n_prompt},
          {"n_gen", n_gen},
          {"samples_ts", ts},
          {"median_ts", median(ts)},
          {"min_ts", *std::min_element(ts.begin(), ts.end())},
          {"max_ts", *std::max_element(ts.begin(), ts.end())},
          {"stddev_ts", sd}};
}

}  // namespace

json run_pp_tg(const PpTgConfig& cfg, std::FILE* progress) {
  if (cfg.models.empty()) throw InvalidArgument("bench --pp/--tg needs -m MODEL");
  if (cfg.pp.empty() && cfg.tg.empty()) throw InvalidArgument("bench: give --pp and/or --tg lengths");
  if (cfg.reps < 1) throw InvalidArgument(fmt::format("-r/--repetitions must be >= 1, got {}", cfg.reps));
  if (cfg.n_batch < 1) throw InvalidArgument(fmt::format("bench: n_batch must be >= 1, got {}", cfg.n_batch));
  json report;
  report["kind"] = "pp_tg";
  report["command"] = cfg.command;
  const MachineInfo mi = machine_info();
  report["machine"] = {
      {"cpu_model", mi.cpu_model}, {"n_cpus", mi.n_cpus}, {"isa", mi.isa}, {"os", mi.os}, {"compiler", mi.compiler}};
  report["config"] = {{"pp", cfg.pp},
                      {"tg", cfg.tg},
                      {"reps", cfg.reps},
                      {"n_threads", cfg.n_threads},
                      {"n_batch", cfg.n_batch},
                      {"warmup", cfg.warmup},
                      {"type_k", kv::cache_type_name(cfg.type_k)},
                      {"type_v", kv::cache_type_name(cfg.type_v)}};
  report["results"] = json::array();
  for (const auto& path : cfg.models) {
    const auto m = model::Model::load(path);
    int32_t longest = 1;
    for (int32_t n : cfg.pp) longest = std::max(longest, n);
    for (int32_t n : cfg.tg) longest = std::max(longest, n);
    if (longest > m->hparams().n_ctx_train && progress != nullptr) {
      std::fprintf(progress, "bench: warning: %s: %d tokens exceed the model's training context of %d\n", path.c_str(),
                   longest, m->hparams().n_ctx_train);
    }
    kv::KvShape kv = m->kv_shape(1, longest);
    kv.type_k = cfg.type_k;
    kv.type_v = cfg.type_v;
    Runner run(*m, cfg.n_threads, kv, cfg.n_batch);
    auto one = [&](const std::string& test, int32_t n, bool is_prompt) {
      if (cfg.warmup) (void)(is_prompt ? run.prompt(n) : run.generate(n));
      std::vector<double> ts;
      for (int32_t r = 0; r < cfg.reps; ++r) {
        const double s = is_prompt ? run.prompt(n) : run.generate(n);
        ts.push_back(static_cast<double>(n) / s);
        if (progress != nullptr)
          std::fprintf(progress, "bench: %s %s rep %d/%d: %.2f t/s\n", path.c_str(), test.c_str(), r + 1, cfg.reps,
                       ts.back());
      }
      report["results"].push_back(summary(path, *m, cfg.n_threads, test, is_prompt ? n : 0, is_prompt ? 0 : n, ts));
    };
    for (int32_t n : cfg.pp) one(fmt::format("pp{}", n), n, true);
    for (int32_t n : cfg.tg) one(fmt::format("tg{}", n), n, false);
  }
  return report;
}

std::string render_pp_tg_markdown(const json& report) {
  std::string out = "| model | size | params | threads | test | t/s (median) | min - max | sd |\n";
  out += "|---|--:|--:|--:|--:|--:|--:|--:|\n";
  for (const auto& r : report.at("results")) {
    const std::string model = std::filesystem::path(r.at("model").get<std::string>()).filename().string();
    const double np = r.at("n_params").get<double>();
    const std::string params = np >= 1e9   ? fmt::format("{:.2f} B", np * 1e-9)
                               : np >= 1e6 ? fmt::format("{:.2f} M", np * 1e-6)
                                           : fmt::format("{:.2f} K", np * 1e-3);
    out += fmt::format("| {} | {} | {} | {} | {} | {:.2f} | {:.2f} - {:.2f} | {:.2f} |\n", model,
                       human_bytes(r.at("size_bytes").get<double>()), params, r.at("n_threads").get<int>(),
                       r.at("test").get<std::string>(), r.at("median_ts").get<double>(), r.at("min_ts").get<double>(),
                       r.at("max_ts").get<double>(), r.at("stddev_ts").get<double>());
  }
  const auto& mc = report.at("machine");
  out += fmt::format("\n{} ({} CPUs, kernels {}), {} timed runs per test after {}.\n",
                     mc.at("cpu_model").get<std::string>(), mc.at("n_cpus").get<int>(), mc.at("isa").get<std::string>(),
                     report.at("config").at("reps").get<int>(),
                     report.at("config").at("warmup").get<bool>() ? "one warm-up run" : "no warm-up");
  return out;
}

}  // namespace treespec::bench
