// KvCache: keys and values of every layer, in one paged pool shared by all sequence
// slots (docs/kv.md).
//
// The pool is n_blocks blocks of kBlockCells cells. A sequence's cells are logical:
// cell t of sequence s lives in block table(s)[t / kBlockCells], and blocks are taken
// from the pool as the sequence grows (reserve) and returned when it shrinks (truncate,
// clear, or the tree rows a commit did not keep). Inside a block, per layer and KV head,
// the kBlockCells rows of head_dim values are contiguous, so attention streams a block
// per head. K and V are stored as f32, f16 (the default of the engine), bf16 or q8_0.
//
// A sequence's committed prefix is cells [0, n_past). A step's tree rows are written to
// cells n_past + node (write_row); commit(seq, path) moves the accepted nodes' cells to
// n_past, n_past+1, ... in every layer and advances n_past. Each sequence may use at most
// n_cells cells (its context, tree scratch included); the pool may hold fewer cells than
// n_seq * n_cells (serve's -c), and then sequences compete for blocks. Capacity problems
// are reported as Status (context_full: the sequence's own limit; kv_full: the pool is
// out of blocks), never thrown.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"
#include "treespec/status.h"

namespace treespec::kv {

// Cells per block (a power of two; a block holds them for every layer and KV head).
constexpr int32_t kBlockCells = 16;
constexpr int32_t kBlockShift = 4;
static_assert((1 << kBlockShift) == kBlockCells);

struct KvShape {
  int32_t n_layer = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  int32_t n_seq = 1;         // sequence slots
  int32_t n_cells = 0;       // most cells one sequence may use: committed context + tree scratch
  int32_t n_pool_cells = 0;  // cells of the shared pool (rounded up to blocks); 0 = room for every
                             // sequence's n_cells at once
  tensor::DType type_k = tensor::DType::f32;
  tensor::DType type_v = tensor::DType::f32;

  // Blocks of the pool: n_pool_cells rounded up to whole blocks, or (n_pool_cells 0)
  // n_seq times n_cells rounded up.
  int64_t n_blocks() const;
};

// Parses a cache type as llama.cpp's -ctk/-ctv spell it: f32, f16, bf16, q8_0
// (case-insensitive); InvalidArgument naming the flag and the accepted names otherwise.
tensor::DType parse_cache_type(const std::string& name, const char* flag);
// "f16", ...; the names parse_cache_type accepts.
const char* cache_type_name(tensor::DType t);
std::string cache_type_names();

class KvCache {
 public:
  // InvalidArgument for a non-positive dimension, an unsupported cache type, or q8_0 with
  // a head size that is not a multiple of 32; Error "out of memory: the KV cache ...
  // needs N bytes, but only M are available" when the pool is larger than the memory
  // this process can still take (core::available_memory(), checked before allocating)
  // or if the allocation fails.
  explicit KvCache(const KvShape& shape);

  // Bytes of the pool for `shape`; InvalidArgument / Error as above (size overflow).
  static uint64_t required_bytes(const KvShape& shape);
  // Throws the "out of memory" Error above if required_bytes(shape) exceeds the memory
  // available now; allocates nothing.
  static void check_memory(const KvShape& shape);
  // One line for logs: cells, blocks, types, bytes.
  static std::string describe(const KvShape& shape);

  const KvShape& shape() const { return shape_; }
  int32_t n_seq() const { return shape_.n_seq; }
  int32_t n_cells() const { return shape_.n_cells; }  // per-sequence limit
  size_t bytes() const { return k_.data.size() + v_.data.size(); }

  int32_t n_blocks() const { return static_cast<int32_t>(ref_.size()); }
  int32_t n_free_blocks() const { return static_cast<int32_t>(free_.size()); }
  int64_t n_pool_cells() const { return static_cast<int64_t>(n_blocks()) * kBlockCells; }
  // Fraction of the pool's blocks in use, 0..1 (vLLM's kv_cache_usage_perc).
  double usage() const;

  int32_t n_past(int32_t seq) const { return seqs_[static_cast<size_t>(seq)].n_past; }
  // Cells the sequence may still add before its own limit (n_cells - n_past), whatever
  // the pool holds.
  int32_t n_free(int32_t seq) const { return shape_.n_cells - n_past(seq); }
  // Cells after n_past the sequence can write now: those of the blocks it holds plus
  // those the free blocks of the pool would give, within its limit.
  int32_t n_available(int32_t seq) const;
  // Blocks needed to hold n cells.
  static int32_t blocks_for(int64_t n_cells) { return static_cast<int32_t>((n_cells + kBlockCells - 1) / kBlockCells); }

  // Makes cells [n_past, n_past + n_rows) writable, taking blocks from the pool as needed:
  // ok; context_full if they pass the sequence's limit; kv_full if the pool lacks blocks
  // (nothing changes then).
  Status reserve(int32_t seq, int32_t n_rows);

  // Stores the K and V of one row (n_head_kv * head_dim f32 values each, head-major) in
  // cell `cell` of `seq` at `layer`, converted to the cache types. The cell must be
  // reserved.
  void write_row(int32_t layer, int32_t seq, int32_t cell, const float* k, const float* v);
  // Reads them back as f32 (tests, debugging); the same layout as write_row.
  void read_row(int32_t layer, int32_t seq, int32_t cell, float* k, float* v) const;

  // Keys / values of one KV head for attention (valid until the next reserve, commit,
  // truncate or clear of this sequence).
  kernels::KvRows k_rows(int32_t layer, int32_t seq, int32_t head) const { return rows(k_, layer, seq, head); }
  kernels::KvRows v_rows(int32_t layer, int32_t seq, int32_t head) const { return rows(v_, layer, seq, head); }

  // Moves cells n_past + path[k] -> n_past + k (all layers), advances n_past by
  // path.size() and returns the blocks past the new n_past to the pool. path must be
  // increasing node indices (a root-to-node path) of reserved cells; context_full if it
  // does not fit (nothing changes then).
  Status commit(int32_t seq, std::span<const int32_t> path);

  // Prefix sharing. Cells below n_past never change, so committed cells can serve another
  // sequence that starts with the same tokens (K/V of a cell depend only on the tokens up
  // to it): whole blocks are mapped into it, a partial last block is copied (the new
  // sequence writes the cells after it). A block is free again when its last holder
  // (sequence or retain()) lets it go.
  //
  // The pool blocks holding seq's committed cells [0, n_cells) (n_cells <= n_past; the
  // last one only partly when n_cells is not a multiple of kBlockCells).
  std::vector<int32_t> prefix_blocks(int32_t seq, int32_t n_cells) const;
  // An empty sequence starts with cells [0, n_cells) of `blocks` (blocks_for(n_cells) of
  // them, e.g. from prefix_blocks) as its committed cells. kv_full when a partial last
  // block needs a free block to be copied into and the pool has none (nothing changes).
  Status adopt_prefix(int32_t seq, std::span<const int32_t> blocks, int32_t n_cells);
  // References held outside any sequence (the engine's cache of finished prompts).
  void retain(std::span<const int32_t> blocks);
  void release(std::span<const int32_t> blocks);

  // Raises the per-sequence limit to n_cells (>= the current one) and, when the pool was
  // sized by default (n_pool_cells 0), the pool with it, keeping every stored cell.
  void grow(int32_t n_cells);

  // Sets every cell the sequence holds (reserved or committed) to zero: timing probes
  // that fake a committed prefix without computing it.
  void zero_cells(int32_t seq);

  // Forget everything after `n` committed cells (n <= n_past) and return the blocks
  // past them to the pool.
  void truncate(int32_t seq, int32_t n);
  void clear(int32_t seq) { truncate(seq, 0); }

 private:
  struct Seq {
    int32_t n_past = 0;
    std::vector<int32_t> blocks;  // logical block -> pool block
  };

  // The K or the V of every block: per block [layer][KV head][kBlockCells][row_bytes], so
  // the heads of one cell are kBlockCells rows apart.
  struct Pool {
    core::AlignedBuffer<uint8_t> data;
    tensor::DType type = tensor::DType::f32;
    int64_t row_bytes = 0;    // one head's row
    int64_t block_bytes = 0;  // one block
    int64_t head_bytes() const { return kBlockCells * row_bytes; }
  };

  kernels::KvRows rows(const Pool& pool, int32_t layer, int32_t seq, int32_t head) const;
  // Byte offset in a pool of head 0's row of a reserved cell at `layer`.
  int64_t row_offset(const Pool& pool, int32_t layer, int32_t seq, int32_t cell) const;
  // The pool block holding a reserved cell.
  int32_t block_of(int32_t seq, int32_t cell) const;
  // Keeps the blocks holding cells [0, n_cells) and returns the rest to the pool.
  void shrink(int32_t seq, int32_t n_cells);
  void check_seq(int32_t seq) const;

  KvShape shape_;
  Pool k_, v_;
  std::vector<Seq> seqs_;
  std::vector<int32_t> ref_;   // per pool block: sequences and retain()s holding it (0 = free)
  std::vector<int32_t> free_;  // free blocks, lowest id last (taken first)
};

}  // namespace treespec::kv
