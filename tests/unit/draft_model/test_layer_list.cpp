// Layer lists: parsing, Model::run_layer_list (a list of all layers is the full model, bit
// for bit, on prefill and on a tree step; a subset equals the same layers written out as a
// model of their own by write_layer_subset, logits and KV cache), and `treespec subset`.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "common/test_util.h"
#include "common/tiny_model.h"
#include "drafters/draft_model/layer_list.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "treespec/status.h"

using namespace treespec;

namespace {

using drafters::format_layer_list;
using drafters::parse_layer_list;

std::string error_of(const std::string& text, int32_t n_layer) {
  try {
    parse_layer_list(text, n_layer);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

// Logits of all rows of two passes: a causal prefill of `prompt`, then `tree` on top of it
// (not committed), computed with `layers` (empty: run_layers over all layers).
struct TwoPass {
  std::vector<float> logits;     // [rows of both passes, n_vocab]
  std::vector<float> kv_layer0;  // K and V of KV layer `probe` after both passes
};

TwoPass run_two_passes(const model::Model& m, const std::vector<int32_t>& layers, const std::vector<int32_t>& prompt,
                       const tree::TokenTree& tree, int32_t probe_kv_layer) {
  const auto& hp = m.hparams();
  model::ForwardContext ctx(m, 1);
  kv::KvShape shape = m.kv_shape(1, 64);
  if (!layers.empty()) shape.n_layer = static_cast<int32_t>(layers.size());
  kv::KvCache kv(shape);
  TwoPass out;
  auto pass = [&](const model::Batch& b) {
    const int32_t n = b.n_rows();
    ctx.reserve(n, kv.n_cells());
    float* x = ctx.x();
    m.embed(b, x);
    const Status st =
        layers.empty() ? m.run_layers(ctx, b, 0, hp.n_layer, x, kv) : m.run_layer_list(ctx, b, layers, x, kv);
    EXPECT_TRUE(st.ok());
    std::vector<float> xn(static_cast<size_t>(n) * hp.n_embd);
    std::vector<float> lg(static_cast<size_t>(n) * hp.n_vocab);
    m.final_norm(x, n, {}, xn.data());
    m.lm_head(ctx, xn.data(), n, lg.data());
    out.logits.insert(out.logits.end(), lg.begin(), lg.end());
  };
  model::Batch b;
  b.add_chain(0, 0, prompt);
  pass(b);
  std::vector<int32_t> path(prompt.size());
  std::iota(path.begin(), path.end(), 0);
  EXPECT_TRUE(kv.commit(0, path).ok());
  b.clear();
  b.add_tree(0, kv.n_past(0), tree);
  pass(b);
  // K and V of the cells written (committed prompt + tree rows), every KV head.
  const size_t used = prompt.size() + static_cast<size_t>(tree.size());
  const size_t row = static_cast<size_t>(shape.n_head_kv) * static_cast<size_t>(shape.head_dim);
  std::vector<float> k(row), v(row);
  for (size_t cell = 0; cell < used; ++cell) {
    kv.read_row(probe_kv_layer, 0, static_cast<int32_t>(cell), k.data(), v.data());
    out.kv_layer0.insert(out.kv_layer0.end(), k.begin(), k.end());
    out.kv_layer0.insert(out.kv_layer0.end(), v.begin(), v.end());
  }
  return out;
}

tree::TokenTree small_tree() {
  tree::TokenTree t(9);
  const int32_t a = t.add(10, 0);
  t.add(11, 0);
  const int32_t c = t.add(12, a);
  t.add(13, c);
  t.add(14, a);
  return t;
}

}  // namespace

TEST(LayerList, Parses) {
  EXPECT_EQ(parse_layer_list("0,1,2", 5), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(parse_layer_list("0-2,4", 5), (std::vector<int32_t>{0, 1, 2, 4}));
  EXPECT_EQ(parse_layer_list("3", 5), (std::vector<int32_t>{3}));
  EXPECT_EQ(parse_layer_list("1-1,3-4", 5), (std::vector<int32_t>{1, 3, 4}));
  EXPECT_EQ(parse_layer_list("0-2+4", 5), (std::vector<int32_t>{0, 1, 2, 4}));  // bench specs: no commas
  EXPECT_EQ(format_layer_list(std::vector<int32_t>{0, 1, 2, 4, 6, 7}), "0-2,4,6-7");
  EXPECT_EQ(format_layer_list(std::vector<int32_t>{3}), "3");
}

TEST(LayerList, RejectsBadListsNamingTheItem) {
  EXPECT_NE(error_of("", 5).find("empty"), std::string::npos);
  EXPECT_NE(error_of("a", 5).find("'a'"), std::string::npos);
  EXPECT_NE(error_of("1,,2", 5).find("''"), std::string::npos);
  EXPECT_NE(error_of("1+", 5).find("''"), std::string::npos);
  EXPECT_NE(error_of("1-", 5).find("'1-'"), std::string::npos);
  EXPECT_NE(error_of("-1", 5).find("'-1'"), std::string::npos);
  EXPECT_NE(error_of("3-1", 5).find("backwards"), std::string::npos);
  EXPECT_NE(error_of("0,0", 5).find("repeats"), std::string::npos);
  EXPECT_NE(error_of("2,1", 5).find("repeats or goes backwards"), std::string::npos);
  const std::string e = error_of("0-5", 5);
  EXPECT_NE(e.find("5 layers"), std::string::npos) << e;
  EXPECT_NE(e.find("--draft-layers"), std::string::npos) << e;
}

TEST(LayerList, AllLayersEqualTheFullModelBitForBit) {
  const std::string path = test::temp_dir() + "/tiny3.gguf";
  test::TinyModelConfig cfg;
  cfg.n_layer = 3;
  test::write_tiny_model(path, cfg);
  const auto m = model::Model::load(path);
  const std::vector<int32_t> prompt = {1, 5, 7, 8, 3};
  const auto full = run_two_passes(*m, {}, prompt, small_tree(), 2);
  const auto listed = run_two_passes(*m, {0, 1, 2}, prompt, small_tree(), 2);
  ASSERT_EQ(full.logits.size(), listed.logits.size());
  EXPECT_EQ(0, std::memcmp(full.logits.data(), listed.logits.data(), full.logits.size() * sizeof(float)));
  EXPECT_EQ(full.kv_layer0, listed.kv_layer0);
}

TEST(LayerList, SubsetEqualsTheSubsetWrittenAsAModel) {
  const std::string dir = test::temp_dir();
  test::TinyModelConfig cfg;
  cfg.n_layer = 4;
  cfg.qkv_bias = true;  // biases are per layer too
  test::write_tiny_model(dir + "/tiny4.gguf", cfg);
  const auto m = model::Model::load(dir + "/tiny4.gguf");
  const std::vector<int32_t> layers = {0, 2, 3};
  drafters::write_layer_subset(dir + "/tiny4.gguf", dir + "/sub.gguf", layers);
  const auto sub = model::Model::load(dir + "/sub.gguf");
  EXPECT_EQ(sub->hparams().n_layer, 3);
  EXPECT_EQ(sub->hparams().n_vocab, m->hparams().n_vocab);
  const std::vector<int32_t> prompt = {1, 4, 9, 16, 25, 36};
  for (int32_t probe : {0, 1, 2}) {
    const auto view = run_two_passes(*m, layers, prompt, small_tree(), probe);
    const auto file = run_two_passes(*sub, {}, prompt, small_tree(), probe);
    ASSERT_EQ(view.logits.size(), file.logits.size());
    EXPECT_EQ(0, std::memcmp(view.logits.data(), file.logits.data(), view.logits.size() * sizeof(float))) << probe;
    EXPECT_EQ(view.kv_layer0, file.kv_layer0)
        << "KV layer " << probe << " of the view is model layer " << layers[probe];
  }
  // And a subset is a different function from the full model (the test can fail).
  const auto full = run_two_passes(*m, {}, prompt, small_tree(), 0);
  const auto view = run_two_passes(*m, layers, prompt, small_tree(), 0);
  EXPECT_NE(0, std::memcmp(full.logits.data(), view.logits.data(), full.logits.size() * sizeof(float)));
  // Metadata other than the depth is copied (the tokenizer is the same).
  EXPECT_EQ(sub->gguf().get_string_array("tokenizer.ggml.tokens"), m->gguf().get_string_array("tokenizer.ggml.tokens"));
}

TEST(LayerList, SubsetCommand) {
  const std::string dir = test::temp_dir();
  test::TinyModelConfig cfg;
  cfg.n_layer = 3;
  test::write_tiny_model(dir + "/t.gguf", cfg);
  std::string out;
  const std::string bin = test::treespec_binary();
  ASSERT_EQ(test::run_command(bin + " subset -m " + dir + "/t.gguf -o " + dir + "/s.gguf --layers 0,2 2>&1", &out), 0)
      << out;
  EXPECT_NE(out.find("layers 0,2 of 3"), std::string::npos) << out;
  EXPECT_EQ(model::Model::load(dir + "/s.gguf")->hparams().n_layer, 2);
  EXPECT_NE(test::run_command(bin + " subset -m " + dir + "/t.gguf -o " + dir + "/x.gguf --layers 1-3 2>&1", &out), 0);
  EXPECT_NE(out.find("out of range"), std::string::npos) << out;
}
