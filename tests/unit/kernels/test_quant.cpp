// Quantisation formats: hand-built Q4_K / Q6_K blocks dequantise to hand-computed values
// (checks the byte layout, not just self-consistency), round-trip errors stay within the
// per-type bounds, and the loader rejects a type we do not compute with by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/test_util.h"
#include "common/tiny_model.h"
#include "core/rng.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tensor/fp16.h"
#include "tensor/quant.h"
#include "treespec/status.h"

using namespace treespec;
using tensor::DType;

namespace {

TEST(QuantLayout, Q4KHandBuiltBlock) {
  // Sub-block scales and mins chosen to exercise both halves of the 12-byte packing
  // (values >= 16 in sub-blocks 4..7 need the high bits stored in bytes 0..7).
  const int sc[8] = {1, 2, 3, 4, 5, 6, 7, 63};
  const int mn[8] = {0, 1, 2, 3, 10, 20, 30, 63};
  tensor::BlockQ4_K b{};
  b.d = 0x3800;     // fp16 0.5
  b.dmin = 0x3400;  // fp16 0.25
  // Packed by hand from the format description (see quant.h):
  //  bytes 0-3: sc[j] | (sc[j+4] >> 4) << 6;  bytes 4-7: mn[j] | (mn[j+4] >> 4) << 6;
  //  bytes 8-11: (sc[j+4] & 15) | (mn[j+4] & 15) << 4.
  const uint8_t packed[12] = {1, 2, 3, 196, 0, 65, 66, 195, 165, 70, 231, 255};
  std::memcpy(b.scales, packed, 12);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) b.qs[32 * c + l] = static_cast<uint8_t>((l % 16) | ((15 - l % 16) << 4));
  }
  std::vector<float> y(256);
  tensor::dequantize_row(DType::q4_k, &b, y.data(), 256);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const float lo = 0.5f * static_cast<float>(sc[2 * c] * (l % 16)) - 0.25f * static_cast<float>(mn[2 * c]);
      const float hi =
          0.5f * static_cast<float>(sc[2 * c + 1] * (15 - l % 16)) - 0.25f * static_cast<float>(mn[2 * c + 1]);
      ASSERT_EQ(y[static_cast<size_t>(64 * c + l)], lo) << "element " << 64 * c + l;
      ASSERT_EQ(y[static_cast<size_t>(64 * c + 32 + l)], hi) << "element " << 64 * c + 32 + l;
    }
  }
  // The 6-bit unpacking helper agrees with the table above.
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    tensor::q4_k_scale_min(j, b.scales, &s, &m);
    EXPECT_EQ(s, sc[j]) << j;
    EXPECT_EQ(m, mn[j]) << j;
  }
}

TEST(QuantLayout, Q6KHandBuiltBlock) {
  // Element e has 6-bit value L(e) = (7e + 3) % 64, i.e. q = L - 32, in sub-block e / 16.
  auto L = [](int e) { return (7 * e + 3) % 64; };
  tensor::BlockQ6_K b{};
  b.d = 0x3000;  // fp16 0.125
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s % 2 ? -(s + 1) : s + 1);
  // Layout: in each half h (128 elements), for l < 32:
  //   element 128h + l      -> low nibble of ql[64h + l],      bits 0-1 of qh[32h + l]
  //   element 128h + 32 + l -> low nibble of ql[64h + 32 + l], bits 2-3 of qh[32h + l]
  //   element 128h + 64 + l -> high nibble of ql[64h + l],     bits 4-5 of qh[32h + l]
  //   element 128h + 96 + l -> high nibble of ql[64h + 32 + l], bits 6-7 of qh[32h + l]
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const int e0 = 128 * h + l, e1 = e0 + 32, e2 = e0 + 64, e3 = e0 + 96;
      b.ql[64 * h + l] = static_cast<uint8_t>((L(e0) & 15) | ((L(e2) & 15) << 4));
      b.ql[64 * h + 32 + l] = static_cast<uint8_t>((L(e1) & 15) | ((L(e3) & 15) << 4));
      b.qh[32 * h + l] =
          static_cast<uint8_t>((L(e0) >> 4) | ((L(e1) >> 4) << 2) | ((L(e2) >> 4) << 4) | ((L(e3) >> 4) << 6));
    }
  }
  std::vector<float> y(256);
  tensor::dequantize_row(DType::q6_k, &b, y.data(), 256);
  for (int e = 0; e < 256; ++e) {
    const float expect = 0.125f * static_cast<float>(b.scales[e / 16]) * static_cast<float>(L(e) - 32);
    ASSERT_EQ(y[static_cast<size_t>(e)], expect) << "element " << e;
  }
}

TEST(QuantLayout, Q8_0AndQ4_0HandBuiltBlocks) {
  tensor::BlockQ8_0 a{};
  a.d = 0x3c00;  // 1.0
  for (int j = 0; j < 32; ++j) a.qs[j] = static_cast<int8_t>(j - 16);
  std::vector<float> y(32);
  tensor::dequantize_row(DType::q8_0, &a, y.data(), 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[static_cast<size_t>(j)], static_cast<float>(j - 16));
  tensor::BlockQ4_0 b{};
  b.d = 0x4000;  // 2.0
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  tensor::dequantize_row(DType::q4_0, &b, y.data(), 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[static_cast<size_t>(j)], 2.0f * static_cast<float>(j - 8));
    EXPECT_EQ(y[static_cast<size_t>(j + 16)], 2.0f * static_cast<float>(7 - j));
  }
}

// The 32-value block types added for llama.cpp's files, each built byte by byte from the
// format description (quant.h) and compared with values computed here.
TEST(QuantLayout, Q4_1Q5_0Q5_1IQ4_NLHandBuiltBlocks) {
  std::vector<float> y(32);
  tensor::BlockQ4_1 a{};
  a.d = 0x3800;  // 0.5
  a.m = 0xBC00;  // -1.0
  for (int j = 0; j < 16; ++j) a.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  tensor::dequantize_row(DType::q4_1, &a, y.data(), 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[static_cast<size_t>(j)], 0.5f * static_cast<float>(j) - 1.0f);
    EXPECT_EQ(y[static_cast<size_t>(j + 16)], 0.5f * static_cast<float>(15 - j) - 1.0f);
  }
  // 5-bit values v(j) = (11 j + 5) % 32: low 4 bits in the nibbles (element j < 16 low,
  // j + 16 high of byte j), bit 4 of element j at bit j of the little-endian qh.
  auto v = [](int j) { return (11 * j + 5) % 32; };
  uint8_t qs[16], qh[4] = {0, 0, 0, 0};
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((v(j) & 15) | ((v(j + 16) & 15) << 4));
  for (int j = 0; j < 32; ++j) qh[j / 8] = static_cast<uint8_t>(qh[j / 8] | ((v(j) >> 4) << (j % 8)));
  tensor::BlockQ5_0 b{};
  b.d = 0x4000;  // 2.0
  std::memcpy(b.qh, qh, 4);
  std::memcpy(b.qs, qs, 16);
  tensor::dequantize_row(DType::q5_0, &b, y.data(), 32);
  for (int j = 0; j < 32; ++j)
    EXPECT_EQ(y[static_cast<size_t>(j)], 2.0f * static_cast<float>(v(j) - 16)) << "q5_0 " << j;
  tensor::BlockQ5_1 c{};
  c.d = 0x3400;  // 0.25
  c.m = 0x3C00;  // 1.0
  std::memcpy(c.qh, qh, 4);
  std::memcpy(c.qs, qs, 16);
  tensor::dequantize_row(DType::q5_1, &c, y.data(), 32);
  for (int j = 0; j < 32; ++j)
    EXPECT_EQ(y[static_cast<size_t>(j)], 0.25f * static_cast<float>(v(j)) + 1.0f) << "q5_1 " << j;
  const int grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                        1,    13,   25,  38,  53,  69,  89,  113};  // llama.cpp's kvalues_iq4nl
  tensor::BlockIQ4_NL e{};
  e.d = 0x2C00;  // 1/16
  for (int j = 0; j < 16; ++j) e.qs[j] = static_cast<uint8_t>(j | (((j * 7) % 16) << 4));
  tensor::dequantize_row(DType::iq4_nl, &e, y.data(), 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[static_cast<size_t>(j)], 0.0625f * static_cast<float>(grid[j]));
    EXPECT_EQ(y[static_cast<size_t>(j + 16)], 0.0625f * static_cast<float>(grid[(j * 7) % 16]));
  }
}

// Q2_K and Q3_K: element e = 128h + 32j + l is bits 2j..2j+1 of qs[32h + l], in
// sub-block e / 16; Q3_K's third bit is bit 4h + j of hmask[l].
TEST(QuantLayout, Q2KQ3KHandBuiltBlocks) {
  auto q2 = [](int e) { return (e * 5 + e / 7) % 4; };
  tensor::BlockQ2_K a{};
  a.d = 0x3800;     // 0.5
  a.dmin = 0x3400;  // 0.25
  for (int s = 0; s < 16; ++s) a.scales[s] = static_cast<uint8_t>(((s * 3) % 16) | ((15 - s) << 4));
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    a.qs[32 * h + l] = static_cast<uint8_t>(a.qs[32 * h + l] | (q2(e) << (2 * j)));
  }
  std::vector<float> y(256);
  tensor::dequantize_row(DType::q2_k, &a, y.data(), 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 16;
    const float expect =
        0.5f * static_cast<float>((s * 3) % 16) * static_cast<float>(q2(e)) - 0.25f * static_cast<float>(15 - s);
    ASSERT_EQ(y[static_cast<size_t>(e)], expect) << "q2_k element " << e;
  }
  // Q3_K: 6-bit scales stored + 32: sub-block s's low 4 bits in the low (s < 8) or high
  // (s >= 8) nibble of scales[s % 8], its top 2 bits at bits 2 (s / 4) of scales[8 + s % 4].
  auto q3 = [](int e) { return (e * 3 + e / 5) % 8; };  // 0..7, value q - 4
  const int stored[16] = {0, 1, 5, 17, 31, 32, 33, 40, 47, 50, 55, 60, 61, 62, 63, 20};
  tensor::BlockQ3_K b{};
  b.d = 0x3000;  // 0.125
  for (int s = 0; s < 16; ++s) {
    const int lo = stored[s] & 15, hi = stored[s] >> 4;
    b.scales[s % 8] = static_cast<uint8_t>(b.scales[s % 8] | (s < 8 ? lo : lo << 4));
    b.scales[8 + s % 4] = static_cast<uint8_t>(b.scales[8 + s % 4] | (hi << (2 * (s / 4))));
  }
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    b.qs[32 * h + l] = static_cast<uint8_t>(b.qs[32 * h + l] | ((q3(e) & 3) << (2 * j)));
    b.hmask[l] = static_cast<uint8_t>(b.hmask[l] | ((q3(e) >> 2) << (4 * h + j)));
  }
  tensor::dequantize_row(DType::q3_k, &b, y.data(), 256);
  for (int e = 0; e < 256; ++e) {
    const float expect = 0.125f * static_cast<float>(stored[e / 16] - 32) * static_cast<float>(q3(e) - 4);
    ASSERT_EQ(y[static_cast<size_t>(e)], expect) << "q3_k element " << e;
  }
  for (int s = 0; s < 16; ++s) EXPECT_EQ(tensor::q3_k_scale(s, b.scales), stored[s]) << s;
}

// Q5_K: Q4_K's scales, mins and nibbles plus bit j of qh[l] for element 32j + l.
// IQ4_XS: 6-bit scales (low nibble s % 2 of scales_l[s / 2], top 2 bits at bits 2s of
// scales_h) times the IQ4_NL grid, each sub-block of 32 laid out as one IQ4_NL block.
TEST(QuantLayout, Q5KIQ4XSHandBuiltBlocks) {
  auto q5 = [](int e) { return (e * 13 + 7) % 32; };
  tensor::BlockQ5_K a{};
  a.d = 0x3800;                                                                  // 0.5
  a.dmin = 0x3400;                                                               // 0.25
  const uint8_t packed[12] = {1, 2, 3, 196, 0, 65, 66, 195, 165, 70, 231, 255};  // as in Q4KHandBuiltBlock
  const int sc[8] = {1, 2, 3, 4, 5, 6, 7, 63};
  const int mn[8] = {0, 1, 2, 3, 10, 20, 30, 63};
  std::memcpy(a.scales, packed, 12);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32, l = e % 32;
    uint8_t& byte = a.qs[32 * (j / 2) + l];
    byte = static_cast<uint8_t>(byte | ((q5(e) & 15) << (4 * (j % 2))));
    a.qh[l] = static_cast<uint8_t>(a.qh[l] | ((q5(e) >> 4) << j));
  }
  std::vector<float> y(256);
  tensor::dequantize_row(DType::q5_k, &a, y.data(), 256);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32;
    const float expect =
        0.5f * static_cast<float>(sc[j]) * static_cast<float>(q5(e)) - 0.25f * static_cast<float>(mn[j]);
    ASSERT_EQ(y[static_cast<size_t>(e)], expect) << "q5_k element " << e;
  }
  const int grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  const int ls[8] = {0, 1, 31, 32, 33, 47, 62, 63};
  tensor::BlockIQ4_XS b{};
  b.d = 0x2C00;  // 1/16
  for (int s = 0; s < 8; ++s) {
    b.scales_l[s / 2] = static_cast<uint8_t>(b.scales_l[s / 2] | ((ls[s] & 15) << (4 * (s % 2))));
    b.scales_h = static_cast<uint16_t>(b.scales_h | ((ls[s] >> 4) << (2 * s)));
  }
  auto idx = [](int e) { return (e * 5 + 3) % 16; };
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32, k = e % 32;
    uint8_t& byte = b.qs[16 * s + k % 16];
    byte = static_cast<uint8_t>(byte | (idx(e) << (k < 16 ? 0 : 4)));
  }
  tensor::dequantize_row(DType::iq4_xs, &b, y.data(), 256);
  for (int e = 0; e < 256; ++e) {
    const float expect = 0.0625f * static_cast<float>(ls[e / 32] - 32) * static_cast<float>(grid[idx(e)]);
    ASSERT_EQ(y[static_cast<size_t>(e)], expect) << "iq4_xs element " << e;
  }
}

// Round trip on Gaussian data with a few outliers. Bounds:
//  f16: half-ulp relative 2^-11;  bf16: 2^-8;
//  q8_0: |err| <= d/2 (+ the fp16 rounding of d, relative 2^-11 times 127 steps) with
//        d = amax/127: we check <= 0.56 * amax/127 per block;
//  q4_0: the largest magnitude maps to -8 exactly, values of the other sign may be one
//        full step d = amax/8 away: |err| <= 1.01 * amax/8 per block;
//  q4_k, q6_k: relative RMS error (4-bit: uniform step ~range/15 -> ~2-3% of range;
//        6-bit ~0.5%): rms(err)/rms(x) <= 0.12 and 0.03;
//  q4_1, q5_0, q5_1, iq4_nl, iq4_xs, q5_k, q3_k, q2_k: relative RMS error per bit
//        width (4-bit 0.12, 5-bit 0.07, 3-bit 0.25, 2-bit 0.45; measured: 0.09-0.10,
//        0.044-0.060, 0.149, 0.271).
TEST(QuantRoundTrip, ErrorWithinBounds) {
  core::Rng rng(3);
  const int64_t n = 256 * 16;
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = static_cast<float>(rng.normal());
  for (int i = 0; i < 8; ++i) x[static_cast<size_t>(rng.uniform_int(static_cast<uint64_t>(n)))] *= 12.0f;
  for (DType t : {DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_k, DType::q6_k, DType::q4_1, DType::q5_0,
                  DType::q5_1, DType::iq4_nl, DType::iq4_xs, DType::q5_k, DType::q3_k, DType::q2_k}) {
    std::vector<uint8_t> q(static_cast<size_t>(tensor::row_bytes(t, n)));
    std::vector<float> y(x.size());
    tensor::quantize_row(t, x.data(), q.data(), n);
    tensor::dequantize_row(t, q.data(), y.data(), n);
    double se = 0, sx = 0;
    for (int64_t i = 0; i < n; ++i) {
      se += (y[i] - x[i]) * static_cast<double>(y[i] - x[i]);
      sx += x[i] * static_cast<double>(x[i]);
    }
    const double rel_rms = std::sqrt(se / sx);
    switch (t) {
      case DType::f16:
      case DType::bf16: {
        const double u = t == DType::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
        for (int64_t i = 0; i < n; ++i) ASSERT_LE(std::fabs(y[i] - x[i]), u * std::fabs(x[i]) * 1.0001) << i;
        break;
      }
      case DType::q8_0:
      case DType::q4_0:
        for (int64_t b = 0; b < n / 32; ++b) {
          float amax = 0;
          for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[static_cast<size_t>(b * 32 + j)]));
          const double bound = t == DType::q8_0 ? 0.56 * amax / 127.0 : 1.01 * amax / 8.0;
          for (int j = 0; j < 32; ++j) {
            const size_t i = static_cast<size_t>(b * 32 + j);
            ASSERT_LE(std::fabs(y[i] - x[i]), bound) << tensor::dtype_name(t) << " element " << i;
          }
        }
        break;
      case DType::q4_k: EXPECT_LE(rel_rms, 0.12) << "q4_k"; break;
      case DType::q6_k: EXPECT_LE(rel_rms, 0.03) << "q6_k"; break;
      case DType::q4_1:
      case DType::iq4_nl:
      case DType::iq4_xs: EXPECT_LE(rel_rms, 0.12) << tensor::dtype_name(t); break;
      case DType::q5_0:
      case DType::q5_1:
      case DType::q5_k: EXPECT_LE(rel_rms, 0.07) << tensor::dtype_name(t); break;
      case DType::q3_k: EXPECT_LE(rel_rms, 0.25) << "q3_k"; break;
      case DType::q2_k: EXPECT_LE(rel_rms, 0.45) << "q2_k"; break;
      default: break;
    }
    std::printf("%-7s rel rms %.4f\n", tensor::dtype_name(t), rel_rms);
    // Sanity: quantisation does something but not garbage.
    EXPECT_LT(rel_rms, t == DType::q2_k ? 0.5 : t == DType::q3_k ? 0.3 : 0.15) << tensor::dtype_name(t);
  }
}

TEST(QuantRoundTrip, ZerosStayZero) {
  std::vector<float> x(256, 0.0f), y(256, 1.0f);
  for (DType t : {DType::q8_0, DType::q4_0, DType::q4_k, DType::q6_k, DType::q4_1, DType::q5_0, DType::q5_1,
                  DType::iq4_nl, DType::iq4_xs, DType::q5_k, DType::q3_k, DType::q2_k}) {
    std::vector<uint8_t> q(static_cast<size_t>(tensor::row_bytes(t, 256)));
    tensor::quantize_row(t, x.data(), q.data(), 256);
    tensor::dequantize_row(t, q.data(), y.data(), 256);
    for (float v : y) ASSERT_EQ(v, 0.0f) << tensor::dtype_name(t);
  }
}

TEST(UnsupportedType, LoaderNamesTensorAndType) {
  // A tiny model whose attn_q of layer 0 is Q8_1: a type we do not compute with.
  const std::string dir = test::temp_dir();
  test::TinyModelConfig cfg;
  test::write_tiny_model(dir + "/ok.gguf", cfg);
  const auto src = gguf::GgufFile::open(dir + "/ok.gguf");
  gguf::GgufWriter w;
  for (const auto& [k, v] : src->metadata()) {
    if (k != "general.alignment") w.set(k, v);
  }
  for (const auto& t : src->tensors()) {
    if (t.name == "blk.0.attn_q.weight") {
      std::vector<uint8_t> bytes(static_cast<size_t>(tensor::row_bytes(DType::q8_1, t.ne[0]) * t.ne[1]), 0);
      w.add_tensor(t.name, DType::q8_1, t.ne, bytes.data(), bytes.size());
    } else {
      w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
    }
  }
  w.write(dir + "/q5.gguf");
  try {
    model::Model::load(dir + "/q5.gguf");
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("blk.0.attn_q.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("q8_1"), std::string::npos) << msg;
  }
}

}  // namespace
