#include "kv/kv_cache.h"

#include <fmt/format.h>

#include <cstring>

#include "core/assert.h"
#include "core/memory.h"

namespace treespec::kv {

namespace {
std::string describe(const KvShape& shape) {
  return fmt::format("KV cache ({} sequences x {} cells x {} layers x {} KV heads x {} dims, K and V in f32)", shape.n_seq,
                     shape.n_cells, shape.n_layer, shape.n_head_kv, shape.head_dim);
}
}  // namespace

uint64_t KvCache::required_bytes(const KvShape& shape) {
  if (shape.n_layer <= 0 || shape.n_head_kv <= 0 || shape.head_dim <= 0 || shape.n_seq <= 0 || shape.n_cells <= 0) {
    throw InvalidArgument(fmt::format("KV cache: invalid shape (layers {}, kv heads {}, head dim {}, seqs {}, cells {})",
                                      shape.n_layer, shape.n_head_kv, shape.head_dim, shape.n_seq, shape.n_cells));
  }
  uint64_t bytes = 2 * sizeof(float);  // K and V
  for (int32_t d : {shape.n_seq, shape.n_cells, shape.n_layer, shape.n_head_kv, shape.head_dim}) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes) || bytes > SIZE_MAX / 2) {
      throw Error(fmt::format("out of memory: the {} needs more bytes than this machine can address", describe(shape)));
    }
  }
  return bytes;
}

void KvCache::check_memory(const KvShape& shape) {
  const uint64_t bytes = required_bytes(shape);
  const core::MemoryInfo mem = core::available_memory();
  if (bytes > mem.available) {
    throw Error(fmt::format("out of memory: the {} needs {}, but only {} are available ({}); use a smaller context size",
                            describe(shape), core::format_bytes(bytes), core::format_bytes(mem.available), mem.source));
  }
}

KvCache::KvCache(const KvShape& shape) : shape_(shape) {
  // Refuse what the machine cannot hold BEFORE allocating: an over-committed allocation
  // would succeed, and the OOM killer would end the process later while the cache fills.
  check_memory(shape);
  per_seq_ = static_cast<size_t>(shape.n_head_kv) * static_cast<size_t>(shape.n_cells) * static_cast<size_t>(shape.head_dim);
  const size_t total = per_seq_ * static_cast<size_t>(shape.n_layer) * static_cast<size_t>(shape.n_seq);
  const std::string what = describe(shape);
  k_.resize(total, what.c_str());
  v_.resize(total, what.c_str());
  n_past_.assign(static_cast<size_t>(shape.n_seq), 0);
}

Status KvCache::check_rows(int32_t seq, int32_t n_rows) const {
  TREESPEC_ASSERT(seq >= 0 && seq < shape_.n_seq, "KV cache: sequence id out of range");
  if (n_rows > n_free(seq)) {
    return {StatusCode::context_full,
            fmt::format("sequence {} has {} of {} cells used; {} more rows do not fit", seq, n_past(seq), shape_.n_cells, n_rows)};
  }
  return {};
}

Status KvCache::commit(int32_t seq, std::span<const int32_t> path) {
  TREESPEC_ASSERT(seq >= 0 && seq < shape_.n_seq, "KV cache: sequence id out of range");
  const int32_t base = n_past(seq);
  const auto n = static_cast<int32_t>(path.size());
  if (n == 0) return {};
  if (base + path.back() >= shape_.n_cells || base + n > shape_.n_cells) {
    return {StatusCode::context_full, fmt::format("sequence {}: commit of {} rows past the {} cells", seq, n, shape_.n_cells)};
  }
  for (int32_t i = 1; i < n; ++i) {
    TREESPEC_ASSERT(path[static_cast<size_t>(i)] > path[static_cast<size_t>(i - 1)], "KV commit: path not increasing");
  }
  const size_t hd = static_cast<size_t>(shape_.head_dim);
  const size_t row_bytes = hd * sizeof(float);
  for (int32_t il = 0; il < shape_.n_layer; ++il) {
    float* ks = k(il, seq);
    float* vs = v(il, seq);
    for (int32_t h = 0; h < shape_.n_head_kv; ++h) {
      float* kh = ks + static_cast<size_t>(h) * shape_.n_cells * hd;
      float* vh = vs + static_cast<size_t>(h) * shape_.n_cells * hd;
      // Destinations never overtake sources (path[i] >= i), so a forward copy is safe.
      for (int32_t i = 0; i < n; ++i) {
        const int32_t src = path[static_cast<size_t>(i)];
        if (src == i) continue;
        std::memcpy(kh + (base + i) * hd, kh + (base + src) * hd, row_bytes);
        std::memcpy(vh + (base + i) * hd, vh + (base + src) * hd, row_bytes);
      }
    }
  }
  n_past_[static_cast<size_t>(seq)] = base + n;
  return {};
}

void KvCache::truncate(int32_t seq, int32_t n) {
  TREESPEC_ASSERT(seq >= 0 && seq < shape_.n_seq, "KV cache: sequence id out of range");
  TREESPEC_ASSERT(n >= 0 && n <= n_past(seq), "KV cache: truncate beyond committed length");
  n_past_[static_cast<size_t>(seq)] = n;
}

}  // namespace treespec::kv
