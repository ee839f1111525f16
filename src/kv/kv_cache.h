// KvCache: keys and values of every layer for a fixed set of sequence slots.
//
// Layout per (layer, sequence): K and V are [n_head_kv, n_cells, head_dim] f32, so one
// head's keys are contiguous for attention. A sequence's committed prefix occupies
// cells [0, n_past). A step's tree rows are written to scratch cells n_past + node;
// commit(seq, path) copies the accepted nodes' cells to n_past, n_past+1, ... in every
// layer and advances n_past. Rejected rows are simply overwritten later: rejecting is
// free. Capacity problems are reported as Status (context_full), never thrown.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/aligned_buffer.h"
#include "treespec/status.h"

namespace treespec::kv {

struct KvShape {
  int32_t n_layer = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  int32_t n_seq = 1;     // sequence slots
  int32_t n_cells = 0;   // cells per sequence: committed context + tree scratch
};

class KvCache {
 public:
  // InvalidArgument for a non-positive dimension; Error "out of memory: the KV cache ...
  // needs N bytes, but only M are available" when the cache is larger than the memory
  // this process can still take (core::available_memory(), checked before allocating)
  // or if the allocation fails.
  explicit KvCache(const KvShape& shape);

  // Bytes of K and V for `shape`; InvalidArgument / Error as above (size overflow).
  static uint64_t required_bytes(const KvShape& shape);
  // Throws the "out of memory" Error above if required_bytes(shape) exceeds the memory
  // available now; allocates nothing.
  static void check_memory(const KvShape& shape);

  const KvShape& shape() const { return shape_; }
  int32_t n_seq() const { return shape_.n_seq; }
  int32_t n_cells() const { return shape_.n_cells; }
  size_t bytes() const { return static_cast<size_t>(k_.size() + v_.size()) * sizeof(float); }

  // [n_head_kv, n_cells, head_dim] for (layer, seq).
  float* k(int32_t layer, int32_t seq) { return k_.data() + offset(layer, seq); }
  float* v(int32_t layer, int32_t seq) { return v_.data() + offset(layer, seq); }
  const float* k(int32_t layer, int32_t seq) const { return k_.data() + offset(layer, seq); }
  const float* v(int32_t layer, int32_t seq) const { return v_.data() + offset(layer, seq); }

  int32_t n_past(int32_t seq) const { return n_past_[static_cast<size_t>(seq)]; }
  int32_t n_free(int32_t seq) const { return shape_.n_cells - n_past(seq); }

  // ok if `n_rows` tree rows fit after the committed prefix; context_full otherwise.
  Status check_rows(int32_t seq, int32_t n_rows) const;

  // Moves cells n_past + path[k] -> n_past + k (all layers) and advances n_past by
  // path.size(). path must be increasing node indices (a root-to-node path); context_full
  // if it does not fit (nothing changes then).
  Status commit(int32_t seq, std::span<const int32_t> path);

  // Forget everything after `n` committed cells (n <= n_past).
  void truncate(int32_t seq, int32_t n);
  void clear(int32_t seq) { truncate(seq, 0); }

 private:
  size_t offset(int32_t layer, int32_t seq) const {
    return (static_cast<size_t>(layer) * shape_.n_seq + static_cast<size_t>(seq)) * per_seq_;
  }

  KvShape shape_;
  size_t per_seq_ = 0;  // floats per (layer, seq)
  core::AlignedBuffer<float> k_;
  core::AlignedBuffer<float> v_;
  std::vector<int32_t> n_past_;
};

}  // namespace treespec::kv
