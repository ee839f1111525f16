// --spec propd (early pruning on, dynamic trees on) reproduces plain greedy decoding
// exactly on every golden prompt, alone and 4 sequences batched; so do its ablations and
// logit-lens pruning of other drafters (--prune); through the library, the factory and
// the CLI.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/golden.h"
#include "common/test_util.h"
#include "drafters/factory.h"
#include "drafters/medusa/medusa_drafter.h"
#include "drafters/propd/heads_file.h"
#include "drafters/propd/propd_drafter.h"
#include "engine/budget_controller.h"
#include "propd_test_util.h"

using namespace treespec;

namespace {

drafters::PruneSpec trained_spec(const test::PropdStories& ps, int32_t layer, int32_t k) {
  drafters::PruneSpec spec;
  spec.layer = layer;
  spec.top_k = k;
  spec.head = ps.prune->heads.at(layer);
  return spec;
}

test::DrafterMaker propd_maker(const test::PropdStories& ps, drafters::PruneSpec spec, int32_t n_max = 64) {
  return [&ps, spec, n_max](const model::Model&) -> std::unique_ptr<drafters::Drafter> {
    drafters::PropdParams p;
    p.n_max = n_max;
    p.interval = 4;
    auto d =
        std::make_unique<drafters::PropdDrafter>(ps.heads, p, 10, nullptr, drafters::calibration_table(*ps.heads, 10));
    d->set_prune(spec);
    return d;
  };
}

}  // namespace

TEST(PropdGolden, PrunedDynamicTreesMatchPlainGreedyAloneAndBatched) {
  TREESPEC_REQUIRE_SHARED();
  const auto& ps = test::propd_stories();
  const int32_t L = ps.m.model->hparams().n_layer;
  for (int32_t n_seq : {1, 4}) {
    auto ctl = test::flat_controller(L);
    const auto st = test::expect_goldens(ps.m, propd_maker(ps, trained_spec(ps, 3, 5)), n_seq, 1,
                                         [&](engine::Engine& e) { e.set_budget_policy(ctl.get()); });
    std::printf("n_seq %d: mean accepted length %.3f, rows/step %.1f, late rows removed %.1f%%\n", n_seq,
                st.mean_accepted_length(), st.rows_per_step(), 100.0 * st.pruned_fraction());
    EXPECT_GT(st.mean_accepted_length(), 1.5);  // the heads draft
    EXPECT_GT(st.rows_per_step(), 20.0);        // big trees were verified...
    EXPECT_GT(st.n_pruned, 1000);               // ...and pruned
    EXPECT_GT(st.n_prune_steps, st.n_steps / 2);
    // Dynamic: the controller changed the tree size (its explorations halve the total).
    const auto j = ctl->stats_json();
    EXPECT_GE(j.at("nodes_histogram").size(), 2u) << j.dump();
  }
}

TEST(PropdGolden, FactoryWithCalibratedControllerAndAblations) {
  TREESPEC_REQUIRE_SHARED();
  const auto& ps = test::propd_stories();
  const std::string heads = test::temp_dir() + "/propd_heads.gguf";
  drafters::write_heads_file(heads, *ps.heads, ps.prune.get());
  struct Variant {
    bool no_prune, static_tree;
  };
  for (const Variant v : {Variant{false, false}, Variant{true, false}, Variant{false, true}}) {
    drafters::SpecConfig cfg;
    cfg.method = "propd";
    cfg.params<drafters::MedusaParams>().heads_path = heads;
    cfg.params<drafters::PropdParams>().no_prune = v.no_prune;
    cfg.params<drafters::PropdParams>().static_tree = v.static_tree;
    cfg.params<drafters::PropdParams>().n_max = 32;
    cfg.prune.layer = 3;  // a layer with a trained head (the short training may miss the 98% default)
    cfg.prune.top_k = 6;
    std::unique_ptr<engine::BudgetPolicy> policy;
    const auto st = test::expect_goldens(
        ps.m,
        [&](const model::Model& m) {
          return drafters::make_drafter(cfg, drafters::DrafterEnv{&m, {}, 1});
        },
        4, 1,
        [&](engine::Engine& e) {
          policy = engine::make_budget_policy(cfg, e);
          e.set_budget_policy(policy.get());
        });
    EXPECT_EQ(policy == nullptr, v.static_tree);  // dynamic unless --static-tree
    EXPECT_EQ(st.n_prune_steps > 0, !v.no_prune);
    if (v.static_tree) {
      EXPECT_GT(st.rows_per_step(), 20.0);
    }
  }
}

TEST(PropdGolden, LogitLensPruningOfOtherDraftersKeepsGreedyOutput) {
  TREESPEC_REQUIRE_SHARED();
  const auto& ps = test::propd_stories();
  const std::string heads = test::temp_dir() + "/medusa_only.gguf";
  drafters::write_heads_file(heads, *ps.heads, nullptr);
  for (const std::string method : {"lookup", "medusa", "lookahead"}) {
    drafters::SpecConfig cfg;
    cfg.method = method;
    cfg.params<drafters::MedusaParams>().heads_path = heads;
    cfg.params<drafters::MedusaParams>().tree = "auto:32";
    cfg.prune.enabled = true;
    cfg.prune.layer = 2;  // an early, weak lens: it prunes a lot, including good guesses
    cfg.prune.top_k = 4;
    const auto st = test::expect_goldens(
        ps.m,
        [&](const model::Model& m) {
          return drafters::make_drafter(cfg, drafters::DrafterEnv{&m, {}, 1});
        },
        4);
    std::printf("%s --prune: mean accepted length %.3f, late rows removed %.1f%%\n", method.c_str(),
                st.mean_accepted_length(), 100.0 * st.pruned_fraction());
    EXPECT_GT(st.n_prune_steps, 0) << method;
    EXPECT_GT(st.n_pruned, 0) << method;
  }
}

TEST(PropdGolden, PtdUnderTheControllerWithLensPruningKeepsGreedyOutput) {
  // PTD (merged after the controller): it trims its draft and trie rows to the granted
  // budget, and lens pruning tests its trie candidates while its draft-tree aux rows stay.
  TREESPEC_REQUIRE_SHARED();
  const auto& ps = test::propd_stories();
  drafters::SpecConfig cfg;
  cfg.method = "ptd";
  cfg.prune.enabled = true;
  cfg.prune.layer = 2;
  cfg.prune.top_k = 4;
  auto ctl = test::flat_controller(ps.m.model->hparams().n_layer, 32);
  const auto st = test::expect_goldens(
      ps.m,
      [&](const model::Model& m) {
        return drafters::make_drafter(cfg, drafters::DrafterEnv{&m, {}, 1});
      },
      4, 1, [&](engine::Engine& e) { e.set_budget_policy(ctl.get()); });
  std::printf("ptd --budget dynamic --prune: mean accepted length %.3f, rows/step %.1f, late rows removed %.1f%%\n",
              st.mean_accepted_length(), st.rows_per_step(), 100.0 * st.pruned_fraction());
  EXPECT_GT(st.n_prune_steps, 0);
  EXPECT_GT(st.rows_per_step(), 4.0);  // the controller's budgets reached the drafter
}

TEST(PropdGolden, CommandLine) {
  TREESPEC_REQUIRE_SHARED();
  const auto& ps = test::propd_stories();
  const std::string heads = test::temp_dir() + "/propd_cli.gguf";
  drafters::write_heads_file(heads, *ps.heads, ps.prune.get());
  const std::string model = test::stories_gguf();
  const auto goldens = test::decode_goldens();
  for (size_t i = 0; i < goldens.size(); i += 3) {
    const auto& g = goldens[i];
    const std::string prompt = test::shell_quote(g.prompt);
    for (const std::string extra :
         {"", " --no-prune", " --static-tree --propd-nmax 16 --propd-layer 3 --propd-k 6", " --budget 8"}) {
      const std::string cmd = test::treespec_binary() + " run -m " + model + " -p " + prompt + " -n " +
                              std::to_string(g.n_predict()) + " --temp 0 -t 1 --json --spec propd --heads " + heads +
                              extra;
      std::string out;
      ASSERT_EQ(test::run_command(cmd, &out), 0) << cmd;
      const auto j = nlohmann::json::parse(out);
      EXPECT_EQ(j.at("tokens").get<std::vector<int32_t>>(), g.generated_tokens) << cmd;
      const auto& s = j.at("stats");
      EXPECT_EQ(s.at("spec"), "propd");
      EXPECT_EQ(s.contains("prune"), extra.find("--no-prune") == std::string::npos) << cmd;
      if (extra.empty()) {
        ASSERT_TRUE(s.contains("budget")) << out;
        EXPECT_EQ(s.at("budget").at("policy"), "controller");
        EXPECT_EQ(s.at("budget").at("trace").at("nodes").size(), static_cast<size_t>(s.at("steps").get<int64_t>()));
        EXPECT_GT(s.at("budget").at("calibration").at("points").get<int64_t>(), 0);
      }
      if (extra.find("--static-tree") != std::string::npos) {
        EXPECT_FALSE(s.contains("budget"));
        EXPECT_GT(s.at("rows_per_step").get<double>(), 8.0);
        EXPECT_EQ(s.at("prune").at("layer"), 3);
        EXPECT_EQ(s.at("prune").at("top_k"), 6);
        EXPECT_EQ(s.at("prune").at("head"), "trained");
      }
    }
  }
  // --budget dynamic for another method, and --prune on it.
  const auto& g = goldens[0];
  std::string out;
  const std::string cmd = test::treespec_binary() + " run -m " + model + " -p '" + g.prompt + "' -n " +
                          std::to_string(g.n_predict()) +
                          " --temp 0 -t 1 --json --spec lookup --budget dynamic --prune --prune-layer 3";
  ASSERT_EQ(test::run_command(cmd, &out), 0) << cmd;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j.at("tokens").get<std::vector<int32_t>>(), g.generated_tokens);
  EXPECT_EQ(j.at("stats").at("budget").at("policy"), "controller");
  EXPECT_EQ(j.at("stats").at("prune").at("head"), "logit lens");
  // Clear errors.
  const std::string base = test::treespec_binary() + " run -m " + model + " -p hi -n 4 ";
  EXPECT_NE(test::run_command(base + "--spec propd 2>&1", &out), 0);
  EXPECT_NE(out.find("holds no Medusa heads"), std::string::npos) << out;
  EXPECT_NE(test::run_command(base + "--spec lookup --budget lots 2>&1", &out), 0);
  EXPECT_NE(out.find("--budget 'lots'"), std::string::npos) << out;
  EXPECT_NE(test::run_command(base + "--spec lookup --prune --prune-layer 5 2>&1", &out), 0);
  EXPECT_NE(out.find("--prune-layer 5"), std::string::npos) << out;
  EXPECT_NE(test::run_command(base + "--spec propd --heads " + heads + " --propd-nmax 0 2>&1", &out), 0);
  EXPECT_NE(out.find("--propd-nmax"), std::string::npos) << out;
}
