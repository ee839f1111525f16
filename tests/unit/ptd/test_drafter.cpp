// PtdDrafter step logic with a scripted "model": budgets, feedback F on the live trie and
// in the reference's snapshot mode, pool insertion from the draft snapshot, the
// re-insertion fix, and EOS ids.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <vector>

#include "drafters/factory.h"
#include "drafters/ptd/ptd_drafter.h"
#include "treespec/status.h"
#include "unit/ptd/trie_text.h"

using namespace treespec;
using drafters::PtdDrafter;
using drafters::PtdParams;
using drafters::ptd::Trie;
using treespec::test::trie_text;

namespace {

// One scripted step: the "model" predicts pred(tree, row) at every row; verification is
// the greedy walk over candidate rows; the context grows by the emitted tokens.
struct Script {
  Script(std::vector<int32_t> c, std::function<int32_t(const tree::TokenTree&, int32_t)> f)
      : ctx(std::move(c)), pred(std::move(f)) {}
  std::vector<int32_t> ctx;
  std::function<int32_t(const tree::TokenTree&, int32_t)> pred;

  tree::TokenTree last;
  verify::VerifyResult res;

  void step(PtdDrafter& d, int32_t budget = 1 << 20) {
    drafters::DraftInput in;
    in.context = ctx;
    in.n_past = static_cast<int32_t>(ctx.size()) - 1;
    in.budget = budget;
    last = d.propose(in);
    ASSERT_LE(last.size(), budget);
    std::vector<int32_t> argmax(static_cast<size_t>(last.size()));
    for (int32_t i = 0; i < last.size(); ++i) argmax[static_cast<size_t>(i)] = pred(last, i);
    res = {};
    res.path.push_back(0);
    int32_t node = 0;
    for (;;) {
      const int32_t c = last.find_child(node, argmax[static_cast<size_t>(node)]);
      if (c < 0) break;
      res.path.push_back(c);
      node = c;
    }
    res.bonus = argmax[static_cast<size_t>(node)];
    for (size_t k = 1; k < res.path.size(); ++k) ctx.push_back(last.token(res.path[k]));
    ctx.push_back(res.bonus);
    std::vector<const float*> none(static_cast<size_t>(last.size()), nullptr);
    drafters::StepFeedback fb{last, res, argmax, none, none, ctx};
    d.observe(fb);
  }
};

PtdParams params() {
  PtdParams p;
  p.n_seeds = 0;  // tests build their own trees
  return p;
}

}  // namespace

TEST(PtdDrafter, FactoryBuildsItWithModelEogIds) {
  drafters::SpecConfig cfg;
  cfg.method = "ptd";
  auto d = drafters::make_drafter(cfg, drafters::DrafterEnv{nullptr, {1, 2}, 3});
  EXPECT_EQ(d->name(), "ptd");
  EXPECT_EQ(d->max_nodes(),
            1 + cfg.params<drafters::PtdParams>().max_draft_rows + cfg.params<drafters::PtdParams>().max_trie_rows);
  auto* ptd = dynamic_cast<PtdDrafter*>(d.get());
  ASSERT_NE(ptd, nullptr);
  EXPECT_EQ(ptd->pruning_eos_ids(), (std::vector<int32_t>{1, 2}));
  cfg.params<drafters::PtdParams>().width = 0;
  EXPECT_THROW(drafters::make_drafter(cfg, drafters::DrafterEnv{}), InvalidArgument);
  cfg.params<drafters::PtdParams>().width = 4;
  cfg.params<drafters::PtdParams>().max_trie_rows = -1;
  EXPECT_THROW(drafters::make_drafter(cfg, drafters::DrafterEnv{}), InvalidArgument);
}

TEST(PtdDrafter, EosIdsAreTheModelsUnlessReferenceMode) {
  PtdParams p = params();
  PtdDrafter real(p, {1, 7}, 0, 0);
  EXPECT_EQ(real.pruning_eos_ids(), (std::vector<int32_t>{1, 7}));
  p.real_eos = false;
  PtdDrafter ref(p, {1, 7}, 0, 0);
  EXPECT_EQ(ref.pruning_eos_ids(), (std::vector<int32_t>{2}));

  // In a step: a draft node predicting the model's EOS (7) grows an EOS child, which EOS
  // pruning then cuts (climbing to the spine node) only with the real ids.
  for (bool real_eos : {true, false}) {
    p.real_eos = real_eos;
    PtdDrafter d(p, {1, 7}, 0, 0);
    d.begin(std::vector<int32_t>{1, 50});
    d.draft().add(60, -1);
    Script s{{1, 50}, [](const tree::TokenTree&, int32_t) { return 7; }};
    s.step(d);
    // Growth adds 60 -> 7; the spine then takes 7 as its next node (removing the duplicate
    // child). With the real ids that spine node is EOS and is cut; with id 2 it stays.
    if (real_eos) {
      EXPECT_EQ(d.draft().size(), 1);
      EXPECT_EQ(d.draft().spine().size(), 1u);
    } else {
      EXPECT_EQ(d.draft().size(), 2);
      ASSERT_EQ(d.draft().spine().size(), 2u);
      EXPECT_EQ(d.draft().tok(d.draft().spine()[1]), 7);
    }
  }
}

TEST(PtdDrafter, OneStepGrowsTheDraftTreeAndNeverAcceptsDraftRows) {
  PtdDrafter d(params(), {2}, 0, 0);
  d.begin(std::vector<int32_t>{1, 10});
  const int32_t a = d.draft().add(20, -1);
  d.draft().add(21, a);
  // The model predicts token (row token + 1) everywhere, and the anchor (10) predicts 20:
  // the draft spine carries 20 but it is aux, so nothing is accepted.
  Script s{{1, 10}, [](const tree::TokenTree& t, int32_t i) { return t.token(i) == 10 ? 20 : t.token(i) + 1; }};
  s.step(d);
  EXPECT_EQ(s.res.n_accepted(), 0);
  EXPECT_EQ(s.res.bonus, 20);
  EXPECT_EQ(s.last.n_candidates(), 0);
  EXPECT_EQ(s.last.size(), 3);
  // 20 already has child 21 (its pred): no growth there; 21 grows 22; the spine (one node,
  // target 4) appends pred(20)=21 after removing 20's duplicate child 21.
  const auto& dt = d.draft();
  ASSERT_EQ(dt.spine().size(), 2u);
  EXPECT_EQ(dt.tok(dt.spine()[0]), 20);
  EXPECT_EQ(dt.tok(dt.spine()[1]), 21);
  EXPECT_TRUE(dt.node(dt.spine()[0]).kids.empty());
  EXPECT_EQ(dt.size(), 2);
  const auto c = d.counters();
  auto get = [&](const std::string& k) {
    for (const auto& [n, v] : c) {
      if (n == k) return v;
    }
    ADD_FAILURE() << "no counter " << k;
    return -1.0;
  };
  EXPECT_EQ(get("steps"), 1.0);
  EXPECT_EQ(get("draft_rows"), 2.0);
  EXPECT_EQ(get("trie_rows"), 0.0);
  EXPECT_EQ(get("draft_nodes_grown"), 1.0);
}

TEST(PtdDrafter, RespectsEveryBudget) {
  PtdDrafter d(params(), {2}, 0, 0);
  d.begin(std::vector<int32_t>{1, 10});
  // Draft tree of 9 nodes, trie for the anchor of 6 nodes.
  int32_t par = d.draft().add(30, -1);
  for (int32_t t = 31; t < 35; ++t) par = d.draft().add(t, par);
  const int32_t s1 = d.draft().add(40, -1);
  for (int32_t t = 41; t < 44; ++t) d.draft().add(t, s1);
  Trie& trie = d.pool().get(10);
  const int32_t e = trie.child(0, 11);
  trie.child(trie.child(e, 12), 13);
  trie.child(0, 14);
  trie.child(0, 15);
  trie.child(e, 16);
  ASSERT_EQ(d.draft().size(), 9);
  ASSERT_EQ(trie.size(), 6);
  for (int32_t budget = 16; budget >= 1; --budget) {
    drafters::DraftInput in;
    const std::vector<int32_t> ctx{1, 10};
    in.context = ctx;
    in.budget = budget;
    const auto t = d.propose(in);
    EXPECT_LE(t.size(), budget);
    const auto& lay = d.last_layout();
    // Trie rows are candidates, draft rows aux; the trie rows are shallow-first.
    EXPECT_EQ(t.n_candidates(), lay.n_trie);
    EXPECT_EQ(lay.n_draft, d.draft().size());  // the tree itself was trimmed to its share
    if (budget == 16) {
      EXPECT_EQ(t.size(), 16);
    }
    if (budget >= 4) {
      EXPECT_GE(lay.n_trie, 1);
    }
    // Shallow first: 3 first-level nodes, then 2 at depth 2, then 1 at depth 3.
    const int32_t max_d = lay.n_trie <= 3 ? 1 : lay.n_trie <= 5 ? 2 : 3;
    for (int32_t i = 1; i < t.size(); ++i) {
      if (t.is_candidate(i)) {
        EXPECT_LE(t.depth(i), max_d);
      }
    }
  }
  EXPECT_EQ(d.draft().size(), 0);  // budget 1 leaves no draft rows
}

TEST(PtdDrafter, MaxRowParametersBoundEveryStep) {
  PtdParams p = params();
  p.max_draft_rows = 5;
  p.max_trie_rows = 3;
  PtdDrafter d(p, {2}, 0, 0);
  EXPECT_EQ(d.max_nodes(), 9);
  d.begin(std::vector<int32_t>{1, 10});
  for (int32_t t = 0; t < 12; ++t) d.draft().add(100 + t, t == 0 ? -1 : d.draft().spine()[0]);
  Trie& trie = d.pool().get(10);
  for (int32_t t = 0; t < 10; ++t) trie.child(0, 200 + t);
  // A varied scripted model so the tree keeps growing; every step stays within 5 + 3 rows.
  Script s{{1, 10}, [](const tree::TokenTree& t, int32_t i) { return (t.token(i) * 7 + i) % 50 + 3; }};
  for (int k = 0; k < 20; ++k) {
    s.step(d, d.max_nodes());
    const auto& lay = d.last_layout();
    ASSERT_LE(lay.n_draft, 5);
    ASSERT_LE(lay.n_trie, 3);
  }
}

TEST(PtdDrafter, FeedbackOnTheLiveTrieAtEveryVerifiedNode) {
  PtdDrafter d(params(), {2}, 0, 0);
  d.begin(std::vector<int32_t>{1, 10});
  Trie& trie = d.pool().get(10);
  const int32_t e = trie.child(0, 11);
  trie.child(e, 12);
  trie.child(0, 14);
  // Model: after 10 comes 11, after 11 comes 13 (so 12 is rejected), 14 -> 15, 12 -> 16.
  std::map<int32_t, int32_t> next{{10, 11}, {11, 13}, {14, 15}, {12, 16}, {13, 17}};
  Script s{{1, 10}, [&](const tree::TokenTree& t, int32_t i) { return next.count(t.token(i)) ? next[t.token(i)] : 3; }};
  PtdParams p = params();
  p.reinsert = false;
  PtdDrafter live(p, {2}, 0, 0);
  live.begin(std::vector<int32_t>{1, 10});
  live.pool().put(10, trie);
  s.step(live);
  EXPECT_EQ(s.res.n_accepted(), 1);  // 11 accepted, bonus 13
  EXPECT_EQ(s.res.bonus, 13);
  // Every verified node (accepted or not) got the model's prediction as a child.
  EXPECT_EQ(trie_text(*live.pool().find(10)), "11(12(16) 13) 14(15)");
}

TEST(PtdDrafter, ReinsertionPutsVerifiedSubtreesUnderTheirOwnTokens) {
  std::map<int32_t, int32_t> next{{10, 11}, {11, 13}, {14, 15}, {12, 16}, {13, 17}};
  for (bool reinsert : {true, false}) {
    PtdParams p = params();
    p.reinsert = reinsert;
    PtdDrafter d(p, {2}, 0, 0);
    d.begin(std::vector<int32_t>{1, 10});
    Trie& trie = d.pool().get(10);
    trie.child(trie.child(0, 11), 12);
    trie.child(0, 14);
    Script s{{1, 10},
             [&](const tree::TokenTree& t, int32_t i) { return next.count(t.token(i)) ? next[t.token(i)] : 3; }};
    s.step(d);
    if (reinsert) {
      ASSERT_NE(d.pool().find(11), nullptr);
      EXPECT_EQ(trie_text(*d.pool().find(11)), "12(16) 13");
      EXPECT_EQ(trie_text(*d.pool().find(12)), "16");
      EXPECT_EQ(trie_text(*d.pool().find(14)), "15");
      EXPECT_EQ(d.pool().find(13), nullptr);  // 13 came from feedback: not verified this step
    } else {
      EXPECT_EQ(d.pool().find(11), nullptr);
      EXPECT_EQ(d.pool().n_keys(), 1u);
    }
  }
}

TEST(PtdDrafter, ReferenceModeSnapshotReplacementDropsLiveInserts) {
  // Two steps with the anchor repeating (10 -> 10): in reference mode the guess trie is the
  // copy of P[10] retrieved during the first step, and feedback in the second step finds
  // the live P[10] changed (by the first step's own feedback) and replaces it with the
  // expanded copy; the live mode keeps both.
  for (bool live : {true, false}) {
    PtdParams p = params();
    p.live_feedback = live;
    p.reinsert = false;
    PtdDrafter d(p, {2}, 0, 0);
    d.begin(std::vector<int32_t>{1, 10});
    Trie& trie = d.pool().get(10);
    trie.child(0, 11);
    // 10 -> 10 always (the anchor repeats), 11 -> 12, 12 -> 13.
    Script s{{1, 10}, [](const tree::TokenTree& t, int32_t i) {
               const int32_t tok = t.token(i);
               return tok == 10 ? 10 : tok + 1;
             }};
    s.step(d);  // step 1: reference mode has no snapshot yet -> no guesses; live mode verifies P[10]
    if (live) {
      EXPECT_EQ(s.last.n_candidates(), 1);
      EXPECT_EQ(trie_text(*d.pool().find(10)), "11(12)");
    } else {
      EXPECT_EQ(s.last.n_candidates(), 0);
      EXPECT_EQ(trie_text(*d.pool().find(10)), "11");
    }
    // Between steps something else extends the live P[10] (as the first step's feedback or
    // another insertion would).
    d.pool().find(10)->child(0, 19);
    s.step(d);
    if (live) {
      // The guesses came from the live trie (3 nodes) and feedback kept everything.
      EXPECT_EQ(s.last.n_candidates(), 3);
      EXPECT_EQ(trie_text(*d.pool().find(10)), "11(12(13)) 19(20)");
    } else {
      // The guesses came from the copy retrieved in step 1 ("11"); the live trie had changed
      // (count 2 != 1), so it was replaced by the expanded copy: 19 is gone.
      EXPECT_EQ(s.last.n_candidates(), 1);
      EXPECT_EQ(trie_text(*d.pool().find(10)), "11(12)");
      double repl = -1;
      for (const auto& [k, v] : d.counters()) {
        if (k == "snapshot_replacements") repl = v;
      }
      EXPECT_EQ(repl, 1.0);
    }
  }
}

TEST(PtdDrafter, PoolInsertionFromTheDraftSnapshotOnceDeepEnough) {
  for (int32_t depth : {3, 4}) {
    PtdParams p = params();
    p.max_depth = 4;
    p.reinsert = false;
    PtdDrafter d(p, {2}, 0, 0);
    d.begin(std::vector<int32_t>{1, 10});
    // Spine 30 with chain 31.. of total depth `depth`, plus spine 40 -> 41.
    int32_t par = d.draft().add(30, -1);
    for (int32_t t = 31; t < 30 + depth; ++t) par = d.draft().add(t, par);
    d.draft().add(41, d.draft().add(40, -1));
    ASSERT_EQ(d.draft().max_depth(), depth);
    // Model: anchor 10 -> 40 (the bonus y = 40, which is a draft token), tok -> tok + 1.
    Script s{{1, 10}, [](const tree::TokenTree& t, int32_t i) { return t.token(i) == 10 ? 40 : t.token(i) + 1; }};
    s.step(d);
    EXPECT_EQ(s.res.bonus, 40);
    if (depth < 4) {
      EXPECT_EQ(d.pool().n_keys(), 0u);  // not deep enough: nothing inserted
      continue;
    }
    // Key-first: P[40] gets 40's subtree with preds: 41 (pred 42).
    ASSERT_NE(d.pool().find(40), nullptr);
    EXPECT_EQ(trie_text(*d.pool().find(40)), "41(42)");
    // Every other node under its own token, with preds as extra children.
    EXPECT_EQ(trie_text(*d.pool().find(30)), "31(32(33(34)))");
    EXPECT_EQ(trie_text(*d.pool().find(32)), "33(34)");
    EXPECT_EQ(trie_text(*d.pool().find(33)), "34");
    EXPECT_EQ(trie_text(*d.pool().find(41)), "42");
    EXPECT_EQ(d.pool().n_keys(), 6u);  // 30 31 32 33 40 41
    // The next step's guesses are P[40].
    s.step(d);
    EXPECT_EQ(s.last.n_candidates(), 2);
    EXPECT_EQ(s.res.n_accepted(), 2);  // 41, 42 match the model's tok + 1
  }
}

TEST(PtdDrafter, BeginResetsPoolAndReseedsReproducibly) {
  PtdParams p;
  PtdDrafter d(p, {2}, 42, 0);
  const std::vector<int32_t> prompt{1, 5, 6, 7, 8, 9};
  d.begin(prompt);
  const auto first = d.draft().preorder();
  std::vector<int32_t> toks1;
  for (int32_t id : first) toks1.push_back(d.draft().tok(id));
  EXPECT_EQ(d.draft().spine().size(), 2u);
  d.pool().get(3).child(0, 4);
  d.begin(prompt);
  EXPECT_EQ(d.pool().n_keys(), 0u);
  std::vector<int32_t> toks2;
  for (int32_t id : d.draft().preorder()) toks2.push_back(d.draft().tok(id));
  EXPECT_EQ(toks1, toks2);
}
