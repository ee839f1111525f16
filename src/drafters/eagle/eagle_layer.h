// EagleLayer: an EAGLE draft layer file (arXiv 2401.15077) bound for a target model.
//
// The file is GGUF with general.architecture = "eagle" (model::kLayerStackArch): one
// plain Llama decoder layer (blk.0.*, hyperparameters under eagle.*, the layout of the
// llama family, eagle.base_architecture = "llama"), its output norm (output_norm.weight),
// the input projection fc.weight [2 n_embd -> n_embd] and the embedding norm
// enorm.weight [n_embd]. It has no embedding and no output matrix: it reads the target's
// embedding rows and turns its predicted features into logits with the target's own
// output matrix. The target's identity (embedding width, vocabulary, layer count, a hash
// of its output matrix) is recorded, so a file trained for another model is refused. Keys
// and the training recipe: docs/eagle.md.
//
// A draft row t takes (f_t, x_{t+1}): the target's final-normed hidden state at position t
// and the embedding of the token after it, and predicts f_{t+1}: y = out_norm(layer(fc ·
// [enorm(emb(x_{t+1})); f_t])). The layer's KV cache holds one cell per row.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"

namespace treespec::model {
class Model;
}

namespace treespec::drafters {

// Metadata keys (docs/eagle.md).
inline constexpr const char* kEagleKeyVocab = "eagle.vocab_size";
inline constexpr const char* kEagleKeyBaseName = "eagle.base.name";
inline constexpr const char* kEagleKeyBaseArch = "eagle.base.architecture";
inline constexpr const char* kEagleKeyBaseLayers = "eagle.base.block_count";
inline constexpr const char* kEagleKeyBaseHash = "eagle.base.output_hash";
inline constexpr const char* kEagleKeyCalib = "eagle.calibration.top1";          // f32 per draft depth
inline constexpr const char* kEagleKeyCalibTokens = "eagle.calibration.tokens";  // held-out rows
inline constexpr const char* kEagleTrainPrefix = "eagle.train.";

struct EagleInfo {
  int32_t n_embd = 0;
  int32_t n_vocab = 0;
  std::string base_name;  // informational
  std::string base_arch;  // informational: the target's general.architecture
  int32_t base_n_layer = 0;
  std::string base_output_hash;  // output_matrix_hash() of the target
  // Held-out top-1 agreement with the target at draft depth 1, 2, ... (depth 1 from the
  // target's own features, deeper ones from the layer's own predictions).
  std::vector<float> calib_top1;
  int64_t calib_tokens = 0;
  std::vector<std::pair<std::string, gguf::Value>> train_meta;  // eagle.train.*
};

class EagleLayer {
 public:
  // FormatError / Unsupported naming the file and key or tensor.
  static std::shared_ptr<EagleLayer> load(const std::string& path);
  static std::shared_ptr<EagleLayer> from_gguf(std::shared_ptr<const gguf::GgufFile> file);
  // True if the GGUF is an EAGLE draft layer file.
  static bool present_in(const gguf::GgufFile& file);
  ~EagleLayer();

  const EagleInfo& info() const { return info_; }
  // The layer stack (model::Hparams::layers_only): run_layers, final_norm, stack_input.
  const model::Model& model() const { return *model_; }
  const std::string& source() const { return source_; }

  // InvalidArgument naming every field that differs between the file and `target`.
  void check_fits(const model::Model& target, const std::string& target_path = "") const;

  // Metadata (the layer's own eagle.* hyperparameters are written by the caller).
  static void add_info(gguf::GgufWriter& w, const EagleInfo& info);

 private:
  EagleLayer() = default;
  EagleInfo info_;
  std::unique_ptr<model::Model> model_;
  std::string source_;
};

// The file of `path` bound for `target`, cached by (file, size, mtime, target): one
// drafter per sequence shares it. InvalidArgument when it does not fit the target.
std::shared_ptr<const EagleLayer> load_eagle_layer(const std::string& path, const model::Model& target);

}  // namespace treespec::drafters
