#include "drafters/propd/prune_head.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

#include "core/assert.h"
#include "drafters/medusa/medusa_heads.h"
#include "model/model.h"
#include "treespec/status.h"

namespace treespec::drafters {

namespace {

const char* kPropdEmbd = "propd.embedding_length";
const char* kPropdVocab = "propd.vocab_size";
const char* kPropdBaseLayers = "propd.base.block_count";
const char* kPropdBaseHash = "propd.base.output_hash";
const char* kPropdTopK = "propd.calibration.top_k";
const char* kPropdPositions = "propd.calibration.positions";
const char* kPropdLensRecall = "propd.calibration.lens_recall";
const char* kPropdHeadLayers = "propd.prune.layers";
const char* kPropdHeadBlocks = "propd.prune.block_count";
const char* kPropdHeadOutput = "propd.prune.output";  // "base" (the model's output matrix) or "own"
const char* kPropdHeadRecall = "propd.calibration.head_recall";
const char* kPropdTarget = "propd.prune.recall_target";
const char* kPropdDefaultK = "propd.prune.default_k";
const char* kPropdDefaultLayer = "propd.prune.default_layer";

int32_t propd_bounded(const gguf::GgufFile& f, const char* key, int64_t lo, int64_t hi) {
  const int64_t v = f.get_int(key);
  if (v < lo || v > hi)
    throw FormatError(fmt::format("{}: metadata key '{}' = {} is out of range ({}..{})", f.path(), key, v, lo, hi));
  return static_cast<int32_t>(v);
}

}  // namespace

std::string prune_block_weight_name(int32_t layer, int32_t block) {
  return fmt::format("propd.prune.{}.blk.{}.weight", layer, block);
}
std::string prune_block_bias_name(int32_t layer, int32_t block) {
  return fmt::format("propd.prune.{}.blk.{}.bias", layer, block);
}
std::string prune_output_name(int32_t layer) { return fmt::format("propd.prune.{}.output.weight", layer); }

std::shared_ptr<const PruneHead> PruneHead::logit_lens(int32_t layer) {
  // One lens per layer for the whole process (it holds no model state), so sequences
  // pruned at the same layer share a scorer and the engine scores their rows in one call.
  static std::mutex mu;
  static std::map<int32_t, std::shared_ptr<const PruneHead>> lenses;
  std::lock_guard<std::mutex> lock(mu);
  auto& h = lenses[layer];
  if (!h) {
    std::shared_ptr<PruneHead> lens(new PruneHead());
    lens->layer_ = layer;
    lens->lens_ = true;
    h = std::move(lens);
  }
  return h;
}

std::shared_ptr<PruneHead> PruneHead::from_f32(int32_t layer, int32_t n_embd, int32_t n_vocab,
                                               std::vector<std::vector<float>> block_w,
                                               std::vector<std::vector<float>> block_b, std::vector<float> out_w) {
  TREESPEC_ASSERT(block_w.size() == block_b.size(), "PruneHead::from_f32: one bias per block");
  const int64_t E = n_embd, V = n_vocab;
  std::shared_ptr<PruneHead> h(new PruneHead());
  h->layer_ = layer;
  h->lens_ = false;
  h->n_embd_ = n_embd;
  h->n_vocab_ = n_vocab;
  h->owned_.reserve(block_w.size() + 1);  // no reallocation: views point into owned_
  for (size_t r = 0; r < block_w.size(); ++r) {
    TREESPEC_ASSERT(block_w[r].size() == static_cast<size_t>(E * E) && block_b[r].size() == static_cast<size_t>(E),
                    "PruneHead::from_f32: block shapes");
    h->owned_.push_back(std::move(block_w[r]));
    h->blocks_.push_back(Block{model::Linear::f32(h->owned_.back().data(), E, E), std::move(block_b[r])});
  }
  if (out_w.empty()) return h;  // shared: the model's output matrix
  TREESPEC_ASSERT(out_w.size() == static_cast<size_t>(V * E), "PruneHead::from_f32: projection shape");
  h->owned_.push_back(std::move(out_w));
  h->out_ = model::Linear::f32(h->owned_.back().data(), E, V);
  return h;
}

void PruneHead::logits(const model::Model& m, const float* x, int32_t n, float* work, float* logits,
                       core::ThreadPool* pool) const {
  TREESPEC_ASSERT(lens_ || n_embd_ == m.hparams().n_embd,
                  "PruneHead: embedding width differs from the model (check_fits)");
  m.final_norm(x, n, {}, work);
  logits_normed(m, work, n, work, logits, pool);
}

void PruneHead::logits_normed(const model::Model& m, const float* hin, int32_t n, float* work, float* logits,
                              core::ThreadPool* pool) const {
  const int64_t E = lens_ ? m.hparams().n_embd : n_embd_;
  const model::Linear out = shared_output() ? m.output() : out_;
  if (blocks_.empty()) {  // the lens, or a head without blocks: only the projection
    out.apply(hin, n, logits, pool);
    return;
  }
  float* h = work;          // [n, E]
  float* z = work + n * E;  // [n, E]
  if (hin != h) std::memcpy(h, hin, static_cast<size_t>(n * E) * sizeof(float));
  for (const Block& b : blocks_) {
    b.w.apply(h, n, z, pool);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t i = 0; i < E; ++i) h[r * E + i] += block_silu(z[r * E + i] + b.b[static_cast<size_t>(i)]);
    }
  }
  out.apply(h, n, logits, pool);
}

// ---------------------------------------------------------------------------------------

float PruneCalibration::lens(int32_t layer, int32_t k) const {
  if (k < 1 || k > top_k || layer < 0 || layer >= lens_layers()) return -1.0f;
  return lens_recall[static_cast<size_t>(layer * top_k + k - 1)];
}

float PruneCalibration::head(int32_t layer, int32_t k) const {
  if (k < 1 || k > top_k) return -1.0f;
  for (size_t i = 0; i < head_layers.size(); ++i) {
    if (head_layers[i] == layer) return head_recall[i * static_cast<size_t>(top_k) + static_cast<size_t>(k - 1)];
  }
  return -1.0f;
}

int32_t smallest_layer_meeting(int32_t n_layer, int32_t k, float target,
                               const std::function<float(int32_t, int32_t)>& recall) {
  for (int32_t l = 1; l < n_layer; ++l) {
    if (recall(l, k) >= target) return l;
  }
  return 0;
}

bool PruneHeadSet::present_in(const gguf::GgufFile& f) { return f.has(kPropdBaseHash); }

std::shared_ptr<PruneHeadSet> PruneHeadSet::from_gguf(std::shared_ptr<const gguf::GgufFile> file) {
  const auto& f = *file;
  const std::string& path = f.path();
  if (!present_in(f))
    throw FormatError(fmt::format("{}: holds no ProPD prune heads (metadata key '{}' missing)", path, kPropdBaseHash));
  auto s = std::make_shared<PruneHeadSet>();
  s->source = path;
  s->n_embd = propd_bounded(f, kPropdEmbd, 1, int64_t{1} << 20);
  s->n_vocab = propd_bounded(f, kPropdVocab, 1, int64_t{1} << 24);
  s->base_n_layer = propd_bounded(f, kPropdBaseLayers, 1, 4096);
  s->base_output_hash = f.get_string(kPropdBaseHash);
  PruneCalibration& c = s->calib;
  if (f.has(kPropdTopK)) {
    c.top_k = propd_bounded(f, kPropdTopK, 1, 1024);
    c.n_positions = f.get_int(kPropdPositions, 0);
    if (f.has(kPropdLensRecall)) {
      c.lens_recall = f.get_float_array(kPropdLensRecall);
      if (c.lens_recall.size() % static_cast<size_t>(c.top_k) != 0 ||
          c.lens_recall.size() / static_cast<size_t>(c.top_k) > static_cast<size_t>(s->base_n_layer)) {
        throw FormatError(fmt::format("{}: metadata key '{}' has {} values, expected at most {} layers x top-{}", path,
                                      kPropdLensRecall, c.lens_recall.size(), s->base_n_layer, c.top_k));
      }
    }
    if (f.has(kPropdHeadRecall)) c.head_recall = f.get_float_array(kPropdHeadRecall);
    for (float v : c.lens_recall) {
      if (!(v >= 0.0f && v <= 1.0f))
        throw FormatError(
            fmt::format("{}: metadata key '{}' holds {} (not a recall in [0, 1])", path, kPropdLensRecall, v));
    }
    for (float v : c.head_recall) {
      if (!(v >= 0.0f && v <= 1.0f))
        throw FormatError(
            fmt::format("{}: metadata key '{}' holds {} (not a recall in [0, 1])", path, kPropdHeadRecall, v));
    }
  }
  c.recall_target = static_cast<float>(f.get_float(kPropdTarget, 0.98));
  c.default_k = static_cast<int32_t>(f.get_int(kPropdDefaultK, 0));
  c.default_layer = static_cast<int32_t>(f.get_int(kPropdDefaultLayer, 0));
  if (c.default_layer < 0 || c.default_layer >= s->base_n_layer) {
    throw FormatError(fmt::format("{}: metadata key '{}' = {} is not an early layer (1..{})", path, kPropdDefaultLayer,
                                  c.default_layer, s->base_n_layer - 1));
  }
  if (c.default_k < 0 || c.default_k > std::max(c.top_k, 0)) {
    throw FormatError(fmt::format("{}: metadata key '{}' = {} exceeds the table width {}", path, kPropdDefaultK,
                                  c.default_k, c.top_k));
  }

  if (f.has(kPropdHeadLayers)) {
    const int32_t n_blocks = propd_bounded(f, kPropdHeadBlocks, 0, 64);
    const auto layers = f.get_int_array(kPropdHeadLayers);
    const std::string output = f.get_string(kPropdHeadOutput, "own");  // files before the key: own projections
    if (output != "own" && output != "base") {
      throw FormatError(
          fmt::format("{}: metadata key '{}' = '{}' (expected 'base': the model's output matrix, or 'own')", path,
                      kPropdHeadOutput, output));
    }
    const bool shared = output == "base";
    if (c.top_k > 0 && !c.head_recall.empty() && c.head_recall.size() != layers.size() * static_cast<size_t>(c.top_k)) {
      throw FormatError(fmt::format("{}: metadata key '{}' has {} values, expected {} layers x top-{}", path,
                                    kPropdHeadRecall, c.head_recall.size(), layers.size(), c.top_k));
    }
    const int64_t E = s->n_embd, V = s->n_vocab;
    auto tensor = [&](const std::string& name, std::vector<int64_t> ne) -> const gguf::TensorInfo& {
      const gguf::TensorInfo* t = f.find_tensor(name);
      if (!t)
        throw FormatError(fmt::format("{}: tensor '{}' is missing (prune heads declared at layers [{}])", path, name,
                                      fmt::join(layers, ", ")));
      if (t->ne != ne)
        throw FormatError(fmt::format("{}: tensor '{}' has shape [{}], expected [{}]", path, name,
                                      fmt::join(t->ne, ", "), fmt::join(ne, ", ")));
      if (!model::Linear::supports(t->type)) {
        throw Unsupported(fmt::format("{}: tensor '{}' has type {}, which treespec does not support", path, name,
                                      tensor::dtype_name(t->type)));
      }
      return *t;
    };
    for (int64_t l : layers) {
      if (l < 1 || l >= s->base_n_layer) {
        throw FormatError(fmt::format("{}: metadata key '{}' lists layer {}, not an early layer (1..{})", path,
                                      kPropdHeadLayers, l, s->base_n_layer - 1));
      }
      const auto layer = static_cast<int32_t>(l);
      if (s->heads.count(layer))
        throw FormatError(fmt::format("{}: metadata key '{}' lists layer {} twice", path, kPropdHeadLayers, l));
      std::shared_ptr<PruneHead> h(new PruneHead());
      h->layer_ = layer;
      h->lens_ = false;
      h->n_embd_ = s->n_embd;
      h->n_vocab_ = s->n_vocab;
      for (int32_t r = 0; r < n_blocks; ++r) {
        const auto& tw = tensor(prune_block_weight_name(layer, r), {E, E});
        const auto& tb = tensor(prune_block_bias_name(layer, r), {E});
        PruneHead::Block b;
        b.w = model::Linear::typed(tw.data, tw.type, E, E);
        b.b.resize(static_cast<size_t>(E));
        model::to_f32(tb.type, tb.data, b.b.data(), E);
        h->blocks_.push_back(std::move(b));
      }
      if (!shared) {
        const auto& to = tensor(prune_output_name(layer), {E, V});
        h->out_ = model::Linear::typed(to.data, to.type, E, V);
      }
      h->file_ = file;
      s->heads[layer] = std::move(h);
      c.head_layers.push_back(layer);
    }
  }
  s->file_ = std::move(file);
  return s;
}

void PruneHeadSet::check_fits(const model::Model& m) const {
  const auto& hp = m.hparams();
  std::vector<std::string> diffs;
  if (n_embd != hp.n_embd) diffs.push_back(fmt::format("embedding width {} (heads) vs {} (model)", n_embd, hp.n_embd));
  if (n_vocab != hp.n_vocab) diffs.push_back(fmt::format("vocab size {} (heads) vs {} (model)", n_vocab, hp.n_vocab));
  if (base_n_layer != hp.n_layer)
    diffs.push_back(fmt::format("layer count {} (heads' base) vs {} (model)", base_n_layer, hp.n_layer));
  if (diffs.empty()) {
    const std::string hash = output_matrix_hash(m);
    if (hash != base_output_hash)
      diffs.push_back(fmt::format("output matrix hash {} (heads' base) vs {} (model)", base_output_hash, hash));
  }
  if (!diffs.empty()) {
    throw InvalidArgument(fmt::format(
        "ProPD prune heads '{}' do not fit model '{}': {} (retrain: treespec train-heads -m {} --prune-layer ...)",
        source, m.gguf().path(), fmt::join(diffs, "; "), m.gguf().path()));
  }
}

void PruneHeadSet::add_to(gguf::GgufWriter& w) const {
  using gguf::Value;
  w.set(kPropdEmbd, Value::u32(static_cast<uint32_t>(n_embd)));
  w.set(kPropdVocab, Value::u32(static_cast<uint32_t>(n_vocab)));
  w.set(kPropdBaseLayers, Value::u32(static_cast<uint32_t>(base_n_layer)));
  w.set(kPropdBaseHash, Value::string(base_output_hash));
  if (calib.top_k > 0) {
    w.set(kPropdTopK, Value::u32(static_cast<uint32_t>(calib.top_k)));
    w.set(kPropdPositions, Value::u64(static_cast<uint64_t>(calib.n_positions)));
    if (!calib.lens_recall.empty()) w.set(kPropdLensRecall, Value::f32_array(calib.lens_recall));
    if (!calib.head_recall.empty()) w.set(kPropdHeadRecall, Value::f32_array(calib.head_recall));
  }
  w.set(kPropdTarget, Value::f32(calib.recall_target));
  w.set(kPropdDefaultK, Value::u32(static_cast<uint32_t>(calib.default_k)));
  w.set(kPropdDefaultLayer, Value::u32(static_cast<uint32_t>(calib.default_layer)));
  if (heads.empty()) return;
  // The recall table's row order (calib.head_layers) is the file's layer order.
  std::vector<int32_t> layers = calib.head_layers;
  if (layers.size() != heads.size()) {
    TREESPEC_ASSERT(calib.head_recall.empty(), "PruneHeadSet: recall rows without their heads");
    layers.clear();
    for (const auto& [l, h] : heads) layers.push_back(l);
  }
  int32_t n_blocks = -1;
  for (int32_t l : layers) {
    TREESPEC_ASSERT(heads.count(l) == 1, "PruneHeadSet: a recall row names a layer without a head");
    const auto& h = heads.at(l);
    TREESPEC_ASSERT(!h->is_lens(), "PruneHeadSet: only trained heads are stored");
    TREESPEC_ASSERT(n_blocks < 0 || n_blocks == h->n_blocks(), "PruneHeadSet: every head has the same block count");
    TREESPEC_ASSERT(l == layers.front() || h->shared_output() == heads.at(layers.front())->shared_output(),
                    "PruneHeadSet: every head shares the output matrix or none does");
    n_blocks = h->n_blocks();
  }
  w.set(kPropdHeadLayers, Value::i32_array(layers));
  w.set(kPropdHeadBlocks, Value::u32(static_cast<uint32_t>(n_blocks)));
  w.set(kPropdHeadOutput, Value::string(heads.at(layers.front())->shared_output() ? "base" : "own"));
  auto add = [&](const std::string& name, const model::Linear& v) {
    w.add_tensor(name, v.type(), {v.n_in(), v.n_out()}, v.data(), static_cast<size_t>(v.bytes()));
  };
  for (int32_t l : layers) {
    const auto& h = heads.at(l);
    for (int32_t r = 0; r < h->n_blocks(); ++r) {
      add(prune_block_weight_name(l, r), h->block(r).w);
      const auto& b = h->block(r).b;
      w.add_tensor(prune_block_bias_name(l, r), tensor::DType::f32, {static_cast<int64_t>(b.size())}, b.data(),
                   b.size() * sizeof(float));
    }
    if (!h->shared_output()) add(prune_output_name(l), h->out());
  }
}

}  // namespace treespec::drafters
