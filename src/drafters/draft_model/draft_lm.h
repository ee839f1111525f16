// DraftLm: one sequence's draft language model. A Model (a second GGUF, or the target
// itself) restricted to a layer list (all layers, or a subset: self-drafting shares the
// target's weights, nothing is copied), followed by that model's final norm and output.
// It owns a one-slot KV cache whose layer k belongs to model layer layers[k], grown on
// demand (a draft never reserves a whole context it may not use), and a ForwardContext on
// the engine's thread pool (the drafter runs between the engine's passes, never during).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/batch.h"
#include "model/model.h"

namespace treespec::drafters {

class DraftLm {
 public:
  // `keep_alive` holds a separately loaded draft model (may be null when `m` is the
  // target); `layers` strictly increasing in [0, n_layer); pool: borrowed (null = own
  // one-thread pool).
  DraftLm(std::shared_ptr<const model::Model> keep_alive, const model::Model& m, std::vector<int32_t> layers,
          core::ThreadPool* pool);

  const model::Model& model() const { return model_; }
  std::span<const int32_t> layers() const { return layers_; }
  int32_t n_vocab() const { return model_.hparams().n_vocab; }
  int32_t n_past() const { return kv_->n_past(0); }
  int32_t n_cells() const { return kv_->n_cells(); }
  size_t kv_bytes() const { return kv_->bytes(); }
  const kv::KvCache& kv() const { return *kv_; }

  // Makes room for cells [0, n): grows the cache (at least doubling), keeping every cell
  // (committed and scratch) and the committed length.
  void reserve_cells(int32_t n);

  // Runs the rows of `batch` (one segment, sequence 0, built for n_past()) and writes the
  // logits of rows `out_rows` to logits [out_rows.size(), n_vocab]. The caller reserved
  // the cells the rows write.
  void forward(const model::Batch& batch, std::span<const int32_t> out_rows, float* logits);

  // Accepts scratch cells n_past + path[k] as committed cells n_past + k (KvCache::commit).
  void commit(std::span<const int32_t> path);
  // Appends n causal rows written at n_past .. n_past + n - 1 to the committed prefix.
  void commit_chain(int32_t n);
  void truncate(int32_t n) { kv_->truncate(0, n); }

 private:
  std::shared_ptr<const model::Model> keep_alive_;
  const model::Model& model_;
  std::vector<int32_t> layers_;  // [n_draft_layers]
  std::unique_ptr<core::ThreadPool> own_pool_;
  model::ForwardContext ctx_;
  std::unique_ptr<kv::KvCache> kv_;
  core::AlignedBuffer<float> normed_;  // [rows, n_embd]
  std::vector<int32_t> iota_;          // 0, 1, 2, ... for identity commits
};

}  // namespace treespec::drafters
