#include "model/linear.h"

#include <cstring>

#include "core/assert.h"

namespace treespec::model {

Linear Linear::f32(const float* data, int64_t n_in, int64_t n_out) {
  return Linear(kernels::WeightView{data, tensor::DType::f32, n_in, n_out});
}

Linear Linear::typed(const void* data, tensor::DType type, int64_t n_in, int64_t n_out) {
  TREESPEC_ASSERT(supports(type), "Linear::typed: weight type not supported");
  return Linear(kernels::WeightView{data, type, n_in, n_out});
}

bool Linear::supports(tensor::DType type) { return kernels::dtype_supported(type); }

void Linear::apply(const float* x, int64_t M, float* y, core::ThreadPool* pool) const {
  kernels::matmul(w_, x, M, y, pool);
}

void Linear::row(int64_t r, float* dst) const { kernels::get_row(w_, r, dst); }

void Linear::dequantize(float* dst) const {
  for (int64_t r = 0; r < w_.n_out; ++r) kernels::get_row(w_, r, dst + r * w_.n_in);
}

RowSubset::RowSubset(const Linear& src, std::span<const int32_t> rows) {
  const kernels::WeightView& w = src.view();
  const auto rb = static_cast<size_t>(w.row_bytes());
  raw_.resize(rows.size() * rb);
  for (size_t i = 0; i < rows.size(); ++i) {
    TREESPEC_ASSERT(rows[i] >= 0 && rows[i] < w.n_out, "RowSubset: row out of range");
    std::memcpy(raw_.data() + i * rb, static_cast<const uint8_t*>(w.data) + static_cast<size_t>(rows[i]) * rb, rb);
  }
  kernels::WeightView v{raw_.data(), w.type, w.n_in, static_cast<int64_t>(rows.size())};
  if (w.packed != nullptr) {  // the source is read packed: so is the copy (same bits either way)
    const int64_t n = kernels::packed_bytes(v);
    if (n > 0) {
      packed_.resize(static_cast<size_t>(n), "packed row subset");
      kernels::pack_weights(v, packed_.data());
      v.packed = packed_.data();
    }
  }
  view_ = Linear(v);
}

void to_f32(tensor::DType type, const void* src, float* dst, int64_t n) { kernels::to_float(type, src, dst, n); }

}  // namespace treespec::model
