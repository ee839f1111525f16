// RMSNorm, SwiGLU, softmax and attention on every ISA against the scalar reference.
// Tolerances: these differ from the reference only in summation order and in the
// vector exp (a Cephes polynomial, about 1-2 ulp), so relative 1e-5 (attention: 2e-5,
// two softmax passes and a weighted sum) is a comfortable bound that still catches any
// indexing or masking error (those are O(1)).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "kernels/impl.h"
#include "kernels/kernels.h"

using namespace treespec;

namespace {

const kernels::Isa kVectorIsas[] = {kernels::Isa::avx2, kernels::Isa::avx512, kernels::Isa::avx512_vnni};

std::vector<float> rnd(int64_t n, uint64_t seed, float scale = 1.0f) {
  core::Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(rng.normal()) * scale;
  return v;
}

// |a - b| <= rel * (|b| + floor * max|b|): attention outputs are convex combinations of
// values and can cancel to ~0, so they get an absolute floor relative to the output scale.
void expect_close(const std::vector<float>& a, const std::vector<float>& b, float rel, const char* what,
                  float floor = 1e-3f) {
  ASSERT_EQ(a.size(), b.size());
  float scale = 1e-30f;
  for (float v : b) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_LE(std::fabs(a[i] - b[i]), rel * (std::fabs(b[i]) + floor * scale)) << what << " at " << i;
  }
}

// A random tree of n_rows nodes after nc committed cells: row i sees the cells of its
// ancestors-or-self (nc + node), root first. p_chain: probability that a node's parent
// is the node before it (deep chains); otherwise a uniform earlier node.
struct TreeExtras {
  std::vector<std::vector<int32_t>> extra;
  std::vector<const int32_t*> ptr;
  std::vector<int32_t> len;
};
TreeExtras tree_extras(core::Rng& rng, int64_t n_rows, int64_t nc, double p_chain) {
  TreeExtras t;
  t.extra.resize(static_cast<size_t>(n_rows));
  std::vector<int32_t> parent(static_cast<size_t>(n_rows), -1);
  for (int64_t i = 0; i < n_rows; ++i) {
    if (i > 0) {
      parent[static_cast<size_t>(i)] = p_chain > 0.0 && rng.uniform() < p_chain
                                           ? static_cast<int32_t>(i - 1)
                                           : static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(i)));
    }
    std::vector<int32_t> anc;
    for (int64_t a = i; a >= 0; a = parent[static_cast<size_t>(a)]) anc.push_back(static_cast<int32_t>(nc + a));
    t.extra[static_cast<size_t>(i)].assign(anc.rbegin(), anc.rend());
  }
  for (auto& e : t.extra) {
    t.ptr.push_back(e.data());
    t.len.push_back(static_cast<int32_t>(e.size()));
  }
  return t;
}

class OpsTest : public ::testing::TestWithParam<kernels::Isa> {
 protected:
  void SetUp() override {
    if (!kernels::isa_supported(GetParam())) GTEST_SKIP() << "CPU lacks " << kernels::isa_name(GetParam());
    t_ = &kernels::impl::table_for(GetParam());
  }
  const kernels::impl::KernelTable* t_ = nullptr;
};

TEST_P(OpsTest, Rmsnorm) {
  for (int64_t n : {1, 7, 8, 64, 77, 2048}) {
    const auto x = rnd(n, 1), w = rnd(n, 2);
    std::vector<float> y(x.size()), yr(x.size());
    t_->rmsnorm(x.data(), w.data(), y.data(), n, 1e-5f);
    kernels::impl::ref_rmsnorm(x.data(), w.data(), yr.data(), n, 1e-5f);
    expect_close(y, yr, 1e-5f, "rmsnorm");
  }
}

TEST_P(OpsTest, Swiglu) {
  for (int64_t n : {1, 13, 172, 5632}) {
    const auto g = rnd(n, 3, 4.0f), u = rnd(n, 4);
    std::vector<float> y(g.size()), yr(g.size());
    t_->swiglu(g.data(), u.data(), y.data(), n);
    kernels::impl::ref_swiglu(g.data(), u.data(), yr.data(), n);
    expect_close(y, yr, 1e-5f, "swiglu");
  }
}

TEST_P(OpsTest, Geglu) {
  for (int64_t n : {1, 13, 172, 6912}) {
    const auto g = rnd(n, 3, 4.0f), u = rnd(n, 4);
    std::vector<float> y(g.size()), yr(g.size());
    t_->geglu(g.data(), u.data(), y.data(), n);
    kernels::impl::ref_geglu(g.data(), u.data(), yr.data(), n);
    expect_close(y, yr, 1e-5f, "geglu");
  }
  // The tanh form itself, in double: gelu(1) = 0.841192, gelu(-2) = -0.0454023.
  const float g[2] = {1.0f, -2.0f}, u[2] = {1.0f, 1.0f};
  float y[2];
  t_->geglu(g, u, y, 2);
  EXPECT_NEAR(y[0], 0.841192f, 1e-6f);
  EXPECT_NEAR(y[1], -0.0454023f, 1e-6f);
}

// cap * tanh(x / cap) within 2 ulp of the cap-scaled reference, over small arguments
// (the polynomial), large ones (the exp form), saturation and both signs.
TEST_P(OpsTest, Softcap) {
  for (const float cap : {2.0f, 30.0f, 50.0f}) {
    for (int64_t n : {1, 9, 16, 100}) {
      auto x = rnd(n, 6, 3.0f * cap);
      x[0] = 0.0f;
      if (n > 4) x[1] = 1e-4f, x[2] = -0.6f * cap, x[3] = 1e6f, x[4] = -1e6f;
      auto xr = x;
      t_->softcap(x.data(), n, cap);
      kernels::impl::ref_softcap(xr.data(), n, cap);
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_NEAR(x[i], xr[i], 3e-7f * cap) << "cap " << cap << " x[" << i << "]";
        EXPECT_LE(std::fabs(x[i]), cap);
      }
      EXPECT_EQ(x[0], 0.0f);
      if (n > 4) {
        EXPECT_NEAR(x[1], 1e-4f, 1e-10f);
      }
    }
  }
}

TEST_P(OpsTest, Softmax) {
  for (int64_t n : {1, 5, 16, 33, 1000}) {
    auto x = rnd(n, 5, 6.0f);
    if (n > 3) x[2] = -INFINITY;
    auto xr = x;
    t_->softmax(x.data(), n);
    kernels::impl::ref_softmax(xr.data(), n);
    expect_close(x, xr, 1e-5f, "softmax");
    if (n > 3) {
      EXPECT_EQ(x[2], 0.0f);
    }
  }
}

// Tree-shaped extras: row i sees cells n_committed + (its ancestors incl. itself).
struct AttnCase {
  int64_t n_rows, n_head, head_dim, n_committed;
};

TEST_P(OpsTest, AttentionRowsMatchReferenceAndAreBatchInvariant) {
  for (const AttnCase c : {AttnCase{1, 1, 8, 0}, AttnCase{1, 2, 8, 37}, AttnCase{16, 2, 8, 100},
                           AttnCase{64, 2, 128, 130}, AttnCase{7, 4, 12, 65}}) {
    const int64_t n_cells = c.n_committed + c.n_rows;
    const auto q = rnd(c.n_rows * c.n_head * c.head_dim, 10);
    const auto k = rnd(n_cells * c.head_dim, 11), v = rnd(n_cells * c.head_dim, 12);
    core::Rng rng(13);
    TreeExtras tx = tree_extras(rng, c.n_rows, c.n_committed, 0.0);
    auto& ptr = tx.ptr;
    auto& len = tx.len;
    const int64_t ld = c.n_head * c.head_dim;
    std::vector<float> out(q.size()), out_ref(q.size()), one(q.size());
    std::vector<float> scratch(static_cast<size_t>(kernels::attention_scratch_floats(c.n_rows, c.n_head, n_cells)));
    kernels::AttentionRows a;
    a.q = q.data();
    a.ldq = ld;
    a.out = out.data();
    a.ldo = ld;
    a.n_rows = c.n_rows;
    a.n_head = c.n_head;
    a.head_dim = c.head_dim;
    a.k = kernels::KvRows::contiguous(k.data(), c.head_dim);
    a.v = kernels::KvRows::contiguous(v.data(), c.head_dim);
    a.n_committed = c.n_committed;
    a.extra = ptr.data();
    a.n_extra = len.data();
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    a.scratch = scratch.data();
    t_->attention_rows(a);
    a.out = out_ref.data();
    kernels::impl::ref_attention_rows(a);
    expect_close(out, out_ref, 2e-5f, "attention", 0.05f);
    // Each row alone gives the same bits as inside the batch.
    for (int64_t i = 0; i < c.n_rows; ++i) {
      kernels::AttentionRows b = a;
      b.q = q.data() + i * ld;
      b.out = one.data() + i * ld;
      b.n_rows = 1;
      b.extra = ptr.data() + i;
      b.n_extra = len.data() + i;
      t_->attention_rows(b);
    }
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], one[i]) << "attention row alone vs batch, index " << i;
  }
}

// The lossless contract at the kernel level: a tree row at depth d over n committed
// cells must give the bits of the one-row decode step that reaches the same context,
// i.e. n + d committed cells (the prefix, then the row's ancestors in order) and the row
// itself as the only extra cell. The two differ only in where the committed part ends,
// so every chunk / chain boundary of the value sum must follow the logical cell index.
// Committed lengths straddle the 128-cell chunks; deep chains cross them inside the tree.
//
// With a sliding window (a row at position p sees positions > p - window; whole 128-cell
// chunks before it are skipped) and with soft-capping the same must hold, and the rows
// must match the reference.
struct WindowCase {
  int64_t window;
  float softcap;
};

TEST_P(OpsTest, AttentionTreeRowEqualsOneRowStepOverTheSameContext) {
  core::Rng rng(77);
  for (const WindowCase wc : {WindowCase{0, 0.0f}, WindowCase{5, 0.0f}, WindowCase{150, 2.0f}, WindowCase{0, 3.0f}}) {
    for (const int64_t hd : {int64_t{8}, int64_t{128}, int64_t{12}}) {
      for (const int64_t nc : {int64_t{0}, int64_t{1}, int64_t{37}, int64_t{120}, int64_t{127}, int64_t{128},
                               int64_t{129}, int64_t{300}}) {
        const int64_t n_rows = 64, n_head = 2;
        const int64_t n_cells = nc + n_rows;
        const auto q = rnd(n_rows * n_head * hd, 20 + static_cast<uint64_t>(nc));
        const auto k = rnd(n_cells * hd, 21), v = rnd(n_cells * hd, 22);
        // Random tree with some long chains (parent = i - 1 half of the time).
        TreeExtras tx = tree_extras(rng, n_rows, nc, 0.5);
        const auto& extra = tx.extra;
        auto& ptr = tx.ptr;
        auto& len = tx.len;
        const int64_t ld = n_head * hd;
        std::vector<float> out(q.size());
        std::vector<float> scratch(static_cast<size_t>(kernels::attention_scratch_floats(n_rows, n_head, n_cells)));
        kernels::AttentionRows a;
        a.q = q.data();
        a.ldq = ld;
        a.out = out.data();
        a.ldo = ld;
        a.n_rows = n_rows;
        a.n_head = n_head;
        a.head_dim = hd;
        a.k = kernels::KvRows::contiguous(k.data(), hd);
        a.v = kernels::KvRows::contiguous(v.data(), hd);
        a.n_committed = nc;
        a.extra = ptr.data();
        a.n_extra = len.data();
        a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
        a.scratch = scratch.data();
        a.softcap = wc.softcap;
        std::vector<int64_t> begin(static_cast<size_t>(n_rows));  // position nc + depth
        for (int64_t i = 0; i < n_rows; ++i)
          begin[static_cast<size_t>(i)] = std::max<int64_t>(0, nc + len[static_cast<size_t>(i)] - wc.window);
        if (wc.window > 0) a.window_begin = begin.data();
        t_->attention_rows(a);
        if (wc.window > 0 || wc.softcap > 0.0f) {
          std::vector<float> ref(q.size());
          kernels::AttentionRows r = a;
          r.out = ref.data();
          kernels::impl::ref_attention_rows(r);
          expect_close(out, ref, 2e-5f, "windowed / soft-capped attention", 0.05f);
        }
        for (int64_t i = 0; i < n_rows; ++i) {
          const auto& ex = extra[static_cast<size_t>(i)];
          const int64_t nc2 = nc + static_cast<int64_t>(ex.size()) - 1;  // prefix + ancestors, committed
          std::vector<float> k2(static_cast<size_t>((nc2 + 1) * hd)), v2(k2.size());
          for (int64_t c = 0; c <= nc2; ++c) {
            const int64_t src = c < nc ? c : ex[static_cast<size_t>(c - nc)];
            std::copy_n(k.begin() + src * hd, hd, k2.begin() + c * hd);
            std::copy_n(v.begin() + src * hd, hd, v2.begin() + c * hd);
          }
          const int32_t self = static_cast<int32_t>(nc2);
          const int32_t* self_ptr = &self;
          const int32_t one_len = 1;
          std::vector<float> one(static_cast<size_t>(ld));
          std::vector<float> sc2(static_cast<size_t>(kernels::attention_scratch_floats(1, n_head, nc2 + 1)));
          kernels::AttentionRows b = a;
          b.q = q.data() + i * ld;
          b.out = one.data();
          b.n_rows = 1;
          b.k = kernels::KvRows::contiguous(k2.data(), hd);
          b.v = kernels::KvRows::contiguous(v2.data(), hd);
          b.n_committed = nc2;
          b.extra = &self_ptr;
          b.n_extra = &one_len;
          b.scratch = sc2.data();
          const int64_t begin2 = std::max<int64_t>(0, nc2 + 1 - wc.window);
          if (wc.window > 0) b.window_begin = &begin2;
          t_->attention_rows(b);
          for (int64_t j = 0; j < ld; ++j) {
            ASSERT_EQ(out[static_cast<size_t>(i * ld + j)], one[static_cast<size_t>(j)])
                << "head_dim " << hd << ", " << nc << " committed: tree row " << i << " (depth " << ex.size() - 1
                << ") differs from the one-row step over the same context at " << j << " (window " << wc.window
                << ", softcap " << wc.softcap << ")";
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, OpsTest, ::testing::ValuesIn(kVectorIsas),
                         [](const auto& info) { return std::string(kernels::isa_name(info.param)); });

TEST(Ops, AttentionRowWrapperMatchesReference) {
  // The public one-row entry point (GQA, n_head heads over n_head_kv KV heads).
  const int64_t n_head = 8, n_kv = 4, hd = 8, n_cells = 50, n_c = 40;
  const auto q = rnd(n_head * hd, 1), k = rnd(n_kv * n_cells * hd, 2), v = rnd(n_kv * n_cells * hd, 3);
  const std::vector<int32_t> extra = {40, 42, 45};
  std::vector<float> scratch(64), out(q.size()), ref(q.size());
  kernels::attention_row(q.data(), k.data(), v.data(), n_head, n_kv, hd, n_cells, n_c, extra.data(), 3, 0.35f,
                         scratch.data(), out.data());
  for (int64_t h = 0; h < n_head; ++h) {
    const int64_t g = h / 2;
    std::vector<float> s;
    for (int64_t t = 0; t < n_c + 3; ++t) {
      const int64_t cell = t < n_c ? t : extra[static_cast<size_t>(t - n_c)];
      float d = 0;
      for (int64_t i = 0; i < hd; ++i)
        d += q[static_cast<size_t>(h * hd + i)] * k[static_cast<size_t>((g * n_cells + cell) * hd + i)];
      s.push_back(d * 0.35f);
    }
    kernels::impl::ref_softmax(s.data(), static_cast<int64_t>(s.size()));
    for (int64_t i = 0; i < hd; ++i) {
      float o = 0;
      for (int64_t t = 0; t < n_c + 3; ++t) {
        const int64_t cell = t < n_c ? t : extra[static_cast<size_t>(t - n_c)];
        o += s[static_cast<size_t>(t)] * v[static_cast<size_t>((g * n_cells + cell) * hd + i)];
      }
      ref[static_cast<size_t>(h * hd + i)] = o;
    }
  }
  expect_close(out, ref, 2e-5f, "attention_row", 0.05f);
}

TEST(Ops, MeasureReadBandwidthIsPositive) {
  const double gbs = kernels::measure_read_bandwidth(nullptr, size_t{8} << 20, 2);
  EXPECT_GT(gbs, 0.1);
  EXPECT_TRUE(std::isfinite(gbs));
}

}  // namespace
