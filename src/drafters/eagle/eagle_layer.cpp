#include "drafters/eagle/eagle_layer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <map>
#include <mutex>

#include "drafters/medusa/medusa_heads.h"  // output_matrix_hash
#include "model/model.h"
#include "treespec/status.h"

namespace treespec::drafters {

namespace {
int32_t bounded(const gguf::GgufFile& f, const char* key, int64_t lo, int64_t hi) {
  if (!f.has(key)) throw FormatError(fmt::format("{}: metadata key '{}' is missing", f.path(), key));
  const int64_t v = f.get_int(key);
  if (v < lo || v > hi)
    throw FormatError(fmt::format("{}: metadata key '{}' = {} is out of range ({}..{})", f.path(), key, v, lo, hi));
  return static_cast<int32_t>(v);
}
}  // namespace

EagleLayer::~EagleLayer() = default;

bool EagleLayer::present_in(const gguf::GgufFile& file) {
  return file.get_string("general.architecture", "") == model::kLayerStackArch;
}

std::shared_ptr<EagleLayer> EagleLayer::load(const std::string& path) {
  return from_gguf(std::shared_ptr<const gguf::GgufFile>(gguf::GgufFile::open(path)));
}

std::shared_ptr<EagleLayer> EagleLayer::from_gguf(std::shared_ptr<const gguf::GgufFile> file) {
  const gguf::GgufFile& f = *file;
  const std::string& path = f.path();
  if (!present_in(f)) {
    throw InvalidArgument(fmt::format(
        "{}: not an EAGLE draft layer (general.architecture is '{}', expected '{}'); train one with 'treespec "
        "train-eagle'",
        path, f.get_string("general.architecture", ""), model::kLayerStackArch));
  }
  std::shared_ptr<EagleLayer> e(new EagleLayer());
  e->model_ = model::Model::layer_stack_from_gguf(file);
  const auto& hp = e->model_->hparams();
  if (hp.n_layer != 1 || hp.has_qkv_bias || hp.qk_norm || hp.post_norms || hp.act != model::FfnAct::silu) {
    throw Unsupported(fmt::format("{}: an EAGLE layer is one plain Llama decoder layer (this file has {} layers{})",
                                  path, hp.n_layer, hp.has_qkv_bias ? ", Q/K/V biases" : ""));
  }
  EagleInfo& in = e->info_;
  in.n_embd = hp.n_embd;
  in.n_vocab = hp.n_vocab;
  in.base_name = f.get_string(kEagleKeyBaseName, "");
  in.base_arch = f.get_string(kEagleKeyBaseArch, "");
  in.base_n_layer = bounded(f, kEagleKeyBaseLayers, 1, 4096);
  if (!f.has(kEagleKeyBaseHash))
    throw FormatError(fmt::format("{}: metadata key '{}' is missing", path, kEagleKeyBaseHash));
  in.base_output_hash = f.get_string(kEagleKeyBaseHash);
  if (f.has(kEagleKeyCalib)) {
    in.calib_top1 = f.get_float_array(kEagleKeyCalib);
    for (size_t i = 0; i < in.calib_top1.size(); ++i) {
      if (!(in.calib_top1[i] >= 0.0f && in.calib_top1[i] <= 1.0f))
        throw FormatError(fmt::format("{}: metadata key '{}' item {} = {} is not an accuracy in [0, 1]", path,
                                      kEagleKeyCalib, i, in.calib_top1[i]));
    }
    in.calib_tokens = f.get_int(kEagleKeyCalibTokens, 0);
  }
  for (const auto& [key, value] : f.metadata()) {
    if (key.rfind(kEagleTrainPrefix, 0) == 0) in.train_meta.emplace_back(key, value);
  }
  e->source_ = path;
  return e;
}

void EagleLayer::check_fits(const model::Model& target, const std::string& target_path) const {
  const auto& hp = target.hparams();
  std::vector<std::string> diffs;
  if (info_.n_embd != hp.n_embd)
    diffs.push_back(fmt::format("embedding width {} (layer) vs {} (model)", info_.n_embd, hp.n_embd));
  if (info_.n_vocab != hp.n_vocab)
    diffs.push_back(fmt::format("vocab size {} (layer) vs {} (model)", info_.n_vocab, hp.n_vocab));
  if (info_.base_n_layer != hp.n_layer)
    diffs.push_back(fmt::format("layer count {} (layer's base) vs {} (model)", info_.base_n_layer, hp.n_layer));
  if (diffs.empty()) {
    const std::string hash = output_matrix_hash(target);
    if (hash != info_.base_output_hash)
      diffs.push_back(fmt::format("output matrix hash {} (layer's base) vs {} (model)", info_.base_output_hash, hash));
  }
  if (!diffs.empty()) {
    const std::string mp = target_path.empty() ? target.gguf().path() : target_path;
    throw InvalidArgument(fmt::format(
        "EAGLE layer '{}' does not fit model '{}': {}; it was trained for '{}' (retrain: treespec train-eagle -m {})",
        source_, mp, fmt::join(diffs, "; "), info_.base_name, mp));
  }
}

void EagleLayer::add_info(gguf::GgufWriter& w, const EagleInfo& info) {
  using gguf::Value;
  w.set(kEagleKeyVocab, Value::u32(static_cast<uint32_t>(info.n_vocab)));
  w.set(kEagleKeyBaseName, Value::string(info.base_name));
  w.set(kEagleKeyBaseArch, Value::string(info.base_arch));
  w.set(kEagleKeyBaseLayers, Value::u32(static_cast<uint32_t>(info.base_n_layer)));
  w.set(kEagleKeyBaseHash, Value::string(info.base_output_hash));
  if (!info.calib_top1.empty()) {
    w.set(kEagleKeyCalib, Value::f32_array(info.calib_top1));
    w.set(kEagleKeyCalibTokens, Value::u64(static_cast<uint64_t>(info.calib_tokens)));
  }
  for (const auto& [key, value] : info.train_meta) w.set(key, value);
}

std::shared_ptr<const EagleLayer> load_eagle_layer(const std::string& path, const model::Model& target) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<const EagleLayer>> cache;
  std::string key = fmt::format("{}|{}|{}", path, target.gguf().path(), static_cast<const void*>(&target));
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec) {
    const auto mtime = std::filesystem::last_write_time(path, ec);
    if (!ec) key += fmt::format("|{}|{}", size, mtime.time_since_epoch().count());
  }
  std::lock_guard<std::mutex> lock(mu);
  if (auto e = cache[key].lock()) return e;
  std::shared_ptr<EagleLayer> e = EagleLayer::load(path);
  e->check_fits(target);
  cache[key] = e;
  return e;
}

}  // namespace treespec::drafters
