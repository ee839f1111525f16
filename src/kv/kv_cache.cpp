#include "kv/kv_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "core/assert.h"
#include "core/memory.h"
#include "tensor/quant.h"

namespace treespec::kv {

namespace {
// The types -ctk/-ctv name, in the order help texts list them; attention reads exactly
// these (kernels::kv_type_supported decides what a cache may hold).
constexpr tensor::DType kCacheTypes[] = {tensor::DType::f32, tensor::DType::f16, tensor::DType::bf16,
                                         tensor::DType::q8_0};

void check_shape(const KvShape& s) {
  if (s.n_layer <= 0 || s.n_head_kv <= 0 || s.head_dim <= 0 || s.n_seq <= 0 || s.n_cells <= 0 || s.n_pool_cells < 0) {
    throw InvalidArgument(
        fmt::format("KV cache: invalid shape (layers {}, kv heads {}, head dim {}, seqs {}, cells {}, pool {})",
                    s.n_layer, s.n_head_kv, s.head_dim, s.n_seq, s.n_cells, s.n_pool_cells));
  }
  for (tensor::DType t : {s.type_k, s.type_v}) {
    if (!kernels::kv_type_supported(t)) {
      throw InvalidArgument(
          fmt::format("KV cache type {} is not supported (use one of {})", tensor::dtype_name(t), cache_type_names()));
    }
    if (t == tensor::DType::q8_0 && s.head_dim % tensor::kQK8_0 != 0) {
      throw InvalidArgument(
          fmt::format("KV cache type q8_0 needs a head size that is a multiple of {}; this model's is {} "
                      "(use f16 or f32)",
                      tensor::kQK8_0, s.head_dim));
    }
  }
}
}  // namespace

int64_t KvShape::n_blocks() const {
  // By default every sequence can fill its limit at once (its own blocks rounded up).
  if (n_pool_cells == 0)
    return static_cast<int64_t>(n_seq) * ((static_cast<int64_t>(n_cells) + kBlockCells - 1) / kBlockCells);
  return (static_cast<int64_t>(n_pool_cells) + kBlockCells - 1) / kBlockCells;
}

tensor::DType parse_cache_type(const std::string& name, const char* flag) {
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (tensor::DType t : kCacheTypes) {
    if (lower == cache_type_name(t)) return t;
  }
  throw InvalidArgument(fmt::format("{}: unknown KV cache type '{}' (use one of {})", flag, name, cache_type_names()));
}

const char* cache_type_name(tensor::DType t) { return tensor::dtype_name(t); }

std::string cache_type_names() {
  std::string s;
  for (tensor::DType t : kCacheTypes) s += (s.empty() ? "" : ", ") + std::string(cache_type_name(t));
  return s;
}

std::string KvCache::describe(const KvShape& s) {
  const int64_t blocks = s.n_blocks();
  return fmt::format(
      "KV cache ({} cells in {} blocks of {} for {} sequence{} of at most {} cells; {} layers x {} KV heads x {} "
      "dims; K {}, V {})",
      blocks * kBlockCells, blocks, kBlockCells, s.n_seq, s.n_seq == 1 ? "" : "s", s.n_cells, s.n_layer, s.n_head_kv,
      s.head_dim, cache_type_name(s.type_k), cache_type_name(s.type_v));
}

uint64_t KvCache::required_bytes(const KvShape& shape) {
  check_shape(shape);
  uint64_t total = 0;
  for (tensor::DType t : {shape.type_k, shape.type_v}) {
    uint64_t bytes = static_cast<uint64_t>(tensor::row_bytes(t, shape.head_dim));
    for (int64_t d : {shape.n_blocks(), int64_t{kBlockCells}, int64_t{shape.n_layer}, int64_t{shape.n_head_kv}}) {
      if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes) || bytes > SIZE_MAX / 4) {
        throw Error(
            fmt::format("out of memory: the {} needs more bytes than this machine can address", describe(shape)));
      }
    }
    total += bytes;
  }
  return total;
}

void KvCache::check_memory(const KvShape& shape) {
  const uint64_t bytes = required_bytes(shape);
  const core::MemoryInfo mem = core::available_memory();
  if (bytes > mem.available) {
    throw Error(
        fmt::format("out of memory: the {} needs {}, but only {} are available ({}); use a smaller context size or "
                    "an f16 / q8_0 cache type",
                    describe(shape), core::format_bytes(bytes), core::format_bytes(mem.available), mem.source));
  }
}

KvCache::KvCache(const KvShape& shape) : shape_(shape) {
  // Refuse what the machine cannot hold BEFORE allocating: an over-committed allocation
  // would succeed, and the OOM killer would end the process later while the cache fills.
  check_memory(shape);
  const int64_t blocks = shape.n_blocks();
  const std::string what = describe(shape);
  for (auto [pool, type] : {std::pair{&k_, shape.type_k}, std::pair{&v_, shape.type_v}}) {
    pool->type = type;
    pool->row_bytes = tensor::row_bytes(type, shape.head_dim);
    pool->block_bytes = pool->head_bytes() * shape.n_layer * shape.n_head_kv;
    // Untouched pages cost no memory: a block's pages are first written when a sequence
    // takes it, and free blocks are handed out lowest id first.
    pool->data.resize(static_cast<size_t>(blocks * pool->block_bytes), what.c_str());
  }
  seqs_.resize(static_cast<size_t>(shape.n_seq));
  ref_.assign(static_cast<size_t>(blocks), 0);
  free_.resize(static_cast<size_t>(blocks));
  for (int64_t i = 0; i < blocks; ++i) free_[static_cast<size_t>(i)] = static_cast<int32_t>(blocks - 1 - i);
}

void KvCache::check_seq(int32_t seq) const {
  TREESPEC_ASSERT(seq >= 0 && seq < shape_.n_seq, "KV cache: sequence id out of range");
}

double KvCache::usage() const {
  return n_blocks() == 0 ? 0.0 : static_cast<double>(n_blocks() - n_free_blocks()) / static_cast<double>(n_blocks());
}

int32_t KvCache::n_available(int32_t seq) const {
  check_seq(seq);
  const Seq& s = seqs_[static_cast<size_t>(seq)];
  const int64_t held = static_cast<int64_t>(s.blocks.size()) * kBlockCells;
  const int64_t reachable = held + static_cast<int64_t>(free_.size()) * kBlockCells;
  return static_cast<int32_t>(std::min<int64_t>(shape_.n_cells, reachable) - s.n_past);
}

Status KvCache::reserve(int32_t seq, int32_t n_rows) {
  check_seq(seq);
  Seq& s = seqs_[static_cast<size_t>(seq)];
  if (n_rows > n_free(seq)) {
    return {StatusCode::context_full, fmt::format("sequence {} has {} of {} cells used; {} more rows do not fit", seq,
                                                  s.n_past, shape_.n_cells, n_rows)};
  }
  const int32_t need = blocks_for(static_cast<int64_t>(s.n_past) + n_rows);
  const auto have = static_cast<int32_t>(s.blocks.size());
  if (need - have > n_free_blocks()) {
    return {StatusCode::kv_full,
            fmt::format("the KV cache pool has {} free blocks of {} cells; sequence {} needs {} more", n_free_blocks(),
                        kBlockCells, seq, need - have)};
  }
  for (int32_t b = have; b < need; ++b) {
    const int32_t id = free_.back();
    free_.pop_back();
    ref_[static_cast<size_t>(id)] = 1;
    s.blocks.push_back(id);
  }
  return {};
}

kernels::KvRows KvCache::rows(const Pool& pool, int32_t layer, int32_t seq, int32_t head) const {
  check_seq(seq);
  kernels::KvRows r;
  r.base = pool.data.data() + (static_cast<int64_t>(layer) * shape_.n_head_kv + head) * pool.head_bytes();
  r.blocks = seqs_[static_cast<size_t>(seq)].blocks.data();
  r.block_stride = pool.block_bytes;
  r.row_stride = pool.row_bytes;
  r.block_shift = kBlockShift;
  r.type = pool.type;
  return r;
}

int32_t KvCache::block_of(int32_t seq, int32_t cell) const {
  const Seq& s = seqs_[static_cast<size_t>(seq)];
  TREESPEC_ASSERT(cell >= 0 && (cell >> kBlockShift) < static_cast<int32_t>(s.blocks.size()),
                  "KV cache: cell not reserved");
  return s.blocks[static_cast<size_t>(cell >> kBlockShift)];
}

int64_t KvCache::row_offset(const Pool& pool, int32_t layer, int32_t seq, int32_t cell) const {
  const int64_t row = static_cast<int64_t>(layer) * shape_.n_head_kv * kBlockCells + (cell & (kBlockCells - 1));
  return block_of(seq, cell) * pool.block_bytes + row * pool.row_bytes;
}

void KvCache::write_row(int32_t layer, int32_t seq, int32_t cell, const float* k, const float* v) {
  check_seq(seq);
  TREESPEC_ASSERT(ref_[static_cast<size_t>(block_of(seq, cell))] == 1,
                  "KV cache: write into a block other sequences share");
  const int64_t hd = shape_.head_dim;
  for (auto [pool, x] : {std::pair{&k_, k}, std::pair{&v_, v}}) {
    uint8_t* dst = pool->data.data() + row_offset(*pool, layer, seq, cell);
    for (int32_t h = 0; h < shape_.n_head_kv; ++h)
      tensor::quantize_row(pool->type, x + h * hd, dst + h * pool->head_bytes(), hd);
  }
}

void KvCache::read_row(int32_t layer, int32_t seq, int32_t cell, float* k, float* v) const {
  check_seq(seq);
  const int64_t hd = shape_.head_dim;
  for (auto [pool, x] : {std::pair{&k_, k}, std::pair{&v_, v}}) {
    const uint8_t* src = pool->data.data() + row_offset(*pool, layer, seq, cell);
    for (int32_t h = 0; h < shape_.n_head_kv; ++h)
      tensor::dequantize_row(pool->type, src + h * pool->head_bytes(), x + h * hd, hd);
  }
}

Status KvCache::commit(int32_t seq, std::span<const int32_t> path) {
  check_seq(seq);
  Seq& s = seqs_[static_cast<size_t>(seq)];
  const int32_t base = s.n_past;
  const auto n = static_cast<int32_t>(path.size());
  if (n == 0) return {};
  if (base + path.back() >= shape_.n_cells || base + n > shape_.n_cells) {
    return {StatusCode::context_full,
            fmt::format("sequence {}: commit of {} rows past the {} cells", seq, n, shape_.n_cells)};
  }
  TREESPEC_ASSERT(blocks_for(static_cast<int64_t>(base) + path.back() + 1) <= static_cast<int32_t>(s.blocks.size()),
                  "KV commit: path cells not reserved");
  for (int32_t i = 1; i < n; ++i) {
    TREESPEC_ASSERT(path[static_cast<size_t>(i)] > path[static_cast<size_t>(i - 1)], "KV commit: path not increasing");
  }
  for (Pool* pool : {&k_, &v_}) {
    uint8_t* data = pool->data.data();
    for (int32_t il = 0; il < shape_.n_layer; ++il) {
      // Destinations never overtake sources (path[i] >= i), so a forward copy is safe.
      for (int32_t i = 0; i < n; ++i) {
        const int32_t src = path[static_cast<size_t>(i)];
        if (src == i) continue;
        const int64_t to = row_offset(*pool, il, seq, base + i), from = row_offset(*pool, il, seq, base + src);
        for (int32_t h = 0; h < shape_.n_head_kv; ++h) {
          std::memcpy(data + to + h * pool->head_bytes(), data + from + h * pool->head_bytes(),
                      static_cast<size_t>(pool->row_bytes));
        }
      }
    }
  }
  s.n_past = base + n;
  shrink(seq, s.n_past);
  return {};
}

void KvCache::shrink(int32_t seq, int32_t n_cells) {
  Seq& s = seqs_[static_cast<size_t>(seq)];
  const auto keep = static_cast<size_t>(blocks_for(n_cells));
  while (s.blocks.size() > keep) {
    const int32_t id = s.blocks.back();
    s.blocks.pop_back();
    if (--ref_[static_cast<size_t>(id)] == 0) free_.push_back(id);
  }
}

std::vector<int32_t> KvCache::prefix_blocks(int32_t seq, int32_t n_cells) const {
  check_seq(seq);
  const Seq& s = seqs_[static_cast<size_t>(seq)];
  TREESPEC_ASSERT(n_cells >= 0 && n_cells <= s.n_past, "KV prefix: only committed cells can be shared");
  return {s.blocks.begin(), s.blocks.begin() + blocks_for(n_cells)};
}

Status KvCache::adopt_prefix(int32_t seq, std::span<const int32_t> blocks, int32_t n_cells) {
  check_seq(seq);
  Seq& s = seqs_[static_cast<size_t>(seq)];
  TREESPEC_ASSERT(s.n_past == 0 && s.blocks.empty(), "KV prefix: the sequence must be empty");
  TREESPEC_ASSERT(n_cells >= 0 && n_cells <= shape_.n_cells, "KV prefix: longer than the limit");
  TREESPEC_ASSERT(static_cast<int64_t>(blocks.size()) == blocks_for(n_cells),
                  "KV prefix: blocks do not match the cells");
  const int32_t n_whole = n_cells / kBlockCells, n_tail = n_cells % kBlockCells;
  if (n_tail > 0 && free_.empty()) {
    return {StatusCode::kv_full,
            fmt::format("the KV cache pool has no free block to copy {} cells of a prefix into", n_tail)};
  }
  for (int32_t i = 0; i < static_cast<int32_t>(blocks.size()); ++i) {
    const int32_t id = blocks[static_cast<size_t>(i)];
    TREESPEC_ASSERT(ref_[static_cast<size_t>(id)] > 0, "KV prefix: a shared block must be in use");
    if (i < n_whole) {
      ++ref_[static_cast<size_t>(id)];
      s.blocks.push_back(id);
      continue;
    }
    // The partial last block: its first n_tail cells of every layer and head.
    const int32_t own = free_.back();
    free_.pop_back();
    ref_[static_cast<size_t>(own)] = 1;
    s.blocks.push_back(own);
    for (Pool* pool : {&k_, &v_}) {
      const uint8_t* from = pool->data.data() + id * pool->block_bytes;
      uint8_t* to = pool->data.data() + own * pool->block_bytes;
      for (int64_t lh = 0; lh < static_cast<int64_t>(shape_.n_layer) * shape_.n_head_kv; ++lh) {
        std::memcpy(to + lh * pool->head_bytes(), from + lh * pool->head_bytes(),
                    static_cast<size_t>(n_tail * pool->row_bytes));
      }
    }
  }
  s.n_past = n_cells;
  return {};
}

void KvCache::retain(std::span<const int32_t> blocks) {
  for (int32_t id : blocks) {
    TREESPEC_ASSERT(ref_[static_cast<size_t>(id)] > 0, "KV retain: the block must be in use");
    ++ref_[static_cast<size_t>(id)];
  }
}

void KvCache::release(std::span<const int32_t> blocks) {
  for (int32_t id : blocks) {
    TREESPEC_ASSERT(ref_[static_cast<size_t>(id)] > 0, "KV release: the block is not held");
    if (--ref_[static_cast<size_t>(id)] == 0) free_.push_back(id);
  }
}

void KvCache::grow(int32_t n_cells) {
  TREESPEC_ASSERT(n_cells >= shape_.n_cells, "KV grow: the limit only grows");
  KvShape shape = shape_;
  shape.n_cells = n_cells;
  check_memory(shape);
  const int64_t old_blocks = n_blocks(), blocks = shape.n_blocks();
  shape_ = shape;
  if (blocks <= old_blocks) return;
  // Block addresses depend only on the block id, so the old pool is a prefix of the new.
  for (Pool* pool : {&k_, &v_}) {
    core::AlignedBuffer<uint8_t> bigger(static_cast<size_t>(blocks * pool->block_bytes), "KV cache");
    std::memcpy(bigger.data(), pool->data.data(), static_cast<size_t>(old_blocks * pool->block_bytes));
    pool->data = std::move(bigger);
  }
  ref_.resize(static_cast<size_t>(blocks), 0);
  std::vector<int32_t> added;
  for (int64_t id = blocks - 1; id >= old_blocks; --id) added.push_back(static_cast<int32_t>(id));
  free_.insert(free_.begin(), added.begin(), added.end());  // old free blocks stay first in line
}

void KvCache::zero_cells(int32_t seq) {
  check_seq(seq);
  for (int32_t id : seqs_[static_cast<size_t>(seq)].blocks) {
    for (Pool* pool : {&k_, &v_}) {
      std::memset(pool->data.data() + id * pool->block_bytes, 0, static_cast<size_t>(pool->block_bytes));
    }
  }
}

void KvCache::truncate(int32_t seq, int32_t n) {
  check_seq(seq);
  TREESPEC_ASSERT(n >= 0 && n <= n_past(seq), "KV cache: truncate beyond committed length");
  seqs_[static_cast<size_t>(seq)].n_past = n;
  shrink(seq, n);
}

}  // namespace treespec::kv
