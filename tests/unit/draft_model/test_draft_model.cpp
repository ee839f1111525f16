// Draft-model speculation on stories260K and tiny models:
// - greedy output equals plain greedy on every golden prompt (batch 1 and 4) for chains and
//   trees drafted by a layer subset of the target, a Q8_0 copy of it, and the target
//   itself; and with a function-preserving expansion of stories260K as the target;
// - the draft's KV cache holds exactly the committed context after every step (its cells
//   equal a fresh prefill of the context);
// - proposals respect the budget, --draft-max, --draft-p-min and --draft-min;
// - incompatible draft models are rejected naming what differs.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "common/golden.h"
#include "common/test_util.h"
#include "common/tiny_model.h"
#include "drafters/draft_model/compat.h"
#include "drafters/draft_model/draft_model_drafter.h"
#include "drafters/factory.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/expand.h"
#include "model/quantize.h"
#include "treespec/status.h"

using namespace treespec;

namespace {

drafters::SpecConfig draft_cfg(const std::string& layers, bool tree, const std::string& model_path = "") {
  drafters::SpecConfig c;
  c.method = "draft";
  c.params<drafters::DraftModelParams>().layers = layers;
  c.params<drafters::DraftModelParams>().tree = tree;
  c.params<drafters::DraftModelParams>().model_path = model_path;
  return c;
}

test::DrafterMaker maker(const drafters::SpecConfig& c) {
  return [c](const model::Model& m) { return drafters::make_drafter(c, drafters::DrafterEnv{&m, {}, 1}); };
}

// The Q8_0 copy of stories260K (dims 64, 512: multiples of the 32-wide blocks).
std::string stories_q8() {
  static const std::string path = [] {
    const std::string p = test::temp_dir() + "/s260-q8.gguf";
    // Every matrix but ffn_down (rows of 172, not a multiple of 32: F16) becomes Q8_0.
    const auto s = model::quantize_gguf(test::stories_gguf(), p, tensor::DType::q8_0);
    EXPECT_EQ(s.n_quantized, 31u);
    return p;
  }();
  return path;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(DraftGoldens, LayerSubsetChainAndTree) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = test::load_stories();
  for (const bool tree : {false, true}) {
    for (const char* layers : {"0-1", "0,2,4"}) {
      for (const int32_t n_seq : {1, 4}) {
        SCOPED_TRACE(testing::Message() << "layers " << layers << (tree ? " tree" : " chain") << " batch " << n_seq);
        const auto st = test::expect_goldens(m, maker(draft_cfg(layers, tree)), n_seq);
        EXPECT_GT(st.n_draft_tokens, 0) << "nothing was drafted";
        EXPECT_GT(st.n_accepted, 0) << "no draft was ever accepted";
      }
    }
  }
}

TEST(DraftGoldens, QuantizedCopyAsDraftModel) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = test::load_stories();
  for (const bool tree : {false, true}) {
    for (const int32_t n_seq : {1, 4}) {
      SCOPED_TRACE(testing::Message() << (tree ? "tree" : "chain") << " batch " << n_seq);
      const auto st = test::expect_goldens(m, maker(draft_cfg("", tree, stories_q8())), n_seq);
      // A Q8_0 copy agrees with the F32 model almost always (a tree's other branches are
      // drafted tokens too, so only a chain's acceptance rate says so directly).
      if (!tree) {
        EXPECT_GT(st.acceptance_rate(), 0.9) << st.n_accepted << " of " << st.n_draft_tokens;
      }
      EXPECT_GT(st.mean_accepted_length(), 1.5);
    }
  }
  // A subset of the quantised copy's layers works too (-md and --draft-layers together).
  test::expect_goldens(m, maker(draft_cfg("0-2", true, stories_q8())), 1);
}

TEST(DraftGoldens, TargetAsItsOwnDraftIsAlmostAlwaysRight) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = test::load_stories();
  auto cfg = draft_cfg("0-4", false);
  cfg.params<drafters::DraftModelParams>().p_min = 0.0f;  // never stop early: every chain has --draft-max tokens
  const auto st = test::expect_goldens(m, maker(cfg), 1);
  // Same weights, same kernels: only near-ties may differ between a 1-row and a tree pass.
  EXPECT_GT(st.acceptance_rate(), 0.97) << st.n_accepted << " of " << st.n_draft_tokens;
}

TEST(DraftGoldens, ExpandedTarget) {
  TREESPEC_REQUIRE_SHARED();
  // stories260K expanded to dim 128 / 8 layers computes the same function (docs/expand.md);
  // drafted by the original model (a smaller model of the same family) and by its Q8_0 copy.
  const std::string out = test::temp_dir() + "/expanded.gguf";
  model::ExpandOptions o;
  o.n_embd = 128;
  o.n_ff = 256;
  o.n_layer = 8;
  model::expand_gguf(test::stories_gguf(), out, o);
  test::StoriesModel big;
  big.model = model::Model::load(out);
  big.tok = tokenizer::Tokenizer::from_gguf(big.model->gguf());
  const auto st = test::expect_goldens(big, maker(draft_cfg("", false, test::stories_gguf())), 4);
  EXPECT_GT(st.acceptance_rate(), 0.9);
  test::expect_goldens(big, maker(draft_cfg("", true, test::stories_gguf())), 1);
  test::expect_goldens(big, maker(draft_cfg("0-1", false, stories_q8())), 1);
}

TEST(DraftKv, CacheHoldsExactlyTheCommittedContext) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = test::load_stories();
  const auto& hp = m.model->hparams();
  for (const bool tree : {false, true}) {
    SCOPED_TRACE(tree ? "tree" : "chain");
    engine::EngineParams ep;
    ep.n_ctx = 256;
    engine::Engine eng(*m.model, ep);
    eng.set_eog_ids({});
    engine::SequenceParams sp;
    sp.sampling.temp = 0.0f;
    sp.n_predict = 120;
    engine::Sequence seq(m.tok->encode("Once upon a time, there was a", true, false), sp,
                         drafters::make_drafter(draft_cfg("0,2", tree), drafters::DrafterEnv{m.model.get(), {}, 1}));
    ASSERT_TRUE(eng.add(seq).ok());
    engine::Sequence* one[] = {&seq};
    auto& d = dynamic_cast<drafters::DraftModelDrafter&>(seq.drafter());
    int32_t steps = 0;
    while (!seq.finished()) {
      eng.step(one);
      ++steps;
      // Between steps the draft holds a prefix of the context (what it has run), never a
      // token the target did not accept.
      const auto& c = d.committed();
      ASSERT_LE(c.size(), seq.context().size());
      ASSERT_TRUE(std::equal(c.begin(), c.end(), seq.context().begin())) << "step " << steps;
    }
    // After a proposal it holds exactly the context but the root; its cells equal a fresh
    // prefill of that context with the same layers.
    drafters::DraftInput in;
    in.context = seq.context();
    in.budget = 1;  // sync only
    (void)d.propose(in);
    in.budget = 8;
    (void)d.propose(in);
    const auto& c = d.committed();
    ASSERT_EQ(c.size() + 1, seq.context().size());
    const std::vector<int32_t> layers = {0, 2};
    model::ForwardContext fc(*m.model, 1);
    kv::KvShape shape = m.model->kv_shape(1, 256);
    shape.n_layer = 2;
    kv::KvCache fresh(shape);
    model::Batch b;
    b.add_chain(0, 0, c);
    fc.reserve(b.n_rows(), 256);
    m.model->embed(b, fc.x());
    ASSERT_TRUE(m.model->run_layer_list(fc, b, layers, fc.x(), fresh).ok());
    const auto& dkv = d.lm().kv();
    ASSERT_EQ(dkv.n_past(0), static_cast<int32_t>(c.size()));
    double max_diff = 0.0;
    const size_t row = static_cast<size_t>(hp.n_head_kv) * static_cast<size_t>(hp.head_dim);
    std::vector<float> kd(row), vd(row), kf(row), vf(row);
    for (int32_t il = 0; il < 2; ++il) {
      for (size_t cell = 0; cell < c.size(); ++cell) {
        dkv.read_row(il, 0, static_cast<int32_t>(cell), kd.data(), vd.data());
        fresh.read_row(il, 0, static_cast<int32_t>(cell), kf.data(), vf.data());
        for (size_t i = 0; i < row; ++i) {
          max_diff = std::max(max_diff, static_cast<double>(std::fabs(kd[i] - kf[i])));
          max_diff = std::max(max_diff, static_cast<double>(std::fabs(vd[i] - vf[i])));
        }
      }
    }
    EXPECT_LT(max_diff, 1e-4) << "draft KV differs from a fresh prefill of the committed context";
    const auto counters = d.counters();
    double reused = 0.0;
    for (const auto& [k, v] : counters) {
      if (k == "draft_kv_reused_rows") reused = v;
    }
    EXPECT_GT(reused, static_cast<double>(steps)) << "accepted draft rows were not reused";
  }
}

TEST(DraftPropose, RespectsBudgetAndLimits) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = test::load_stories();
  const std::vector<int32_t> ctx = m.tok->encode("Once upon a time, there was a little girl", true, false);
  auto propose = [&](drafters::SpecConfig c, int32_t budget) {
    auto d = drafters::make_drafter(c, drafters::DrafterEnv{m.model.get(), {}, 1});
    drafters::DraftInput in;
    in.context = ctx;
    in.n_past = static_cast<int32_t>(ctx.size()) - 1;
    in.budget = budget;
    return d->propose(in);
  };
  for (const bool tree : {false, true}) {
    for (int32_t budget : {1, 2, 3, 5, 9, 17, 40}) {
      auto c = draft_cfg("0-4", tree);
      c.params<drafters::DraftModelParams>().p_min = 0.0f;
      const auto t = propose(c, budget);
      t.validate();
      EXPECT_EQ(t.token(0), ctx.back());
      EXPECT_LE(t.size(), budget);
      EXPECT_LE(t.max_depth(), c.params<drafters::DraftModelParams>().n_draft_max);
      if (!tree) {
        // p_min 0: a chain always runs to min(budget - 1, --draft-max).
        EXPECT_EQ(t.size(), std::min(budget, c.params<drafters::DraftModelParams>().n_draft_max + 1));
        EXPECT_EQ(t.max_depth(), t.size() - 1);
      } else if (budget <= c.params<drafters::DraftModelParams>().n_draft_max + 1) {
        EXPECT_EQ(t.size(), budget);  // p_min 0: the tree fills any budget its depth limit allows
      }
    }
  }
  // A tree with a low split threshold branches; a chain never does.
  auto c = draft_cfg("0-1", true);
  c.params<drafters::DraftModelParams>().p_min = 0.0f;
  c.params<drafters::DraftModelParams>().p_split = 0.02f;
  const auto t = propose(c, 16);
  EXPECT_LT(t.max_depth(), t.size() - 1) << "the tree did not branch";
  // p_min 1: the draft is never that sure, nothing is drafted.
  c = draft_cfg("0-1", false);
  c.params<drafters::DraftModelParams>().p_min = 1.0f;
  EXPECT_EQ(propose(c, 9).size(), 1);
  // --draft-min above what p_min lets through: the draft is dropped.
  c = draft_cfg("0-4", false);
  c.params<drafters::DraftModelParams>().p_min = 0.0f;
  c.params<drafters::DraftModelParams>().n_draft_max = 4;
  c.params<drafters::DraftModelParams>().n_draft_min = 4;
  EXPECT_EQ(propose(c, 5).size(), 5);
  EXPECT_EQ(propose(c, 4).size(), 1);
}

TEST(DraftCompat, RejectsIncompatibleDraftsNamingTheDifference) {
  const std::string dir = test::temp_dir();
  test::TinyModelConfig base;
  test::write_tiny_model(dir + "/target.gguf", base);
  const auto target = model::Model::load(dir + "/target.gguf");
  auto variant = [&](const std::string& name, const std::function<void(test::TinyModelConfig&)>& edit) {
    test::TinyModelConfig c = base;
    c.seed = 7;  // different weights are fine; vocabularies must match
    edit(c);
    const std::string p = dir + "/" + name + ".gguf";
    test::write_tiny_model(p, c);
    return p;
  };
  const std::string ok = variant("ok", [](test::TinyModelConfig& c) { c.n_layer = 1; });
  EXPECT_NO_THROW(drafters::load_draft_model(ok, *target));

  struct Case {
    std::string file;
    std::string expect;
  };
  const Case cases[] = {
      {variant("vocab", [](test::TinyModelConfig& c) { c.n_vocab = 80; }),
       "vocabulary size differs (draft 80 tokens, target 64)"},
      {variant("text",
               [](test::TinyModelConfig& c) {
                 c.customize = [](gguf::GgufWriter& w) {
                   std::vector<std::string> toks = {"<unk>", "<s>", "</s>"};
                   for (int i = 3; i < 64; ++i) toks.push_back(i == 37 ? std::string("zz") : fmt::format("t{}", i));
                   w.set("tokenizer.ggml.tokens", gguf::Value::string_array(toks));
                 };
               }),
       "token 37 is 'zz' in the draft but 't37' in the target"},
      {variant("eos", [](test::TinyModelConfig& c) { c.eos_id = 5; }), "EOS token id differs (draft 5, target 2"},
  };
  for (const auto& c : cases) {
    const std::string e = error_of([&] { drafters::load_draft_model(c.file, *target); });
    EXPECT_NE(e.find(c.expect), std::string::npos) << e;
    EXPECT_NE(e.find(c.file), std::string::npos) << "the message names the draft file: " << e;
    // The factory (what --spec draft -md uses) refuses it the same way.
    const std::string f = error_of([&] {
      drafters::make_drafter(draft_cfg("", false, c.file), drafters::DrafterEnv{target.get(), {}, 1});
    });
    EXPECT_NE(f.find(c.expect), std::string::npos) << f;
  }
}

TEST(DraftCompat, FactoryErrors) {
  const std::string dir = test::temp_dir();
  test::write_tiny_model(dir + "/t.gguf", test::TinyModelConfig{});
  const auto m = model::Model::load(dir + "/t.gguf");
  const drafters::DrafterEnv env{m.get(), {}, 1};
  EXPECT_NE(error_of([&] { drafters::make_drafter(draft_cfg("", false), env); }).find("-md DRAFT.gguf"),
            std::string::npos);
  EXPECT_NE(error_of([&] { drafters::make_drafter(draft_cfg("0-2", false), env); }).find("out of range"),
            std::string::npos);
  auto c = draft_cfg("0", false);
  c.params<drafters::DraftModelParams>().n_draft_max = 0;
  EXPECT_NE(error_of([&] { drafters::make_drafter(c, env); }).find("--draft-max"), std::string::npos);
  c = draft_cfg("0", false);
  c.params<drafters::DraftModelParams>().p_min = 1.5f;
  EXPECT_NE(error_of([&] { drafters::make_drafter(c, env); }).find("--draft-p-min"), std::string::npos);
  EXPECT_THROW(drafters::make_drafter(draft_cfg("", false, dir + "/missing.gguf"), env), Error);
  const auto names = drafters::spec_methods();
  EXPECT_NE(std::find(names.begin(), names.end(), "draft"), names.end());
}
