// Each supported architecture family, as a tiny random-weight GGUF written by our
// writer, against the independent float64 reference forward (common/reference_forward.h):
// prefill logits, and tree-verification logits of every node of random trees.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/arch_families.h"
#include "common/reference_forward.h"
#include "common/test_util.h"
#include "common/tiny_model.h"
#include "core/rng.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "tree/token_tree.h"

using namespace treespec;

namespace {

// KV cells per sequence in these tests (LongRoPE families pick their factors by it).
constexpr int32_t kCells = 64;

test::ReferenceOptions ref_options(int n_ctx = kCells) {
  test::ReferenceOptions o;
  o.n_ctx = n_ctx;
  return o;
}

using test::families;
using test::Family;

double rel_err(const float* ours, const std::vector<double>& ref) {
  double scale = 1.0, err = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    scale = std::max(scale, std::fabs(ref[i]));
    err = std::max(err, std::fabs(static_cast<double>(ours[i]) - ref[i]));
  }
  return err / scale;
}

double rel_err(const std::vector<double>& a, const std::vector<double>& ref) {
  double scale = 1.0, err = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    scale = std::max(scale, std::fabs(ref[i]));
    err = std::max(err, std::fabs(a[i] - ref[i]));
  }
  return err / scale;
}

struct Loaded {
  std::shared_ptr<const gguf::GgufFile> file;
  std::unique_ptr<model::Model> model;
};

Loaded load(const Family& fam) {
  const std::string path = test::temp_dir() + "/" + fam.name + ".gguf";
  test::write_tiny_model(path, fam.cfg);
  Loaded l;
  l.file = gguf::GgufFile::open(path);
  l.model = model::Model::from_gguf(l.file);
  return l;
}

tree::TokenTree random_tree(core::Rng& rng, int32_t n_nodes, int32_t max_depth, int32_t V) {
  tree::TokenTree t(static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V))));
  while (t.size() < n_nodes) {
    int32_t parent = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(t.size())));
    if (t.depth(parent) >= max_depth) continue;
    t.add(static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V))), parent);
  }
  return t;
}

}  // namespace

class ArchReference : public ::testing::TestWithParam<Family> {};

TEST_P(ArchReference, PrefillMatches) {
  const Family& fam = GetParam();
  Loaded l = load(fam);
  const test::ReferenceModel ref(*l.file, ref_options());
  const int32_t V = l.model->hparams().n_vocab;
  ASSERT_EQ(V, ref.n_vocab());
  core::Rng rng(fam.cfg.seed * 31);
  std::vector<int32_t> toks(13);
  for (auto& t : toks) t = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V)));

  model::ForwardContext ctx(*l.model, 2);
  kv::KvCache kv(l.model->kv_shape(1, kCells));
  model::Batch b;
  b.add_chain(0, 0, toks);
  std::vector<float> logits(toks.size() * static_cast<size_t>(V));
  ASSERT_TRUE(l.model->forward(ctx, b, kv, {}, logits.data()).ok());
  const auto want = ref.causal(std::vector<int>(toks.begin(), toks.end()));
  double worst = 0;
  for (size_t i = 0; i < toks.size(); ++i) worst = std::max(worst, rel_err(logits.data() + i * V, want[i]));
  EXPECT_LT(worst, fam.tol) << fam.name;
  RecordProperty("max_rel_err", fmt::format("{:.3g}", worst));
}

// A random tree after a committed prefix: every node's logits equal the reference run
// with the tree mask, and (for a sample of nodes) the reference run on the node's path.
TEST_P(ArchReference, TreeVerificationMatches) {
  const Family& fam = GetParam();
  Loaded l = load(fam);
  const test::ReferenceModel ref(*l.file, ref_options());
  const int32_t V = l.model->hparams().n_vocab;
  core::Rng rng(fam.cfg.seed * 77);
  std::vector<int32_t> prefix(9);
  for (auto& t : prefix) t = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V)));

  model::ForwardContext ctx(*l.model, 2);
  kv::KvCache kv(l.model->kv_shape(1, kCells));
  {
    model::Batch b;
    b.add_chain(0, 0, prefix);
    std::vector<float> logits(prefix.size() * static_cast<size_t>(V));
    ASSERT_TRUE(l.model->forward(ctx, b, kv, {}, logits.data()).ok());
    std::vector<int32_t> path(prefix.size());
    for (size_t i = 0; i < path.size(); ++i) path[i] = static_cast<int32_t>(i);
    ASSERT_TRUE(kv.commit(0, path).ok());
  }
  const tree::TokenTree t = random_tree(rng, 24, 5, V);
  model::Batch b;
  b.add_tree(0, kv.n_past(0), t);
  std::vector<float> logits(static_cast<size_t>(t.size()) * V);
  ASSERT_TRUE(l.model->forward(ctx, b, kv, {}, logits.data()).ok());

  // Reference rows: the prefix (causal), then the tree nodes (prefix + ancestors-or-self).
  const size_t np = prefix.size(), n = np + static_cast<size_t>(t.size());
  std::vector<int> toks(prefix.begin(), prefix.end()), pos(np);
  std::vector<std::vector<bool>> vis(n, std::vector<bool>(n, false));
  for (size_t i = 0; i < np; ++i) {
    pos[i] = static_cast<int>(i);
    for (size_t j = 0; j <= i; ++j) vis[i][j] = true;
  }
  for (int32_t node = 0; node < t.size(); ++node) {
    toks.push_back(t.token(node));
    pos.push_back(static_cast<int>(np) + t.depth(node));
    auto& row = vis[np + static_cast<size_t>(node)];
    for (size_t j = 0; j < np; ++j) row[j] = true;
    for (int32_t a : t.path_to(node)) row[np + static_cast<size_t>(a)] = true;
  }
  const auto want = ref.forward(toks, pos, vis);
  double worst = 0;
  for (int32_t node = 0; node < t.size(); ++node) {
    const double e = rel_err(logits.data() + static_cast<size_t>(node) * V, want[np + static_cast<size_t>(node)]);
    EXPECT_LT(e, fam.tol) << fam.name << " node " << node << " depth " << t.depth(node);
    worst = std::max(worst, e);
  }
  RecordProperty("max_rel_err", fmt::format("{:.3g}", worst));
  // The masked reference itself agrees with plain causal runs of the paths.
  for (int32_t node = 0; node < t.size(); node += 5) {
    std::vector<int> path_toks(prefix.begin(), prefix.end());
    for (int32_t a : t.path_to(node)) path_toks.push_back(t.token(a));
    const auto causal = ref.causal(path_toks);
    EXPECT_LT(rel_err(causal.back(), want[np + static_cast<size_t>(node)]), 1e-9) << "node " << node;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ArchReference, ::testing::ValuesIn(families()),
                         [](const ::testing::TestParamInfo<Family>& info) { return std::string(info.param.name); });

// The comparison can fail: the reference with the other RoPE convention, or without
// Llama 3's factors, is far from our logits (so matching above is not an accident of
// short contexts or small angles).
TEST(ArchReferenceSensitivity, WrongConventionsAreDetected) {
  for (const Family& fam : families()) {
    const std::string name = fam.name;
    if (name != "qwen2_tied" && name != "tinyllama_gqa_untied" && name != "llama3_rope_freqs" &&
        name != "phi3_longrope") {
      continue;
    }
    Loaded l = load(fam);
    const int32_t V = l.model->hparams().n_vocab;
    core::Rng rng(5);
    std::vector<int32_t> toks(24);
    for (auto& t : toks) t = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V)));
    model::ForwardContext ctx(*l.model, 1);
    kv::KvCache kv(l.model->kv_shape(1, kCells));
    model::Batch b;
    b.add_chain(0, 0, toks);
    std::vector<float> logits(toks.size() * static_cast<size_t>(V));
    ASSERT_TRUE(l.model->forward(ctx, b, kv, {}, logits.data()).ok());
    test::ReferenceModel::Options wrong = ref_options();
    if (name == "llama3_rope_freqs") wrong.ignore_rope_freqs = true;
    else if (name == "phi3_longrope") wrong.ignore_longrope = true;
    else wrong.flip_rope_convention = true;
    const test::ReferenceModel ref(*l.file, wrong);
    const auto want = ref.causal(std::vector<int>(toks.begin(), toks.end()));
    double worst = 0;
    for (size_t i = 0; i < toks.size(); ++i) worst = std::max(worst, rel_err(logits.data() + i * V, want[i]));
    EXPECT_GT(worst, 100 * fam.tol) << name;
    RecordProperty(name + "_wrong_rel_err", fmt::format("{:.3g}", worst));
  }
}

// LongRoPE picks its factors by the context per sequence, as llama.cpp does: short ones
// up to rope.scaling.original_context_length (256 here), long ones beyond; both match the
// reference, and the choice changes the logits (the test can fail).
TEST(ArchLongRope, FactorsFollowTheContextSize) {
  const auto fams = families();
  const auto it =
      std::find_if(fams.begin(), fams.end(), [](const Family& f) { return std::string(f.name) == "phi3_longrope"; });
  ASSERT_NE(it, fams.end());
  Loaded l = load(*it);
  const int32_t V = l.model->hparams().n_vocab;
  core::Rng rng(9);
  std::vector<int32_t> toks(20);
  for (auto& t : toks) t = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V)));
  std::vector<std::vector<float>> got;
  for (const int32_t cells : {256, 257}) {
    model::ForwardContext ctx(*l.model, 1);
    kv::KvCache kv(l.model->kv_shape(1, cells));
    model::Batch b;
    b.add_chain(0, 0, toks);
    std::vector<float> logits(toks.size() * static_cast<size_t>(V));
    ASSERT_TRUE(l.model->forward(ctx, b, kv, {}, logits.data()).ok());
    const test::ReferenceModel ref(*l.file, ref_options(cells));
    const auto want = ref.causal(std::vector<int>(toks.begin(), toks.end()));
    double worst = 0;
    for (size_t i = 0; i < toks.size(); ++i) worst = std::max(worst, rel_err(logits.data() + i * V, want[i]));
    EXPECT_LT(worst, it->tol) << cells << " cells";
    got.push_back(std::move(logits));
  }
  double diff = 0;
  for (size_t i = 0; i < got[0].size(); ++i)
    diff = std::max(diff, static_cast<double>(std::fabs(got[0][i] - got[1][i])));
  EXPECT_GT(diff, 0.01);
}

// The lossless contract per family (sliding windows and soft-capping included): every
// tree node's logits equal, bit for bit, those of decoding its path one token per forward
// pass after the same prefix, and a prefill row equals the step that decodes it alone.
TEST_P(ArchReference, TreeRowsEqualStepByStepDecodingBitForBit) {
  const Family& fam = GetParam();
  Loaded l = load(fam);
  const int32_t V = l.model->hparams().n_vocab;
  core::Rng rng(fam.cfg.seed * 13);
  std::vector<int32_t> prefix(14);
  for (auto& t : prefix) t = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V)));
  model::ForwardContext ctx(*l.model, 2);
  kv::KvCache kv(l.model->kv_shape(2, kCells));
  auto run = [&](int32_t seq, const std::vector<int32_t>& toks, bool commit) {
    model::Batch b;
    b.add_chain(seq, kv.n_past(seq), toks);
    std::vector<float> logits(toks.size() * static_cast<size_t>(V));
    EXPECT_TRUE(l.model->forward(ctx, b, kv, {}, logits.data()).ok());
    if (commit) {
      std::vector<int32_t> path(toks.size());
      for (size_t i = 0; i < path.size(); ++i) path[i] = static_cast<int32_t>(i);
      EXPECT_TRUE(kv.commit(seq, path).ok());
    }
    return logits;
  };
  const auto pre = run(0, prefix, true);
  for (size_t i = 0; i < prefix.size(); ++i) {  // seq 1: the prefix one token at a time
    const auto one = run(1, {prefix[i]}, true);
    ASSERT_EQ(0, std::memcmp(one.data(), pre.data() + i * V, V * sizeof(float))) << fam.name << " prefill row " << i;
  }
  const tree::TokenTree t = random_tree(rng, 20, 6, V);
  model::Batch b;
  b.add_tree(0, kv.n_past(0), t);
  std::vector<float> logits(static_cast<size_t>(t.size()) * V);
  ASSERT_TRUE(l.model->forward(ctx, b, kv, {}, logits.data()).ok());
  for (int32_t node = 0; node < t.size(); ++node) {
    kv.clear(1);
    run(1, prefix, true);
    std::vector<float> last;
    for (int32_t a : t.path_to(node)) last = run(1, {t.token(a)}, true);
    ASSERT_EQ(0, std::memcmp(last.data(), logits.data() + static_cast<size_t>(node) * V, V * sizeof(float)))
        << fam.name << " node " << node << " depth " << t.depth(node);
  }
}
