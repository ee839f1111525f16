// stories260K: lookahead decoding reproduces the reference greedy goldens exactly, alone
// and four sequences per batch, with the README defaults and with edge parameters.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/golden.h"
#include "common/test_util.h"
#include "drafters/factory.h"
#include "drafters/lookahead/lookahead_drafter.h"

using namespace treespec;

namespace {
test::DrafterMaker lookahead(int32_t n, int32_t w, int32_t g) {
  return [=](const model::Model& m) {
    drafters::SpecConfig cfg;
    cfg.method = "lookahead";
    cfg.params<drafters::LookaheadParams>().ngram = n;
    cfg.params<drafters::LookaheadParams>().window = w;
    cfg.params<drafters::LookaheadParams>().guess = g;
    return drafters::make_drafter(cfg, drafters::DrafterEnv{&m, {}, 1});
  };
}
}  // namespace

TEST(Golden, LookaheadMatchesPlainGreedy) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = test::load_stories();
  const auto st = test::expect_goldens(m, lookahead(5, 7, 7));
  EXPECT_GT(st.mean_accepted_length(), 1.2);  // it does speculate
  const auto st4 = test::expect_goldens(m, lookahead(5, 7, 7), 4);
  EXPECT_GT(st4.n_accepted, 0);
}

TEST(Golden, LookaheadEdgeParametersMatchPlainGreedy) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = test::load_stories();
  // Jacobi decoding (N = 2), a one-column window, a deep narrow window.
  for (auto [n, w, g] : {std::tuple{2, 4, 3}, std::tuple{3, 1, 1}, std::tuple{8, 2, 2}}) {
    SCOPED_TRACE(testing::Message() << "N=" << n << " W=" << w << " G=" << g);
    test::expect_goldens(m, lookahead(n, w, g), 3);
  }
}

TEST(Golden, RunJsonLookaheadReproducesAGolden) {
  TREESPEC_REQUIRE_SHARED();
  const auto goldens = test::load_goldens();
  ASSERT_FALSE(goldens.empty());
  const auto& g = goldens.front();
  const std::string prompt = test::shell_quote(g.prompt);
  const std::string cmd =
      test::treespec_binary() + " run -m " + test::stories_gguf() + " -p " + prompt + " -n " +
      std::to_string(g.n_predict()) +
      " --temp 0 -t 1 --json --spec lookahead --lookahead-n 4 --lookahead-w 5 --lookahead-g 5 --budget 32";
  std::string out;
  ASSERT_EQ(test::run_command(cmd, &out), 0) << cmd;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j.at("tokens").get<std::vector<int32_t>>(), g.generated_tokens);
  EXPECT_EQ(j.at("stats").at("spec"), "lookahead");
  EXPECT_GT(j.at("stats").at("num_accepted_tokens").get<int64_t>(), 0);
}
