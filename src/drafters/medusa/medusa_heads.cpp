#include "drafters/medusa/medusa_heads.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "core/assert.h"
#include "model/model.h"
#include "treespec/status.h"

namespace treespec::drafters {

namespace {

// Bounds on what a heads file may ask for.
constexpr int64_t kMaxHeads = 64;
constexpr int64_t kMaxBlocks = 64;
constexpr int64_t kMaxCalibTopK = 1024;

const char* kKeyHeads = "medusa.head_count";
const char* kKeyBlocks = "medusa.block_count";
const char* kKeyEmbd = "medusa.embedding_length";
const char* kKeyVocab = "medusa.vocab_size";
const char* kKeyLayer = "medusa.hidden_layer";
const char* kKeySource = "medusa.hidden_source";
const char* kKeyOutput = "medusa.output";  // "base" (shared output matrix) or "own"
const char* kKeyDraftVocab = "medusa.draft_vocab";
const char* kKeyBaseName = "medusa.base.name";
const char* kKeyBaseLayers = "medusa.base.block_count";
const char* kKeyBaseHash = "medusa.base.output_hash";
const char* kKeyCalTopK = "medusa.calibration.top_k";
const char* kKeyCalAcc = "medusa.calibration.accuracy";
const char* kKeyCalLoss = "medusa.calibration.loss";
const char* kKeyCalTokens = "medusa.calibration.tokens";
const char* kTrainPrefix = "medusa.train.";

uint64_t fnv1a64_words(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  constexpr uint64_t prime = 0x100000001b3ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * prime;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * prime;
  return h;
}

int32_t bounded(const gguf::GgufFile& f, const char* key, int64_t lo, int64_t hi) {
  const int64_t v = f.get_int(key);
  if (v < lo || v > hi)
    throw FormatError(fmt::format("{}: metadata key '{}' = {} is out of range ({}..{})", f.path(), key, v, lo, hi));
  return static_cast<int32_t>(v);
}

}  // namespace

std::string medusa_block_weight_name(int32_t head, int32_t block) {
  return fmt::format("medusa.{}.blk.{}.weight", head, block);
}
std::string medusa_block_bias_name(int32_t head, int32_t block) {
  return fmt::format("medusa.{}.blk.{}.bias", head, block);
}
std::string medusa_output_name(int32_t head) { return fmt::format("medusa.{}.output.weight", head); }

std::string output_matrix_hash(const model::Model& m) {
  const model::Linear w = m.output();
  const auto n = static_cast<size_t>(w.bytes());
  return fmt::format("fnv1a64:{:016x}", fnv1a64_words(static_cast<const uint8_t*>(w.data()), n));
}

std::shared_ptr<MedusaHeads> MedusaHeads::init_from_model(const model::Model& m, int32_t n_heads, int32_t n_blocks,
                                                          bool shared_output) {
  const auto& hp = m.hparams();
  if (n_heads < 1 || n_heads > kMaxHeads)
    throw InvalidArgument(fmt::format("number of Medusa heads must be in 1..{}, got {}", kMaxHeads, n_heads));
  if (n_blocks < 0 || n_blocks > kMaxBlocks)
    throw InvalidArgument(fmt::format("residual blocks per head must be in 0..{}, got {}", kMaxBlocks, n_blocks));
  MedusaHeadsInfo info;
  info.n_heads = n_heads;
  info.n_blocks = n_blocks;
  info.n_embd = hp.n_embd;
  info.n_vocab = hp.n_vocab;
  info.hidden_layer = hp.n_layer;
  info.base_name = hp.name;
  info.base_n_layer = hp.n_layer;
  info.base_output_hash = output_matrix_hash(m);
  info.shared_output = shared_output;
  const size_t E = static_cast<size_t>(hp.n_embd), V = static_cast<size_t>(hp.n_vocab);
  std::vector<std::vector<std::vector<float>>> bw(static_cast<size_t>(n_heads)), bb(static_cast<size_t>(n_heads));
  std::vector<std::vector<float>> out;
  if (!shared_output) {
    std::vector<float> base_out(V * E);
    m.output().dequantize(base_out.data());
    out.assign(static_cast<size_t>(n_heads), base_out);
  }
  for (int32_t k = 0; k < n_heads; ++k) {
    bw[static_cast<size_t>(k)].assign(static_cast<size_t>(n_blocks), std::vector<float>(E * E, 0.0f));
    bb[static_cast<size_t>(k)].assign(static_cast<size_t>(n_blocks), std::vector<float>(E, 0.0f));
  }
  auto h = from_f32(std::move(info), std::move(bw), std::move(bb), std::move(out));
  if (shared_output) h->bind(m);
  return h;
}

std::shared_ptr<MedusaHeads> MedusaHeads::from_f32(MedusaHeadsInfo info,
                                                   std::vector<std::vector<std::vector<float>>> block_w,
                                                   std::vector<std::vector<std::vector<float>>> block_b,
                                                   std::vector<std::vector<float>> out_w) {
  std::shared_ptr<MedusaHeads> h(new MedusaHeads());
  const int64_t E = info.n_embd, V = info.n_vocab;
  TREESPEC_ASSERT(block_w.size() == static_cast<size_t>(info.n_heads) && block_b.size() == block_w.size() &&
                      out_w.size() == (info.shared_output ? 0 : block_w.size()),
                  "MedusaHeads::from_f32: one entry per head (no vocab projection when shared)");
  h->source_ = "<trained>";
  h->heads_.resize(static_cast<size_t>(info.n_heads));
  for (int32_t k = 0; k < info.n_heads; ++k) {
    auto& bw = block_w[static_cast<size_t>(k)];
    auto& bb = block_b[static_cast<size_t>(k)];
    TREESPEC_ASSERT(bw.size() == static_cast<size_t>(info.n_blocks) && bb.size() == bw.size(),
                    "from_f32: blocks per head");
    Head& hd = h->heads_[static_cast<size_t>(k)];
    for (int32_t r = 0; r < info.n_blocks; ++r) {
      TREESPEC_ASSERT(bw[static_cast<size_t>(r)].size() == static_cast<size_t>(E * E) &&
                          bb[static_cast<size_t>(r)].size() == static_cast<size_t>(E),
                      "from_f32: block shapes");
      h->owned_.push_back(std::move(bw[static_cast<size_t>(r)]));
      hd.blocks.push_back(
          Block{model::Linear::f32(h->owned_.back().data(), E, E), std::move(bb[static_cast<size_t>(r)])});
    }
    if (info.shared_output) continue;
    TREESPEC_ASSERT(out_w[static_cast<size_t>(k)].size() == static_cast<size_t>(V * E), "from_f32: output shape");
    h->owned_.push_back(std::move(out_w[static_cast<size_t>(k)]));
    hd.out = model::Linear::f32(h->owned_.back().data(), E, V);
  }
  // owned_ may have reallocated its outer vector while we pushed: re-point the views.
  size_t o = 0;
  for (auto& hd : h->heads_) {
    for (auto& b : hd.blocks) b.w = model::Linear::f32(h->owned_[o++].data(), E, E);
    if (!info.shared_output) hd.out = model::Linear::f32(h->owned_[o++].data(), E, V);
  }
  h->info_ = std::move(info);
  return h;
}

bool MedusaHeads::present_in(const gguf::GgufFile& file) { return file.has(kKeyHeads); }

std::shared_ptr<MedusaHeads> MedusaHeads::load(const std::string& path) {
  return from_gguf(std::shared_ptr<const gguf::GgufFile>(gguf::GgufFile::open(path)));
}

std::shared_ptr<MedusaHeads> MedusaHeads::from_gguf(std::shared_ptr<const gguf::GgufFile> file) {
  const auto& f = *file;
  const std::string& path = f.path();
  if (!present_in(f)) {
    throw FormatError(
        fmt::format("{}: holds no Medusa heads (metadata key '{}' missing); train some with 'treespec train-heads'",
                    path, kKeyHeads));
  }
  std::shared_ptr<MedusaHeads> h(new MedusaHeads());
  MedusaHeadsInfo& in = h->info_;
  in.n_heads = bounded(f, kKeyHeads, 1, kMaxHeads);
  in.n_blocks = bounded(f, kKeyBlocks, 0, kMaxBlocks);
  in.n_embd = bounded(f, kKeyEmbd, 1, int64_t{1} << 20);
  in.n_vocab = bounded(f, kKeyVocab, 1, int64_t{1} << 24);
  in.hidden_layer = bounded(f, kKeyLayer, 0, 4096);
  const std::string src = f.get_string(kKeySource, "final_norm");
  if (src != "final_norm") {
    throw Unsupported(
        fmt::format("{}: heads read hidden state '{}'; treespec's Medusa heads read only 'final_norm'", path, src));
  }
  const std::string output = f.get_string(kKeyOutput, "own");  // files before the key: own projections
  if (output != "own" && output != "base") {
    throw FormatError(fmt::format("{}: metadata key '{}' = '{}' (expected 'base': the model's output matrix, or 'own')",
                                  path, kKeyOutput, output));
  }
  in.shared_output = output == "base";
  if (f.has(kKeyDraftVocab)) {
    const auto ids = f.get_int_array(kKeyDraftVocab);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= in.n_vocab || (i > 0 && ids[i] <= ids[i - 1])) {
        throw FormatError(fmt::format("{}: metadata key '{}' item {} = {} is not an ascending token id below {}", path,
                                      kKeyDraftVocab, i, ids[i], in.n_vocab));
      }
      in.draft_vocab.push_back(static_cast<int32_t>(ids[i]));
    }
    if (!in.shared_output && !in.draft_vocab.empty()) {
      throw FormatError(fmt::format("{}: metadata key '{}' needs heads that share the model's output ('{}' = 'base')",
                                    path, kKeyDraftVocab, kKeyOutput));
    }
  }
  in.base_name = f.get_string(kKeyBaseName, "");
  in.base_n_layer = bounded(f, kKeyBaseLayers, 1, 4096);
  in.base_output_hash = f.get_string(kKeyBaseHash);
  if (f.has(kKeyCalTopK)) {
    in.calib_top_k = bounded(f, kKeyCalTopK, 1, kMaxCalibTopK);
    in.calibration = f.get_float_array(kKeyCalAcc);
    if (in.calibration.size() != static_cast<size_t>(in.n_heads) * static_cast<size_t>(in.calib_top_k)) {
      throw FormatError(fmt::format("{}: metadata key '{}' has {} values, expected {} heads x top-{}", path, kKeyCalAcc,
                                    in.calibration.size(), in.n_heads, in.calib_top_k));
    }
    for (size_t i = 0; i < in.calibration.size(); ++i) {
      const float c = in.calibration[i];
      const bool monotone = i % static_cast<size_t>(in.calib_top_k) == 0 || c >= in.calibration[i - 1];
      if (!(c >= 0.0f && c <= 1.0f) || !monotone) {
        throw FormatError(fmt::format("{}: metadata key '{}' item {} = {} is not a cumulative accuracy in [0, 1]", path,
                                      kKeyCalAcc, i, c));
      }
    }
    if (f.has(kKeyCalLoss)) in.calib_loss = f.get_float_array(kKeyCalLoss);
    in.calib_tokens = f.get_int(kKeyCalTokens, 0);
  }
  for (const auto& [key, value] : f.metadata()) {
    if (key.rfind(kTrainPrefix, 0) == 0) in.train_meta.emplace_back(key, value);
  }

  auto tensor = [&](const std::string& name, std::vector<int64_t> ne) -> const gguf::TensorInfo& {
    const gguf::TensorInfo* t = f.find_tensor(name);
    if (!t)
      throw FormatError(fmt::format("{}: tensor '{}' is missing ({} heads x {} blocks declared)", path, name,
                                    in.n_heads, in.n_blocks));
    if (t->ne != ne) {
      throw FormatError(fmt::format("{}: tensor '{}' has shape [{}], expected [{}]", path, name, fmt::join(t->ne, ", "),
                                    fmt::join(ne, ", ")));
    }
    if (!model::Linear::supports(t->type)) {
      throw Unsupported(fmt::format("{}: tensor '{}' has type {}, which treespec does not support", path, name,
                                    tensor::dtype_name(t->type)));
    }
    return *t;
  };
  const int64_t E = in.n_embd, V = in.n_vocab;
  h->heads_.resize(static_cast<size_t>(in.n_heads));
  for (int32_t k = 0; k < in.n_heads; ++k) {
    Head& hd = h->heads_[static_cast<size_t>(k)];
    for (int32_t r = 0; r < in.n_blocks; ++r) {
      const auto& tw = tensor(medusa_block_weight_name(k, r), {E, E});
      const auto& tb = tensor(medusa_block_bias_name(k, r), {E});
      Block b;
      b.w = model::Linear::typed(tw.data, tw.type, E, E);
      b.b.resize(static_cast<size_t>(E));
      model::to_f32(tb.type, tb.data, b.b.data(), E);
      hd.blocks.push_back(std::move(b));
    }
    if (in.shared_output) continue;
    const auto& to = tensor(medusa_output_name(k), {E, V});
    hd.out = model::Linear::typed(to.data, to.type, E, V);
  }
  h->source_ = path;
  h->file_ = std::move(file);
  return h;
}

void MedusaHeads::check_fits(const model::Model& m, const std::string& model_path) const {
  const auto& hp = m.hparams();
  std::vector<std::string> diffs;
  if (info_.n_embd != hp.n_embd)
    diffs.push_back(fmt::format("embedding width {} (heads) vs {} (model)", info_.n_embd, hp.n_embd));
  if (info_.n_vocab != hp.n_vocab)
    diffs.push_back(fmt::format("vocab size {} (heads) vs {} (model)", info_.n_vocab, hp.n_vocab));
  if (info_.base_n_layer != hp.n_layer)
    diffs.push_back(fmt::format("layer count {} (heads' base) vs {} (model)", info_.base_n_layer, hp.n_layer));
  if (info_.hidden_layer != hp.n_layer) {
    diffs.push_back(fmt::format("heads read layer {} but the model's final normed state is after layer {}",
                                info_.hidden_layer, hp.n_layer));
  }
  if (diffs.empty()) {
    const std::string hash = output_matrix_hash(m);
    if (hash != info_.base_output_hash)
      diffs.push_back(fmt::format("output matrix hash {} (heads' base) vs {} (model)", info_.base_output_hash, hash));
  }
  if (!diffs.empty()) {
    const std::string mp = model_path.empty() ? m.gguf().path() : model_path;
    throw InvalidArgument(fmt::format(
        "Medusa heads '{}' do not fit model '{}': {}; they were trained for '{}' (retrain: treespec train-heads -m {})",
        source_, mp, fmt::join(diffs, "; "), info_.base_name, mp));
  }
}

void MedusaHeads::bind(const model::Model& m, const std::string& model_path) {
  check_fits(m, model_path);
  if (info_.shared_output) bind_output(m.output());
}

void MedusaHeads::bind_output(const model::Linear& out) {
  TREESPEC_ASSERT(out.n_in() == info_.n_embd && out.n_out() == info_.n_vocab, "MedusaHeads: output matrix shape");
  base_out_ = out;
  if (!info_.draft_vocab.empty()) draft_out_ = model::RowSubset(out, info_.draft_vocab);
}

const model::Linear& MedusaHeads::output(int32_t k) const {
  TREESPEC_ASSERT(k >= 0 && k < n_heads(), "MedusaHeads: head index out of range");
  if (!info_.shared_output) return heads_[static_cast<size_t>(k)].out;
  TREESPEC_ASSERT(base_out_.data() != nullptr, "MedusaHeads: heads sharing the base output used before bind(model)");
  return base_out_;
}

namespace {
// x [M, E] <- the head's residual blocks applied to x; z [M, E] scratch.
void run_blocks(const std::vector<MedusaHeads::Block>& blocks, float* x, float* z, int64_t M, int64_t E,
                core::ThreadPool* pool) {
  for (const MedusaHeads::Block& b : blocks) {
    b.w.apply(x, M, z, pool);
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t i = 0; i < E; ++i) x[m * E + i] += block_silu(z[m * E + i] + b.b[static_cast<size_t>(i)]);
    }
  }
}
}  // namespace

void MedusaHeads::forward(int32_t k, const float* h, int64_t M, float* work, float* logits,
                          core::ThreadPool* pool) const {
  const model::Linear& out = output(k);
  const int64_t E = info_.n_embd;
  float* x = work;  // [M, E]
  std::memcpy(x, h, static_cast<size_t>(M * E) * sizeof(float));
  run_blocks(heads_[static_cast<size_t>(k)].blocks, x, work + M * E, M, E, pool);
  out.apply(x, M, logits, pool);
}

void MedusaHeads::forward_all(const float* h, float* work, float* logits, core::ThreadPool* pool) const {
  const int64_t E = info_.n_embd, V = info_.n_vocab, K = info_.n_heads;
  float* z = work + K * E;  // [E]
  for (int64_t k = 0; k < K; ++k) {
    float* x = work + k * E;
    std::memcpy(x, h, static_cast<size_t>(E) * sizeof(float));
    run_blocks(heads_[static_cast<size_t>(k)].blocks, x, z, 1, E, pool);
    if (!info_.shared_output) output(static_cast<int32_t>(k)).apply(x, 1, logits + k * V, pool);
  }
  if (info_.shared_output) (draft_out_.empty() ? output(0) : draft_out_.linear()).apply(work, K, logits, pool);
}

void MedusaHeads::add_to(gguf::GgufWriter& w) const {
  using gguf::Value;
  w.set(kKeyHeads, Value::u32(static_cast<uint32_t>(info_.n_heads)));
  w.set(kKeyBlocks, Value::u32(static_cast<uint32_t>(info_.n_blocks)));
  w.set(kKeyEmbd, Value::u32(static_cast<uint32_t>(info_.n_embd)));
  w.set(kKeyVocab, Value::u32(static_cast<uint32_t>(info_.n_vocab)));
  w.set(kKeyLayer, Value::u32(static_cast<uint32_t>(info_.hidden_layer)));
  w.set(kKeySource, Value::string("final_norm"));
  w.set(kKeyOutput, Value::string(info_.shared_output ? "base" : "own"));
  if (!info_.draft_vocab.empty()) w.set(kKeyDraftVocab, Value::i32_array(info_.draft_vocab));
  w.set(kKeyBaseName, Value::string(info_.base_name));
  w.set(kKeyBaseLayers, Value::u32(static_cast<uint32_t>(info_.base_n_layer)));
  w.set(kKeyBaseHash, Value::string(info_.base_output_hash));
  if (info_.has_calibration()) {
    w.set(kKeyCalTopK, Value::u32(static_cast<uint32_t>(info_.calib_top_k)));
    w.set(kKeyCalAcc, Value::f32_array(info_.calibration));
    if (!info_.calib_loss.empty()) w.set(kKeyCalLoss, Value::f32_array(info_.calib_loss));
    w.set(kKeyCalTokens, Value::u64(static_cast<uint64_t>(info_.calib_tokens)));
  }
  for (const auto& [key, value] : info_.train_meta) {
    TREESPEC_ASSERT(key.rfind(kTrainPrefix, 0) == 0, "train metadata keys start with medusa.train.");
    w.set(key, value);
  }
  auto add = [&](const std::string& name, const model::Linear& v) {
    w.add_tensor(name, v.type(), {v.n_in(), v.n_out()}, v.data(), static_cast<size_t>(v.bytes()));
  };
  for (int32_t k = 0; k < info_.n_heads; ++k) {
    const Head& hd = heads_[static_cast<size_t>(k)];
    for (int32_t r = 0; r < info_.n_blocks; ++r) {
      const Block& b = hd.blocks[static_cast<size_t>(r)];
      add(medusa_block_weight_name(k, r), b.w);
      w.add_tensor(medusa_block_bias_name(k, r), tensor::DType::f32, {info_.n_embd}, b.b.data(),
                   b.b.size() * sizeof(float));
    }
    if (!info_.shared_output) add(medusa_output_name(k), hd.out);
  }
}

void MedusaHeads::write(const std::string& path) const {
  gguf::GgufWriter w;
  w.set("general.architecture", gguf::Value::string("medusa"));
  w.set("general.name",
        gguf::Value::string(info_.base_name.empty() ? "medusa heads" : info_.base_name + " medusa heads"));
  add_to(w);
  w.write(path);
}

void write_model_with_heads(const model::Model& m, const MedusaHeads& heads, const std::string& path) {
  const auto& f = m.gguf();
  gguf::GgufWriter w(f.version() >= 2 ? f.version() : 3);
  w.set_alignment(f.alignment());
  for (const auto& [key, value] : f.metadata()) {
    if (key == "general.alignment" || key.rfind("medusa.", 0) == 0) continue;  // replaced below
    w.set(key, value);
  }
  for (const auto& t : f.tensors()) {
    if (t.name.rfind("medusa.", 0) == 0) continue;
    w.add_tensor(t.name, t.type, t.ne, t.data, static_cast<size_t>(t.nbytes));
  }
  heads.add_to(w);
  w.write(path);
}

}  // namespace treespec::drafters
