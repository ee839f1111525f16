#include "drafters/draft_model/draft_lm.h"

#include <algorithm>
#include <numeric>

#include "core/assert.h"

namespace treespec::drafters {

namespace {
constexpr int32_t kInitialCells = 256;
}  // namespace

DraftLm::DraftLm(std::shared_ptr<const model::Model> keep_alive, const model::Model& m, std::vector<int32_t> layers,
                 core::ThreadPool* pool)
    : keep_alive_(std::move(keep_alive)),
      model_(m),
      layers_(std::move(layers)),
      ctx_(m, core::pool_or_own(pool, own_pool_)) {
  TREESPEC_ASSERT(!layers_.empty(), "DraftLm: empty layer list");
  kv::KvShape shape = m.kv_shape(1, kInitialCells);
  shape.n_layer = static_cast<int32_t>(layers_.size());
  kv_ = std::make_unique<kv::KvCache>(shape);
}

void DraftLm::reserve_cells(int32_t n) {
  const int32_t old_cells = kv_->n_cells();
  if (n <= old_cells) return;
  kv_->grow(std::max(n, 2 * old_cells));
}

void DraftLm::forward(const model::Batch& batch, std::span<const int32_t> out_rows, float* logits) {
  const int32_t n = batch.n_rows();
  if (n == 0) return;
  const auto& hp = model_.hparams();
  ctx_.reserve(n, kv_->n_cells());
  float* x = ctx_.x();  // [n, n_embd]
  model_.embed(batch, x);
  const Status st = model_.run_layer_list(ctx_, batch, layers_, x, *kv_);
  TREESPEC_ASSERT(st.ok(), "draft rows must fit (cells reserved by the caller)");
  if (out_rows.empty()) return;
  normed_.reserve(out_rows.size() * static_cast<size_t>(hp.n_embd), "draft normed hidden states");
  model_.final_norm(x, n, out_rows, normed_.data());
  model_.lm_head(ctx_, normed_.data(), static_cast<int32_t>(out_rows.size()), logits);
}

void DraftLm::commit(std::span<const int32_t> path) {
  const Status st = kv_->commit(0, path);
  TREESPEC_ASSERT(st.ok(), "draft KV commit must fit (cells reserved)");
}

void DraftLm::commit_chain(int32_t n) {
  if (n <= 0) return;
  if (static_cast<int32_t>(iota_.size()) < n) {
    iota_.resize(static_cast<size_t>(n));
    std::iota(iota_.begin(), iota_.end(), 0);
  }
  commit(std::span<const int32_t>(iota_).first(static_cast<size_t>(n)));
}

}  // namespace treespec::drafters
