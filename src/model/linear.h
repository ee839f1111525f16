// Linear: a dense projection y = W x, the model-level entry point through which code
// above the model (the drafters' heads, the logit lens) multiplies by a weight matrix,
// whatever its type, without calling the kernels. W is [n_out, n_in] stored row by row in
// its dtype, as GGUF stores a tensor with ne = {n_in, n_out}; the data is borrowed (a
// mapped GGUF tensor, the model's own matrices, or f32 storage its owner keeps alive).
// Results are those of kernels::matmul / get_row on the same matrix, bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"

namespace treespec::model {

class Linear {
 public:
  Linear() = default;
  // A matrix the model bound (model-internal: keeps its load-time packed copy, if any).
  explicit Linear(const kernels::WeightView& w) : w_(w) {}
  // Borrowed f32 data [n_out, n_in].
  static Linear f32(const float* data, int64_t n_in, int64_t n_out);
  // Borrowed data of `type` [n_out, n_in] (e.g. a mapped GGUF tensor); supports(type) must hold.
  static Linear typed(const void* data, tensor::DType type, int64_t n_in, int64_t n_out);
  // True if Linear handles weights of this type.
  static bool supports(tensor::DType type);

  // y[M, n_out] = x[M, n_in] * W^T; `pool` may be null (single thread).
  void apply(const float* x, int64_t M, float* y, core::ThreadPool* pool) const;
  // dst[n_in] = row r of W, dequantised.
  void row(int64_t r, float* dst) const;
  // dst[n_out, n_in] = every row of W, dequantised.
  void dequantize(float* dst) const;

  tensor::DType type() const { return w_.type; }
  const void* data() const { return w_.data; }
  int64_t n_in() const { return w_.n_in; }
  int64_t n_out() const { return w_.n_out; }
  int64_t row_bytes() const { return w_.row_bytes(); }
  int64_t bytes() const { return w_.row_bytes() * w_.n_out; }  // of `data`
  // The kernels' view (model-internal use and training code that calls the kernels).
  const kernels::WeightView& view() const { return w_; }

 private:
  kernels::WeightView w_;
};

// An owned copy of some rows of a matrix, in the matrix's type, with the kernels' packed
// tile layout where they have one (as the model packs its own weights): e.g. the rows of
// the output matrix that a draft vocabulary keeps. Row i of linear() is row rows[i] of
// the source; results are those of the source's rows, bit for bit. Movable, not copyable.
class RowSubset {
 public:
  RowSubset() = default;
  RowSubset(const Linear& src, std::span<const int32_t> rows);
  RowSubset(RowSubset&&) = default;
  RowSubset& operator=(RowSubset&&) = default;
  const Linear& linear() const { return view_; }
  bool empty() const { return view_.data() == nullptr; }

 private:
  std::vector<uint8_t> raw_;
  core::AlignedBuffer<uint8_t> packed_;
  Linear view_;
};

// dst[n] = n elements of `type` at src, dequantised (n a multiple of the type's block
// size), e.g. a bias tensor read from a GGUF.
void to_f32(tensor::DType type, const void* src, float* dst, int64_t n);

}  // namespace treespec::model
