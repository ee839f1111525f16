// run_bench on tiny random models: the report follows the documented schema, the sweep
// covers every cell, budgets and batch sizes take effect, and the greedy-equality check
// catches a method whose output differs from plain decoding.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "bench/bench.h"
#include "bench/report.h"
#include "bench_test_util.h"
#include "common/test_util.h"
#include "common/tiny_model.h"
#include "core/rng.h"
#include "drafters/factory.h"
#include "drafters/lookup/lookup_drafter.h"
#include "treespec/status.h"

using namespace treespec;
using nlohmann::json;

namespace {

struct TinySweep {
  std::string dir, model, prompts;
  bench::BenchConfig cfg;

  TinySweep() {
    dir = test::temp_dir();
    model = dir + "/tiny.gguf";
    test::TinyModelConfig tc;
    tc.n_vocab = 48;
    tc.weight_scale = 0.6f;  // peaked enough to loop, so lookup finds matches
    test::write_tiny_model(model, tc);
    prompts = dir + "/prompts.txt";
    std::ofstream f(prompts);
    f << "t3t4t5t6t3t4t5t6t3t4\nt7t8t9\nt10t11t10t11t10t11t10\nt12\nt20t21t22t20t21\n";
    f.close();
    cfg.models = {model};
    cfg.prompt_sources = {bench::parse_prompt_source(prompts)};
    cfg.n_predict = 24;
    cfg.ignore_eos = true;
    cfg.methods = bench::normalize_methods(bench::parse_spec_list("none,lookup", drafters::spec_methods()),
                                           drafters::spec_methods());
    cfg.batches = {1, 2};
    cfg.reps = 2;
    cfg.measure_bandwidth = true;
    cfg.bandwidth_bytes = 4 << 20;  // small and quick: the value is not asserted
    cfg.bandwidth_seconds = 0.01;
  }
};

const json* find_cell(const json& r, int batch, const std::string& method, int budget = 0) {
  for (const auto& c : r["cells"]) {
    if (c["batch"] == batch && c["method"] == method && c["budget"] == budget) return &c;
  }
  return nullptr;
}

}  // namespace

TEST(BenchRun, TinySweepFollowsSchema) {
  TinySweep t;
  t.cfg.budgets = {0, 3, 16};
  const json r = bench::run_bench(t.cfg);
  const auto errs = test::check_bench_schema(r);
  EXPECT_TRUE(errs.empty()) << ::testing::PrintToString(errs);
  // The JSON survives a round trip through text (what --json writes, --from reads).
  const std::string path = t.dir + "/r.json";
  std::ofstream(path) << r.dump(2);
  EXPECT_EQ(bench::load_report(path), r);

  // none once per batch size (budget is meaningless for it), lookup per budget.
  ASSERT_EQ(r["cells"].size(), 2u * (1 + 3));
  EXPECT_TRUE(r["greedy_ok"].get<bool>());
  EXPECT_EQ(bench::exit_code(r), 0);
  EXPECT_EQ(bench::greedy_failure_message(r), "");
  EXPECT_EQ(r["models"][0]["n_vocab"], 48);
  EXPECT_EQ(r["prompt_sets"][0]["n_prompts"], 5);
  EXPECT_EQ(r["config"]["methods"], json({"none", "lookup"}));
  ASSERT_TRUE(r["machine"]["membw"].is_object());
  EXPECT_GT(r["machine"]["membw"]["samples"][0]["gb_per_s"].get<double>(), 0.0);

  for (const auto& c : r["cells"]) {
    SCOPED_TRACE(c["method"].get<std::string>() + " batch " + std::to_string(c["batch"].get<int>()));
    EXPECT_TRUE(c["greedy_match"].get<bool>());
    EXPECT_EQ(c["reps"], 2);
    EXPECT_EQ(c["tokens_per_s"]["values"].size(), 2u);
    EXPECT_GT(c["tokens_per_s"]["median"].get<double>(), 0.0);
    EXPECT_LE(c["tokens_per_s"]["min"].get<double>(), c["tokens_per_s"]["median"].get<double>());
    EXPECT_GE(c["tokens_per_s"]["max"].get<double>(), c["tokens_per_s"]["median"].get<double>());
    EXPECT_EQ(c["n_generated"], 5 * 24);  // --ignore-eos: every prompt yields n tokens
    EXPECT_GT(c["peak_rss_bytes"].get<uint64_t>(), 0u);
    EXPECT_FALSE(c["bandwidth_fraction"].is_null());
    const double seqs = c["seqs_per_forward"].get<double>();
    EXPECT_GE(seqs, 1.0);
    EXPECT_LE(seqs, c["batch"].get<double>());
  }
  const json* none1 = find_cell(r, 1, "none");
  const json* none2 = find_cell(r, 2, "none");
  ASSERT_TRUE(none1 && none2);
  EXPECT_DOUBLE_EQ(none1->at("speedup").at("median").get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(none1->at("mean_accepted_length").get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(none1->at("rows_per_step").get<double>(), 1.0);
  EXPECT_EQ(none1->at("n_steps"), 5 * 24);
  EXPECT_EQ(none1->at("n_forwards"), 5 * 24);
  EXPECT_LT(none2->at("n_forwards").get<int>(), 5 * 24);  // two sequences share forwards
  EXPECT_GT(none2->at("seqs_per_forward").get<double>(), 1.5);

  // lookup on looping output accepts drafts; budget 3 caps the tree at 3 rows. Its own
  // choice (budget 0) is the budget controller, which reports itself.
  const json* own1 = find_cell(r, 1, "lookup", 0);
  ASSERT_TRUE(own1);
  EXPECT_EQ(own1->at("budget_policy").at("policy"), "controller");
  const json* auto1 = find_cell(r, 1, "lookup", 16);
  const json* b3 = find_cell(r, 1, "lookup", 3);
  ASSERT_TRUE(auto1 && b3);
  EXPECT_GT(auto1->at("mean_accepted_length").get<double>(), 1.0);
  EXPECT_LT(auto1->at("n_steps").get<int>(), 5 * 24);
  EXPECT_FALSE(auto1->at("acceptance_by_depth").empty());
  EXPECT_LE(b3->at("rows_per_step").get<double>(), 3.0);
  EXPECT_GT(auto1->at("rows_per_step").get<double>(), b3->at("rows_per_step").get<double>());
  EXPECT_LE(b3->at("acceptance_by_depth").size(), 2u);
}

TEST(BenchRun, GreedyCheckCatchesABrokenMethod) {
  TinySweep t;
  t.cfg.methods = bench::normalize_methods(bench::parse_spec_list("lookup,lookup:draft=2", drafters::spec_methods()),
                                           drafters::spec_methods());
  bench::BenchHooks hooks;
  hooks.resolve_spec = [](const bench::MethodSpec& m) {
    drafters::SpecConfig c;
    c.method = m.name;
    for (const auto& [k, v] : m.params) {
      if (k == "draft") c.params<drafters::LookupParams>().draft_len = std::stoi(v);
    }
    return c;
  };
  // Stand-in for a broken method: one emitted token of prompt 3 changes, in batch 2
  // repetition 2 only (the check must look at every repetition and batch size).
  int calls = 0;
  hooks.on_output = [&](const bench::CellKey& k, int64_t prompt, std::vector<int32_t>& tokens) {
    if (k.method == "lookup:draft=2" && k.batch == 2 && prompt == 3 && ++calls == 2) tokens[7] = (tokens[7] + 1) % 48;
  };
  const json r = bench::run_bench(t.cfg, hooks);
  EXPECT_TRUE(test::check_bench_schema(r).empty());
  EXPECT_FALSE(r["greedy_ok"].get<bool>());
  EXPECT_EQ(bench::exit_code(r), bench::kExitGreedyMismatch);
  int bad = 0;
  for (const auto& c : r["cells"]) {
    const bool broken = c["method"] == "lookup:draft=2" && c["batch"] == 2;
    EXPECT_EQ(c["greedy_match"].get<bool>(), !broken) << c["method"] << " batch " << c["batch"];
    if (!broken) continue;
    ++bad;
    ASSERT_EQ(c["mismatches"].size(), 1u);
    const auto& m = c["mismatches"][0];
    EXPECT_EQ(m["prompt"], 3);
    EXPECT_EQ(m["rep"], 1);
    EXPECT_EQ(m["position"], 7);
    EXPECT_NE(m["got"], m["expected"]);
  }
  EXPECT_EQ(bad, 1);
  const std::string msg = bench::greedy_failure_message(r);
  EXPECT_NE(msg.find("model tiny"), std::string::npos) << msg;
  EXPECT_NE(msg.find("method lookup:draft=2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("prompt 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("batch 2"), std::string::npos) << msg;
  EXPECT_NE(bench::render_markdown(r).find("**NO**"), std::string::npos);
  EXPECT_NE(bench::render_csv(r).find(",false\n"), std::string::npos);
}

namespace {
// Proposes a chain of random tokens: nearly always wrong. The verifier must reject them,
// so output stays equal to plain decoding even though acceptance collapses.
class JunkDrafter final : public drafters::Drafter {
 public:
  std::string name() const override { return "junk"; }
  tree::TokenTree propose(const drafters::DraftInput& in) override {
    tree::TokenTree t(in.context.back());
    int32_t parent = 0;
    for (int32_t i = 1; i < std::min(in.budget, 5); ++i)
      parent = t.add(static_cast<int32_t>(rng_.next_u64() % 48), parent);
    return t;
  }
  int32_t max_nodes() const override { return 5; }

 private:
  core::Rng rng_{7};
};
}  // namespace

TEST(BenchRun, WrongDraftsDoNotChangeOutput) {
  TinySweep t;
  t.cfg.reps = 1;
  t.cfg.budgets = {16};  // a fixed tree: the controller may rightly feed junk drafts no rows
  bench::BenchHooks hooks;
  hooks.make_drafter = [](const drafters::SpecConfig& c,
                          const drafters::DrafterEnv& env) -> std::unique_ptr<drafters::Drafter> {
    if (c.method == "lookup") return std::make_unique<JunkDrafter>();
    return drafters::make_drafter(c, env);
  };
  const json r = bench::run_bench(t.cfg, hooks);
  EXPECT_TRUE(r["greedy_ok"].get<bool>());
  const json* junk = find_cell(r, 1, "lookup", 16);
  ASSERT_TRUE(junk);
  EXPECT_GT(junk->at("rows_per_step").get<double>(), 4.0);
  EXPECT_LT(junk->at("mean_accepted_length").get<double>(), 1.3);
}

TEST(BenchRun, ConfigurationErrorsComeBeforeTiming) {
  TinySweep t;
  auto msg = [&](bench::BenchConfig cfg) -> std::string {
    try {
      bench::run_bench(cfg);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  auto cfg = t.cfg;
  cfg.batches = {8};
  std::string m = msg(cfg);
  EXPECT_NE(m.find("batch size 8"), std::string::npos) << m;
  EXPECT_NE(m.find("'prompts'"), std::string::npos) << m;

  cfg = t.cfg;
  cfg.n_predict = 250;  // tiny model context: 256
  m = msg(cfg);
  EXPECT_NE(m.find("prompt 0"), std::string::npos) << m;
  EXPECT_NE(m.find("context limit is 256"), std::string::npos) << m;
  cfg.max_prompt_tokens = 4;  // 4 + 250 fits in 256
  cfg.batches = {1};
  cfg.reps = 1;
  cfg.methods = bench::normalize_methods({}, drafters::spec_methods());
  cfg.measure_bandwidth = false;
  const json r = bench::run_bench(cfg);
  EXPECT_EQ(r["prompt_sets"][0]["n_truncated"], 5);  // every prompt has more than 4 tokens
  EXPECT_EQ(r["prompt_sets"][0]["prompt_tokens_max"], 4);
  EXPECT_TRUE(r["machine"]["membw"].is_null());
  EXPECT_TRUE(r["cells"][0]["bandwidth_fraction"].is_null());

  cfg = t.cfg;
  cfg.methods.push_back(bench::parse_method_item("lookup:draft=2"));
  m = msg(cfg);  // the default resolver cannot map parameters
  EXPECT_NE(m.find("lookup:draft=2"), std::string::npos) << m;

  cfg = t.cfg;
  cfg.models = {t.dir + "/missing.gguf"};
  m = msg(cfg);
  EXPECT_NE(m.find("missing.gguf"), std::string::npos) << m;

  cfg = t.cfg;
  cfg.prompt_sources.push_back(cfg.prompt_sources[0]);
  m = msg(cfg);
  EXPECT_NE(m.find("name="), std::string::npos) << m;
}

TEST(BenchRun, MethodsFromAllThatCannotRunAreSkippedNamedOnesFail) {
  TinySweep t;
  t.cfg.reps = 1;
  t.cfg.batches = {1};
  t.cfg.measure_bandwidth = false;
  auto methods = bench::parse_spec_list("all", drafters::spec_methods());
  bench::BenchHooks hooks;
  hooks.make_drafter = [](const drafters::SpecConfig& c,
                          const drafters::DrafterEnv& env) -> std::unique_ptr<drafters::Drafter> {
    if (c.method == "lookup") throw Unsupported("lookup needs something this model lacks");
    return drafters::make_drafter(c, env);
  };
  t.cfg.methods = bench::normalize_methods(methods, drafters::spec_methods());
  const json r = bench::run_bench(t.cfg, hooks);
  // lookup is skipped by the hook; methods that need files this tiny model lacks (e.g.
  // medusa without heads) are skipped too, each with its reason. none always runs.
  bool lookup_skipped = false;
  for (const auto& s : r["skipped_methods"]) {
    EXPECT_NE(s["method"], "none");
    EXPECT_FALSE(s["reason"].get<std::string>().empty());
    lookup_skipped |= s["method"] == "lookup";
  }
  EXPECT_TRUE(lookup_skipped);
  bool none_ran = false;
  for (const auto& c : r["cells"]) {
    EXPECT_NE(c["method"], "lookup");
    none_ran |= c["method"] == "none";
  }
  EXPECT_TRUE(none_ran);

  t.cfg.methods =
      bench::normalize_methods(bench::parse_spec_list("lookup", drafters::spec_methods()), drafters::spec_methods());
  EXPECT_THROW(bench::run_bench(t.cfg, hooks), Unsupported);
}

TEST(BenchRun, CommittedReportsFollowSchema) {
  // docs/benchmarks.md shows tables rendered from these files; keep them valid.
  size_t n = 0;
  const std::filesystem::path dir = std::filesystem::path(TREESPEC_SOURCE_DIR) / "docs" / "bench";
  if (!std::filesystem::is_directory(dir)) GTEST_SKIP() << "no " << dir;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    // Other tools' JSON kept beside the bench reports (e.g. the server load test's
    // server_*.json) has neither a schema nor cells: not a bench report, not checked here.
    std::ifstream f(e.path());
    const json raw = json::parse(f, nullptr, /*allow_exceptions=*/false);
    if (raw.is_object() && !raw.contains("schema") && !raw.contains("cells")) continue;
    ++n;
    const json r = bench::load_report(e.path().string());
    EXPECT_TRUE(test::check_bench_schema(r).empty())
        << e.path() << ": " << ::testing::PrintToString(test::check_bench_schema(r));
    EXPECT_TRUE(r["greedy_ok"].get<bool>()) << e.path();
    EXPECT_FALSE(bench::render_markdown(r).empty());
  }
  EXPECT_GT(n, 0u);
}
