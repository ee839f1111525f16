// Dispatch of the dequantisers and quantisers (quant_block32.cpp, quant_kquant.cpp) and
// the plain types.
#include "tensor/quant.h"

#include <cstring>

#include "core/assert.h"
#include "tensor/quant_internal.h"

namespace treespec::tensor {

using namespace detail;

namespace {

void check_n(DType t, int64_t n, const char* what) {
  const int64_t bs = dtype_traits(t).block_size;
  TREESPEC_ASSERT(n >= 0 && n % bs == 0, what);
}

}  // namespace

bool quant_supported(DType t) {
  switch (t) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
    case DType::q8_0:
    case DType::q4_0:
    case DType::q4_1:
    case DType::q5_0:
    case DType::q5_1:
    case DType::iq4_nl:
    case DType::q2_k:
    case DType::q3_k:
    case DType::q4_k:
    case DType::q5_k:
    case DType::q6_k:
    case DType::iq4_xs: return true;
    default: return false;
  }
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  check_n(t, n, "dequantize_row: n is not a multiple of the block size");
  switch (t) {
    case DType::f32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::f16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(s[i]);
      return;
    }
    case DType::bf16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(s[i]);
      return;
    }
    case DType::q8_0: deq_q8_0(static_cast<const BlockQ8_0*>(src), dst, n / 32); return;
    case DType::q4_0: deq_q4_0(static_cast<const BlockQ4_0*>(src), dst, n / 32); return;
    case DType::q4_1: deq_q4_1(static_cast<const BlockQ4_1*>(src), dst, n / 32); return;
    case DType::q5_0: deq_q5_0(static_cast<const BlockQ5_0*>(src), dst, n / 32); return;
    case DType::q5_1: deq_q5_1(static_cast<const BlockQ5_1*>(src), dst, n / 32); return;
    case DType::iq4_nl: deq_iq4_nl(static_cast<const BlockIQ4_NL*>(src), dst, n / 32); return;
    case DType::q2_k: deq_q2_k(static_cast<const BlockQ2_K*>(src), dst, n / 256); return;
    case DType::q3_k: deq_q3_k(static_cast<const BlockQ3_K*>(src), dst, n / 256); return;
    case DType::q4_k: deq_q4_k(static_cast<const BlockQ4_K*>(src), dst, n / 256); return;
    case DType::q5_k: deq_q5_k(static_cast<const BlockQ5_K*>(src), dst, n / 256); return;
    case DType::q6_k: deq_q6_k(static_cast<const BlockQ6_K*>(src), dst, n / 256); return;
    case DType::iq4_xs: deq_iq4_xs(static_cast<const BlockIQ4_XS*>(src), dst, n / 256); return;
    default: TREESPEC_ASSERT(false, "dequantize_row: unsupported type");
  }
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  check_n(t, n, "quantize_row: n is not a multiple of the block size");
  switch (t) {
    case DType::f32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::f16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_fp16(src[i]);
      return;
    }
    case DType::bf16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_bf16(src[i]);
      return;
    }
    case DType::q8_0: quant_q8_0(src, static_cast<BlockQ8_0*>(dst), n / 32); return;
    case DType::q4_0: quant_q4_0(src, static_cast<BlockQ4_0*>(dst), n / 32); return;
    case DType::q4_1: quant_q4_1(src, static_cast<BlockQ4_1*>(dst), n / 32); return;
    case DType::q5_0: quant_q5_0(src, static_cast<BlockQ5_0*>(dst), n / 32); return;
    case DType::q5_1: quant_q5_1(src, static_cast<BlockQ5_1*>(dst), n / 32); return;
    case DType::iq4_nl: quant_iq4_nl(src, static_cast<BlockIQ4_NL*>(dst), n / 32); return;
    case DType::q2_k: quant_q2_k(src, static_cast<BlockQ2_K*>(dst), n / 256); return;
    case DType::q3_k: quant_q3_k(src, static_cast<BlockQ3_K*>(dst), n / 256); return;
    case DType::q4_k: quant_q4_k(src, static_cast<BlockQ4_K*>(dst), n / 256); return;
    case DType::q5_k: quant_q5_k(src, static_cast<BlockQ5_K*>(dst), n / 256); return;
    case DType::q6_k: quant_q6_k(src, static_cast<BlockQ6_K*>(dst), n / 256); return;
    case DType::iq4_xs: quant_iq4_xs(src, static_cast<BlockIQ4_XS*>(dst), n / 256); return;
    default: TREESPEC_ASSERT(false, "quantize_row: unsupported type");
  }
}

}  // namespace treespec::tensor
