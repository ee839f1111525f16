// Pieces shared by the quantisation translation units (quant.cpp: plain types and
// dispatch, quant_block32.cpp: the 32-value block types, quant_kquant.cpp: the K-quants
// and IQ4_XS). Not part of the tensor module's interface.
#pragma once

#include <cmath>
#include <cstdint>

#include "tensor/fp16.h"
#include "tensor/quant.h"

namespace treespec::tensor::detail {

inline float h2f(uint16_t h) { return fp16_to_fp32(h); }
inline int nearest_int(float x) { return static_cast<int>(std::lround(x)); }

// Fits x[n] ~ scale * L - mn with L in [0, nmax], mn >= 0 (n <= 256), by trying a few
// scales and refining each by least squares. Returns scale; *mn receives the min.
float fit_scale_min(const float* x, int n, int nmax, float* mn);
// Symmetric fit x ~ s * L with L in [-nmax, nmax - 1] (n <= 32).
float fit_scale_sym(const float* x, int n, int nmax);
// Fit x[n] ~ d * kIq4nlValues[L] (n <= 32): returns d, writes the indices L.
float fit_iq4nl(const float* x, int n, uint8_t* L);
// Index of the grid value nearest to v (the lower on a tie).
int nearest_iq4nl(float v);

// Dequantisers (nb blocks) and quantisers (nb blocks) per type.
void deq_q8_0(const BlockQ8_0* b, float* y, int64_t nb);
void deq_q4_0(const BlockQ4_0* b, float* y, int64_t nb);
void deq_q4_1(const BlockQ4_1* b, float* y, int64_t nb);
void deq_q5_0(const BlockQ5_0* b, float* y, int64_t nb);
void deq_q5_1(const BlockQ5_1* b, float* y, int64_t nb);
void deq_iq4_nl(const BlockIQ4_NL* b, float* y, int64_t nb);
void deq_q2_k(const BlockQ2_K* b, float* y, int64_t nb);
void deq_q3_k(const BlockQ3_K* b, float* y, int64_t nb);
void deq_q4_k(const BlockQ4_K* b, float* y, int64_t nb);
void deq_q5_k(const BlockQ5_K* b, float* y, int64_t nb);
void deq_q6_k(const BlockQ6_K* b, float* y, int64_t nb);
void deq_iq4_xs(const BlockIQ4_XS* b, float* y, int64_t nb);

void quant_q8_0(const float* x, BlockQ8_0* b, int64_t nb);
void quant_q4_0(const float* x, BlockQ4_0* b, int64_t nb);
void quant_q4_1(const float* x, BlockQ4_1* b, int64_t nb);
void quant_q5_0(const float* x, BlockQ5_0* b, int64_t nb);
void quant_q5_1(const float* x, BlockQ5_1* b, int64_t nb);
void quant_iq4_nl(const float* x, BlockIQ4_NL* b, int64_t nb);
void quant_q2_k(const float* x, BlockQ2_K* b, int64_t nb);
void quant_q3_k(const float* x, BlockQ3_K* b, int64_t nb);
void quant_q4_k(const float* x, BlockQ4_K* b, int64_t nb);
void quant_q5_k(const float* x, BlockQ5_K* b, int64_t nb);
void quant_q6_k(const float* x, BlockQ6_K* b, int64_t nb);
void quant_iq4_xs(const float* x, BlockIQ4_XS* b, int64_t nb);

}  // namespace treespec::tensor::detail
