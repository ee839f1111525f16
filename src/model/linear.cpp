#include "model/linear.h"

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

void to_f32(tensor::DType type, const void* src, float* dst, int64_t n) { kernels::to_float(type, src, dst, n); }

}  // namespace treespec::model
