// matmul for every weight type x every ISA the CPU has x M in {1,2,3,4,7,8,16,31,64},
// against the scalar reference, with per-type tolerances derived from error bounds:
//
// - f32-activation paths (scalar, AVX2, AVX-512 float tiles, every type; the weights are
//   dequantised exactly, only the summation order differs): |y - y_ref| <= 2 n u S with
//   S = sum_j |w_j x_j| and u = 2^-24 (each order's rounding error is at most n u S).
// - q8-activation paths (AVX-512 VNNI for Q8_0 / Q4_0): activations are rounded to int8
//   per block of 32 (step d_b = amax_b / 127, error <= d_b / 2 per element), so
//   additionally |y - y_ref| <= sum_b (d_b / 2) sum_{j in b} |w_j|, plus the float
//   rounding term. This is exactly the error llama.cpp's Q8_0 dot products make.
//
// Plus the property the tree decoder relies on: every kernel is batch invariant (a row's
// outputs are bit-identical whether computed alone or among M rows, with 1 or 2 threads).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/impl.h"
#include "kernels/kernels.h"
#include "tensor/quant.h"

using namespace treespec;
using tensor::DType;

namespace {

const DType kTypes[] = {DType::f32,    DType::f16,  DType::bf16, DType::q8_0, DType::q4_0,
                        DType::q4_k,   DType::q6_k, DType::q4_1, DType::q5_0, DType::q5_1,
                        DType::iq4_nl, DType::q2_k, DType::q3_k, DType::q5_k, DType::iq4_xs};
const kernels::Isa kIsas[] = {kernels::Isa::scalar, kernels::Isa::avx2, kernels::Isa::avx512,
                              kernels::Isa::avx512_vnni};
const int64_t kMs[] = {1, 2, 3, 4, 7, 8, 16, 31, 64};

// Restores the active ISA after a test.
struct IsaGuard {
  kernels::Isa saved = kernels::active_isa();
  ~IsaGuard() { kernels::set_active_isa(saved); }
};

struct Weights {
  std::vector<uint8_t> bytes;
  std::vector<float> deq;  // [n_out, n_in] exact values the kernels must use
  kernels::WeightView view;
};

Weights make_weights(DType t, int64_t n_in, int64_t n_out, uint64_t seed) {
  core::Rng rng(seed);
  Weights w;
  std::vector<float> src(static_cast<size_t>(n_in * n_out));
  for (auto& v : src) v = static_cast<float>(rng.normal()) * 0.5f + 0.01f;  // never all zero
  const int64_t rb = tensor::row_bytes(t, n_in);
  w.bytes.resize(static_cast<size_t>(rb * n_out));
  w.deq.resize(src.size());
  for (int64_t r = 0; r < n_out; ++r) {
    tensor::quantize_row(t, src.data() + r * n_in, w.bytes.data() + r * rb, n_in);
    tensor::dequantize_row(t, w.bytes.data() + r * rb, w.deq.data() + r * n_in, n_in);
  }
  w.view = kernels::WeightView{w.bytes.data(), t, n_in, n_out};
  return w;
}

std::vector<float> random_x(int64_t n, uint64_t seed) {
  core::Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = static_cast<float>(rng.normal());
  return x;
}

int64_t n_in_for(DType t) {
  const int64_t bs = tensor::dtype_traits(t).block_size;
  if (bs == 1) return 77;  // exercises vector tails
  if (bs == 32) return 160;
  return 512;
}

std::string label(kernels::Isa isa, DType t) {
  return std::string(kernels::isa_name(isa)) + "/" + tensor::dtype_name(t);
}

bool uses_q8_activations(kernels::Isa isa, DType t) {
  return kernels::impl::table_for(isa).act[static_cast<int>(t)] == kernels::impl::ActFormat::q8;
}

void check_against_reference(kernels::Isa isa, DType t) {
  const int64_t n_in = n_in_for(t);
  const int64_t n_out = 45;  // not a multiple of any tile height
  const Weights w = make_weights(t, n_in, n_out, 11 + static_cast<uint64_t>(t));
  const bool q8 = uses_q8_activations(isa, t);
  for (int64_t M : kMs) {
    const auto x = random_x(M * n_in, 100 + static_cast<uint64_t>(M));
    std::vector<float> y(static_cast<size_t>(M * n_out), NAN), y_ref(y.size(), NAN);
    kernels::set_active_isa(kernels::Isa::scalar);
    kernels::matmul(w.view, x.data(), M, y_ref.data(), nullptr);
    kernels::set_active_isa(isa);
    kernels::matmul(w.view, x.data(), M, y.data(), nullptr);
    for (int64_t m = 0; m < M; ++m) {
      const float* xm = x.data() + m * n_in;
      for (int64_t r = 0; r < n_out; ++r) {
        const float* wr = w.deq.data() + r * n_in;
        double S = 0, act_err = 0;
        for (int64_t j = 0; j < n_in; ++j) S += std::fabs(static_cast<double>(wr[j]) * xm[j]);
        if (q8) {
          for (int64_t b = 0; b < n_in / 32; ++b) {
            double amax = 0, wsum = 0;
            for (int j = 0; j < 32; ++j) {
              amax = std::max(amax, std::fabs(static_cast<double>(xm[b * 32 + j])));
              wsum += std::fabs(static_cast<double>(wr[b * 32 + j]));
            }
            act_err += amax / 127.0 / 2.0 * wsum * (1.0 + 1e-5);
          }
        }
        const double tol = 2.0 * static_cast<double>(n_in) * std::ldexp(1.0, -24) * S * 1.5 + act_err + 1e-30;
        const size_t k = static_cast<size_t>(m * n_out + r);
        ASSERT_TRUE(std::isfinite(y[k])) << label(isa, t) << " M=" << M << " m=" << m << " r=" << r;
        ASSERT_LE(std::fabs(static_cast<double>(y[k]) - y_ref[k]), tol)
            << label(isa, t) << " M=" << M << " m=" << m << " r=" << r << " y=" << y[k] << " ref=" << y_ref[k];
      }
    }
  }
}

void check_batch_invariance(kernels::Isa isa, DType t) {
  const int64_t n_in = n_in_for(t);
  const int64_t n_out = 70;
  const Weights w = make_weights(t, n_in, n_out, 21 + static_cast<uint64_t>(t));
  const int64_t M = 64;
  const auto x = random_x(M * n_in, 7);
  kernels::set_active_isa(isa);
  core::ThreadPool pool(2);
  std::vector<float> all(static_cast<size_t>(M * n_out)), all2(all.size()), one(static_cast<size_t>(n_out));
  kernels::matmul(w.view, x.data(), M, all.data(), nullptr);
  kernels::matmul(w.view, x.data(), M, all2.data(), &pool);
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], all2[i]) << label(isa, t) << " threads 1 vs 2, i=" << i;
  for (int64_t m : {int64_t{0}, int64_t{1}, int64_t{17}, int64_t{63}}) {
    kernels::matmul(w.view, x.data() + m * n_in, 1, one.data(), nullptr);
    for (int64_t r = 0; r < n_out; ++r) {
      ASSERT_EQ(one[static_cast<size_t>(r)], all[static_cast<size_t>(m * n_out + r)])
          << label(isa, t) << ": row " << m << " alone differs from the same row in a batch of " << M;
    }
  }
}

class MatmulTest : public ::testing::TestWithParam<std::tuple<kernels::Isa, DType>> {};

TEST_P(MatmulTest, MatchesScalarReference) {
  const auto [isa, t] = GetParam();
  if (!kernels::isa_supported(isa)) GTEST_SKIP() << "CPU lacks " << kernels::isa_name(isa);
  IsaGuard guard;
  check_against_reference(isa, t);
}

TEST_P(MatmulTest, BatchInvariant) {
  const auto [isa, t] = GetParam();
  if (!kernels::isa_supported(isa)) GTEST_SKIP() << "CPU lacks " << kernels::isa_name(isa);
  IsaGuard guard;
  check_batch_invariance(isa, t);
}

INSTANTIATE_TEST_SUITE_P(AllTypesAllIsas, MatmulTest,
                         ::testing::Combine(::testing::ValuesIn(kIsas), ::testing::ValuesIn(kTypes)),
                         [](const auto& info) {
                           return std::string(kernels::isa_name(std::get<0>(info.param))) + "_" +
                                  tensor::dtype_name(std::get<1>(info.param));
                         });

TEST(Isa, BestIsaIsSupportedAndActiveByDefault) {
  EXPECT_TRUE(kernels::isa_supported(kernels::best_isa()));
  EXPECT_TRUE(kernels::isa_supported(kernels::Isa::scalar));
  IsaGuard guard;
  kernels::set_active_isa(kernels::Isa::avx512_vnni);  // clamps to what the CPU has
  EXPECT_TRUE(kernels::isa_supported(kernels::active_isa()));
}

TEST(Isa, IsaTablesAreLinked) {
  // Each supported level really uses its own kernels (a linking mistake once made every
  // level fall back to the scalar reference silently).
  using kernels::impl::table_for;
  const auto& ref = table_for(kernels::Isa::scalar);
  for (auto isa : {kernels::Isa::avx2, kernels::Isa::avx512, kernels::Isa::avx512_vnni}) {
    if (!kernels::isa_supported(isa)) continue;  // its table is never built (SIGILL)
    const auto& t = table_for(isa);
    EXPECT_NE(t.matmul_rows[static_cast<int>(DType::f32)], ref.matmul_rows[static_cast<int>(DType::f32)])
        << kernels::isa_name(isa);
    EXPECT_NE(t.rmsnorm, ref.rmsnorm) << kernels::isa_name(isa);
    EXPECT_NE(t.attention_rows, ref.attention_rows) << kernels::isa_name(isa);
  }
  if (!kernels::isa_supported(kernels::Isa::avx512_vnni))
    GTEST_SKIP() << "CPU lacks avx512_vnni: its table is not built";
  const auto& v = table_for(kernels::Isa::avx512_vnni);
  EXPECT_EQ(v.act[static_cast<int>(DType::q8_0)], kernels::impl::ActFormat::q8);
  EXPECT_EQ(v.act[static_cast<int>(DType::q4_0)], kernels::impl::ActFormat::q8);
  EXPECT_EQ(v.act[static_cast<int>(DType::q4_k)], kernels::impl::ActFormat::q8);
  EXPECT_EQ(v.act[static_cast<int>(DType::q6_k)], kernels::impl::ActFormat::q8);
  EXPECT_NE(v.quantize_act, ref.quantize_act);
  EXPECT_NE(v.matmul_rows[static_cast<int>(DType::q8_0)],
            table_for(kernels::Isa::avx512).matmul_rows[static_cast<int>(DType::q8_0)]);
}

TEST(Isa, UnsupportedLevelGetsTheBestLevelBelow) {
  // Asking for a level the CPU lacks must not build (and run) that level's registration.
  using kernels::impl::table_for;
  for (auto isa : kIsas) {
    int below = static_cast<int>(isa);
    while (below > 0 && !kernels::isa_supported(static_cast<kernels::Isa>(below))) --below;
    EXPECT_EQ(&table_for(isa), &table_for(static_cast<kernels::Isa>(below))) << kernels::isa_name(isa);
  }
}

TEST(Isa, EveryTypeHasAKernelAtEveryLevel) {
  for (auto isa : kIsas) {
    for (auto t : kTypes) {
      EXPECT_NE(kernels::impl::table_for(isa).matmul_rows[static_cast<int>(t)], nullptr) << label(isa, t);
    }
  }
  EXPECT_TRUE(kernels::dtype_supported(DType::q4_k));
  EXPECT_TRUE(kernels::dtype_supported(DType::q6_k));
  EXPECT_TRUE(kernels::dtype_supported(DType::q5_k));
  EXPECT_TRUE(kernels::dtype_supported(DType::iq4_xs));
  EXPECT_FALSE(kernels::dtype_supported(DType::iq2_xxs));
  EXPECT_FALSE(kernels::dtype_supported(DType::tq1_0));
}

TEST(MatmulMulti, EqualsSeparateCallsOnEveryIsa) {
  // q/k/v-style: three matrices of different types and heights sharing x.
  const Weights a = make_weights(DType::q8_0, 160, 70, 1), b = make_weights(DType::f16, 160, 33, 2),
                c = make_weights(DType::q4_0, 160, 16, 3);
  core::ThreadPool pool(2);
  IsaGuard guard;
  for (auto isa : kIsas) {
    if (!kernels::isa_supported(isa)) continue;
    kernels::set_active_isa(isa);
    for (int64_t M : {1, 5, 64, 256}) {  // 256 x 160: activations quantised by the pool too
      const auto x = random_x(M * 160, 9);
      std::vector<float> ya(static_cast<size_t>(M * 70)), yb(static_cast<size_t>(M * 33)),
          yc(static_cast<size_t>(M * 16));
      std::vector<float> ra(ya.size()), rb(yb.size()), rc(yc.size());
      const kernels::WeightView* ws[3] = {&a.view, &b.view, &c.view};
      float* ys[3] = {ya.data(), yb.data(), yc.data()};
      kernels::matmul_multi(ws, ys, 3, x.data(), M, &pool);
      kernels::matmul(a.view, x.data(), M, ra.data(), nullptr);
      kernels::matmul(b.view, x.data(), M, rb.data(), nullptr);
      kernels::matmul(c.view, x.data(), M, rc.data(), nullptr);
      EXPECT_EQ(ya, ra) << kernels::isa_name(isa) << " M=" << M;
      EXPECT_EQ(yb, rb) << kernels::isa_name(isa) << " M=" << M;
      EXPECT_EQ(yc, rc) << kernels::isa_name(isa) << " M=" << M;
    }
  }
}

// Load-time repacking (kernels::pack_weights): the packed kernels give the unpacked
// kernels' results bit for bit, for every M, 1 and 2 threads, row counts that leave a
// partial tile and block counts that pad the scale region.
TEST(PackedWeights, EqualUnpackedBitForBit) {
  IsaGuard guard;
  kernels::set_active_isa(kernels::best_isa());
  core::ThreadPool pool(2);
  int n_packed_types = 0;
  for (DType t : kTypes) {
    for (const auto& [n_in, n_out] : {std::pair<int64_t, int64_t>{160, 45}, {512, 70}, {2048, 33}}) {
      if (n_in % tensor::dtype_traits(t).block_size != 0) continue;
      Weights w = make_weights(t, n_in, n_out, 31 + static_cast<uint64_t>(t));
      const int64_t nbytes = kernels::packed_bytes(w.view);
      if (nbytes == 0) continue;
      ++n_packed_types;
      core::AlignedBuffer<uint8_t> buf(static_cast<size_t>(nbytes));
      kernels::pack_weights(w.view, buf.data());
      kernels::WeightView packed = w.view;
      packed.packed = buf.data();
      for (int64_t M : kMs) {
        const auto x = random_x(M * n_in, 50 + static_cast<uint64_t>(M));
        std::vector<float> y0(static_cast<size_t>(M * n_out)), y1(y0.size()), y2(y0.size());
        kernels::matmul(w.view, x.data(), M, y0.data(), nullptr);
        kernels::matmul(packed, x.data(), M, y1.data(), nullptr);
        kernels::matmul(packed, x.data(), M, y2.data(), &pool);
        ASSERT_EQ(y1, y0) << tensor::dtype_name(t) << " n_in " << n_in << " M " << M;
        ASSERT_EQ(y2, y0) << tensor::dtype_name(t) << " n_in " << n_in << " M " << M << ", 2 threads";
      }
    }
  }
  if (kernels::best_isa() >= kernels::Isa::avx2) {
    EXPECT_GT(n_packed_types, 0);  // avx2 and avx512: Q8_0 (avx2_lanes.cpp); avx512_vnni: most types
  }
}

TEST(QuantizeAct, SimdMatchesReferenceBitForBit) {
  const auto x = random_x(32 * 20, 5);
  std::vector<int8_t> q1(x.size()), q2(x.size());
  std::vector<float> d1(20), d2(20);
  std::vector<int32_t> s1(20), s2(20);
  kernels::impl::ref_quantize_act(x.data(), 640, q1.data(), d1.data(), s1.data());
  for (auto isa : kIsas) {
    if (!kernels::isa_supported(isa)) continue;
    kernels::impl::table_for(isa).quantize_act(x.data(), 640, q2.data(), d2.data(), s2.data());
    EXPECT_EQ(q1, q2) << kernels::isa_name(isa);
    EXPECT_EQ(d1, d2) << kernels::isa_name(isa);
    EXPECT_EQ(s1, s2) << kernels::isa_name(isa);
  }
}

}  // namespace
