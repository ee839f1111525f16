// --spec medusa: greedy output equals plain greedy output exactly on every golden prompt,
// with trained heads and with deliberately bad random heads, alone and batched; through
// the factory and the CLI; and the drafter's building blocks (top-k, tree filling, the
// first step, the online accuracy tracker).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/golden.h"
#include "common/test_util.h"
#include "common/tiny_model.h"
#include "drafters/factory.h"
#include "drafters/medusa/medusa_drafter.h"
#include "drafters/medusa/medusa_heads.h"
#include "medusa_test_util.h"

using namespace treespec;
using drafters::MedusaDrafter;
using drafters::MedusaParams;

namespace {

std::string choices_path() { return test::shared_dir() + "/data/tree_choices.json"; }

test::DrafterMaker maker(std::shared_ptr<const drafters::MedusaHeads> heads, MedusaParams p) {
  return [heads, p](const model::Model&) -> std::unique_ptr<drafters::Drafter> {
    auto shape = drafters::resolve_medusa_tree(p, *heads);
    tree::AcceptanceTable init = heads->info().has_calibration() ? drafters::calibration_table(*heads, p.top_k)
                                                                 : tree::AcceptanceTable(heads->n_heads(), p.top_k);
    return std::make_unique<MedusaDrafter>(heads, shape, p, nullptr, init);
  };
}

}  // namespace

TEST(MedusaDecode, TrainedHeadsMatchPlainGreedy) {
  TREESPEC_REQUIRE_SHARED();
  const auto& ts = test::trained_stories();
  MedusaParams p;
  p.tree = "auto:16";
  const auto st = test::expect_goldens(ts.m, maker(ts.heads, p));
  std::printf("auto:16 mean accepted length %.3f\n", st.mean_accepted_length());
  EXPECT_GT(st.mean_accepted_length(), 1.5);  // the heads do predict
  // Static Medusa tree (64 nodes, 4 deep, ranks up to 9), 4 sequences batched.
  p.tree = "medusa_mc_sim_7b_63";
  p.tree_file = choices_path();
  const auto st63 = test::expect_goldens(ts.m, maker(ts.heads, p), 4);
  EXPECT_GT(st63.mean_accepted_length(), 1.5);
  EXPECT_GT(st63.rows_per_step(), 50.0);  // really 64-node trees (the first step of each prompt has 1 row)
}

// Heads that draft from part of the vocabulary (the rows of the output matrix a draft
// vocabulary keeps): they propose only those tokens, and the output is plain greedy's.
TEST(MedusaDecode, DraftVocabularyHeadsMatchPlainGreedy) {
  TREESPEC_REQUIRE_SHARED();
  const auto& ts = test::trained_stories();
  std::vector<int32_t> ids;
  for (int32_t t = 0; t < ts.heads->n_vocab(); ++t) {
    if (t % 3 != 1) ids.push_back(t);
  }
  const auto heads = test::with_draft_vocab(*ts.heads, *ts.m.model, ids);
  ASSERT_EQ(heads->n_draft(), static_cast<int32_t>(ids.size()));
  // Column i of forward_all is token ids[i]: the full head's logit there, bit for bit.
  const int32_t E = heads->n_embd(), V = heads->n_vocab(), K = heads->n_heads(), D = heads->n_draft();
  std::vector<float> h(static_cast<size_t>(E)), work(static_cast<size_t>(K + 1) * E), all(static_cast<size_t>(K) * D),
      one(static_cast<size_t>(V));
  for (int32_t i = 0; i < E; ++i) h[static_cast<size_t>(i)] = std::sin(0.7f * static_cast<float>(i));
  heads->forward_all(h.data(), work.data(), all.data(), nullptr);
  for (int32_t k = 0; k < K; ++k) {
    heads->forward(k, h.data(), 1, work.data(), one.data(), nullptr);
    for (int32_t i = 0; i < D; ++i)
      ASSERT_EQ(all[static_cast<size_t>(k * D + i)], one[static_cast<size_t>(ids[static_cast<size_t>(i)])]);
  }
  drafters::MedusaCandidates cand(heads, 10, nullptr);
  cand.compute(h.data());
  for (int32_t k = 0; k < K; ++k) {
    for (int32_t t : cand.top(k)) EXPECT_NE(t % 3, 1) << "head " << k << " proposed token " << t;
  }
  MedusaParams p;
  p.tree = "auto:16";
  const auto st = test::expect_goldens(ts.m, maker(heads, p), 2);
  EXPECT_GT(st.mean_accepted_length(), 1.2);
}

TEST(MedusaDecode, RandomHeadsStillMatchPlainGreedy) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = test::load_stories();
  auto heads = test::random_heads(*m.model, 3, 2, 17, 3.0f);
  MedusaParams p;
  p.tree = "medusa_mc_sim_7b_63";  // 4 deep: cut to the 3 heads
  p.tree_file = choices_path();
  p.tree_nodes = 16;
  const auto st = test::expect_goldens(m, maker(heads, p));
  EXPECT_GT(st.n_draft_tokens, 1000);  // it did propose trees
  // No residual blocks, auto:N from a made-up flat calibration, batched.
  auto flat = test::random_heads(*m.model, 3, 0, 18, 3.0f);
  test::set_flat_calibration(*flat);
  p.tree = "auto:12";
  const auto st4 = test::expect_goldens(m, maker(flat, p), 4);
  EXPECT_GT(st4.n_draft_tokens, 1000);
}

TEST(MedusaDecode, FactoryAndCommandLine) {
  TREESPEC_REQUIRE_SHARED();
  const auto& ts = test::trained_stories();
  const std::string dir = test::temp_dir();
  const std::string heads = dir + "/stories_heads.gguf";
  ts.heads->write(heads);
  drafters::SpecConfig cfg;
  cfg.method = "medusa";
  cfg.params<drafters::MedusaParams>().heads_path = heads;
  cfg.params<drafters::MedusaParams>().tree = "auto:12";
  const auto st = test::expect_goldens(
      ts.m,
      [&](const model::Model& m) {
        return drafters::make_drafter(cfg, drafters::DrafterEnv{&m, {}, 1});
      },
      4);
  EXPECT_GT(st.mean_accepted_length(), 1.4);

  const std::string model = test::stories_gguf();
  for (const auto& g : test::load_goldens()) {
    const std::string prompt = test::shell_quote(g.prompt);
    const std::string cmd = test::treespec_binary() + " run -m " + model + " -p " + prompt + " -n " +
                            std::to_string(g.n_predict()) + " --temp 0 -t 1 --json --spec medusa --heads " + heads +
                            " --tree medusa_mc_sim_7b_63 --tree-file " + choices_path() + " --tree-nodes 32";
    std::string out;
    ASSERT_EQ(test::run_command(cmd, &out), 0) << cmd;
    const auto j = nlohmann::json::parse(out);
    EXPECT_EQ(j.at("tokens").get<std::vector<int32_t>>(), g.generated_tokens) << g.prompt;
    EXPECT_EQ(j.at("stats").at("spec"), "medusa");
  }
  // Clear errors at the command line.
  std::string out;
  const std::string base = test::treespec_binary() + " run -m " + model + " -p hi -n 4 --spec medusa ";
  EXPECT_NE(test::run_command(base + "2>&1", &out), 0);
  EXPECT_NE(out.find("holds no Medusa heads"), std::string::npos) << out;
  EXPECT_NE(test::run_command(base + "--heads " + heads + " --tree no_such_tree --tree-file " + choices_path() +
                                  " 2>&1",
                              &out),
            0);
  EXPECT_NE(out.find("no_such_tree"), std::string::npos) << out;
  EXPECT_NE(test::run_command(base + "--heads " + heads + " --tree auto:x 2>&1", &out), 0);
  EXPECT_NE(out.find("auto:N"), std::string::npos) << out;
  EXPECT_NE(test::run_command(base + "--heads " + heads + " --tree auto:16 --medusa-topk 0 2>&1", &out), 0);
  EXPECT_NE(out.find("--medusa-topk"), std::string::npos) << out;
}

TEST(MedusaDrafterParts, FirstStepIsTheRootAloneThenTreesFromTheHeads) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = test::load_stories();
  std::shared_ptr<drafters::MedusaHeads> heads = test::random_heads(*m.model, 3, 1, 23);
  test::set_flat_calibration(*heads);
  MedusaParams p;
  p.tree = "auto:10";
  auto shape = drafters::resolve_medusa_tree(p, *heads);
  EXPECT_EQ(shape.size(), 10);
  EXPECT_EQ(shape.max_depth(), 1);  // under the flat table nine head-0 candidates beat any second-level node
  MedusaDrafter d(heads, shape, p, nullptr, drafters::calibration_table(*heads, 10));
  const std::vector<int32_t> ctx = {1, 403, 407};
  d.begin(ctx);
  drafters::DraftInput in;
  in.context = ctx;
  in.budget = 100;
  EXPECT_EQ(d.propose(in).size(), 1);  // no hidden state before the first step

  // Feed a hidden state: the next tree follows the shape with the heads' top-k tokens.
  const int32_t E = heads->n_embd();
  std::vector<float> h(static_cast<size_t>(E));
  for (int32_t i = 0; i < E; ++i) h[static_cast<size_t>(i)] = std::sin(0.7f * static_cast<float>(i));
  tree::TokenTree t0(407);
  verify::VerifyResult res;
  res.path = {0};
  res.bonus = 432;
  const std::vector<int32_t> argmax = {432};
  const float* logits[1] = {nullptr};
  const float* hidden[1] = {h.data()};
  const std::vector<int32_t> ctx2 = {1, 403, 407, 432};
  d.observe(drafters::StepFeedback{t0, res, argmax, logits, hidden, ctx2});
  drafters::MedusaCandidates cand(heads, 10, nullptr);
  cand.compute(h.data());
  in.context = ctx2;
  const tree::TokenTree t = d.propose(in);
  ASSERT_EQ(t.size(), shape.size());
  EXPECT_EQ(t.token(0), 432);
  for (int32_t i = 1; i < t.size(); ++i) {
    EXPECT_EQ(t.parent(i), shape.parent(i));
    EXPECT_EQ(t.token(i), cand.top(shape.depth(i) - 1)[static_cast<size_t>(shape.rank(i))]);
  }
  in.budget = 4;  // a smaller budget keeps the best prefix
  EXPECT_EQ(d.propose(in).size(), 4);
}

TEST(MedusaDrafterParts, AccuracyTrackerGradesEveryHeadOnce) {
  const std::string dir = test::temp_dir();
  test::write_tiny_model(dir + "/tiny.gguf", {});
  auto m = model::Model::load(dir + "/tiny.gguf");
  std::shared_ptr<drafters::MedusaHeads> heads = test::random_heads(*m, 3, 1, 29);
  drafters::MedusaCandidates cand(heads, 3, nullptr);
  std::vector<float> h(static_cast<size_t>(heads->n_embd()), 0.1f);
  cand.compute(h.data());
  drafters::HeadAccuracyTracker tr;
  tree::AcceptanceTable table(heads->n_heads(), 3);
  // Root at context index 2: head k predicts context[3 + k].
  tr.add(2, cand);
  std::vector<int32_t> context = {1, 2, 3, cand.top(0)[1]};  // head 0's rank-1 token came next
  tr.grade(context, table, 1.0f);
  EXPECT_EQ(table.p(1, 1), 1.0f);
  EXPECT_EQ(table.p(2, 0) + table.p(2, 1) + table.p(2, 2), 0.0f);  // head 1 not graded yet
  context.push_back(-5);                                           // a token no head proposed
  context.push_back(cand.top(2)[0]);
  tr.grade(context, table, 1.0f);
  EXPECT_EQ(table.p(2, 0) + table.p(2, 1) + table.p(2, 2), 0.0f);  // miss at depth 2
  EXPECT_EQ(table.p(3, 0), 1.0f);
  tr.grade(context, table, 0.5f);  // nothing new: no change
  EXPECT_EQ(table.p(3, 0), 1.0f);
  EXPECT_EQ(table.p(1, 1), 1.0f);
}

TEST(MedusaDrafterParts, LiveTableFollowsDecoding) {
  TREESPEC_REQUIRE_SHARED();
  const auto& ts = test::trained_stories();
  MedusaParams p;
  p.tree = "auto:16";
  p.adapt_alpha = 0.05f;
  auto shape = drafters::resolve_medusa_tree(p, *ts.heads);
  engine::EngineParams ep;
  ep.n_ctx = 256;
  engine::Engine eng(*ts.m.model, ep);
  eng.set_eog_ids(ts.m.tok->eog_ids());
  engine::SequenceParams sp;
  sp.sampling.temp = 0.0f;
  sp.n_predict = 200;
  sp.ignore_eog = true;
  tree::AcceptanceTable zero(ts.heads->n_heads(), 10);
  auto drafter = std::make_unique<MedusaDrafter>(ts.heads, shape, p, nullptr, zero);
  auto* d = drafter.get();
  engine::Sequence seq(ts.m.tok->encode("Once upon a time", true, false), sp, std::move(drafter));
  ASSERT_TRUE(eng.generate(seq).ok());
  // Started from zeros; after 200 graded tokens head 0's measured top-10 accuracy is far
  // from zero, and every head's row is a sub-distribution.
  const auto cum = d->live_table().cumulative();
  EXPECT_GT(cum[9], 0.3f);
  for (int32_t k = 0; k < ts.heads->n_heads(); ++k) EXPECT_LE(cum[static_cast<size_t>(k) * 10 + 9], 1.0f + 1e-5f);
}
