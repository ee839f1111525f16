// The paged KV cache: blocks taken and returned as sequences grow and shrink, rows stored
// in each cache type and read back exactly, commits across block boundaries, growth, and
// attention over scattered blocks giving the bits of the same rows stored contiguously.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "tensor/quant.h"
#include "treespec/status.h"

using namespace treespec;
using tensor::DType;

namespace {

kv::KvShape shape(int32_t n_seq, int32_t n_cells, int32_t pool, DType t = DType::f32, int32_t head_dim = 32) {
  kv::KvShape s;
  s.n_layer = 2;
  s.n_head_kv = 2;
  s.head_dim = head_dim;
  s.n_seq = n_seq;
  s.n_cells = n_cells;
  s.n_pool_cells = pool;
  s.type_k = t;
  s.type_v = t;
  return s;
}

std::vector<float> random_row(core::Rng& rng, size_t n) {
  std::vector<float> r(n);
  for (float& x : r) x = static_cast<float>(rng.normal());
  return r;
}

// What storing x in type t and reading it back gives (the reference round trip).
std::vector<float> round_trip(DType t, const std::vector<float>& x, int64_t head_dim) {
  std::vector<uint8_t> buf(static_cast<size_t>(tensor::row_bytes(t, head_dim)));
  std::vector<float> y(x.size());
  for (size_t h = 0; h < x.size() / static_cast<size_t>(head_dim); ++h) {
    tensor::quantize_row(t, x.data() + h * head_dim, buf.data(), head_dim);
    tensor::dequantize_row(t, buf.data(), y.data() + h * head_dim, head_dim);
  }
  return y;
}

std::vector<int32_t> iota(int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

constexpr DType kTypes[] = {DType::f32, DType::f16, DType::bf16, DType::q8_0};

}  // namespace

TEST(KvCache, BlocksAreTakenAsSequencesGrowAndReturnedWhenTheyShrink) {
  kv::KvCache kv(shape(3, 64, 96));  // 6 blocks of 16 cells, each sequence at most 64 cells
  ASSERT_EQ(kv.n_blocks(), 6);
  EXPECT_EQ(kv.n_free_blocks(), 6);
  EXPECT_EQ(kv.usage(), 0.0);
  ASSERT_TRUE(kv.reserve(0, 20).ok());
  EXPECT_EQ(kv.n_free_blocks(), 4);
  EXPECT_DOUBLE_EQ(kv.usage(), 2.0 / 6.0);
  ASSERT_TRUE(kv.commit(0, iota(20)).ok());
  EXPECT_EQ(kv.n_past(0), 20);
  EXPECT_EQ(kv.n_free_blocks(), 4);
  EXPECT_EQ(kv.n_available(0), 44);  // its own limit, not the pool, bounds it
  ASSERT_TRUE(kv.reserve(1, 64).ok());
  ASSERT_TRUE(kv.commit(1, iota(64)).ok());
  EXPECT_EQ(kv.n_free_blocks(), 0);
  EXPECT_EQ(kv.n_available(0), 12);  // the rest of its second block
  // The pool is empty: a third sequence cannot start, and nothing changes.
  const Status full = kv.reserve(2, 1);
  EXPECT_EQ(full.code(), StatusCode::kv_full) << full.to_string();
  EXPECT_NE(full.message().find("free blocks"), std::string::npos) << full.message();
  EXPECT_EQ(kv.n_free_blocks(), 0);
  // A sequence's own limit is context_full, whatever the pool holds.
  EXPECT_EQ(kv.reserve(0, 45).code(), StatusCode::context_full);
  // Truncating returns the blocks past the kept cells.
  kv.truncate(1, 10);
  EXPECT_EQ(kv.n_free_blocks(), 3);
  // The tree rows a commit did not keep go back to the pool.
  ASSERT_TRUE(kv.reserve(2, 40).ok());
  EXPECT_EQ(kv.n_free_blocks(), 0);
  ASSERT_TRUE(kv.commit(2, std::vector<int32_t>{0, 5}).ok());
  EXPECT_EQ(kv.n_past(2), 2);
  EXPECT_EQ(kv.n_free_blocks(), 2);
  kv.clear(0);
  kv.clear(1);
  kv.clear(2);
  EXPECT_EQ(kv.n_free_blocks(), 6);
  EXPECT_EQ(kv.usage(), 0.0);
}

TEST(KvCache, RowsReadBackAsTheirTypeStoresThem) {
  for (DType t : kTypes) {
    SCOPED_TRACE(tensor::dtype_name(t));
    kv::KvCache kv(shape(2, 48, 0, t));
    core::Rng rng(5);
    const size_t row = 2 * 32;
    // Two sequences taking blocks in turn, so each one's blocks are not adjacent.
    std::vector<std::vector<float>> ks[2], vs[2];
    for (int32_t c = 0; c < 40; ++c) {
      for (int32_t s = 0; s < 2; ++s) {
        ASSERT_TRUE(kv.reserve(s, c + 1).ok());
        for (int32_t l = 0; l < 2; ++l) {
          ks[s].push_back(random_row(rng, row));
          vs[s].push_back(random_row(rng, row));
          kv.write_row(l, s, c, ks[s].back().data(), vs[s].back().data());
        }
      }
    }
    std::vector<float> k(row), v(row);
    for (int32_t s = 0; s < 2; ++s) {
      for (int32_t c = 0; c < 40; ++c) {
        for (int32_t l = 0; l < 2; ++l) {
          kv.read_row(l, s, c, k.data(), v.data());
          const size_t i = static_cast<size_t>(c * 2 + l);
          ASSERT_EQ(k, round_trip(t, ks[s][i], 32)) << "K of seq " << s << " cell " << c << " layer " << l;
          ASSERT_EQ(v, round_trip(t, vs[s][i], 32)) << "V of seq " << s << " cell " << c << " layer " << l;
          if (t == DType::f32) {
            ASSERT_EQ(k, ks[s][i]);
          }
        }
      }
    }
  }
}

TEST(KvCache, CommitMovesTheAcceptedCellsAcrossBlocks) {
  for (DType t : {DType::f32, DType::q8_0}) {
    SCOPED_TRACE(tensor::dtype_name(t));
    kv::KvCache kv(shape(1, 128, 0, t));
    core::Rng rng(9);
    const size_t row = 2 * 32;
    ASSERT_TRUE(kv.reserve(0, 13).ok());
    ASSERT_TRUE(kv.commit(0, iota(13)).ok());  // n_past 13: the tree starts inside a block
    ASSERT_TRUE(kv.reserve(0, 40).ok());
    std::vector<std::vector<float>> k(40), v(40);
    for (int32_t node = 0; node < 40; ++node) {
      k[static_cast<size_t>(node)] = random_row(rng, row);
      v[static_cast<size_t>(node)] = random_row(rng, row);
      for (int32_t l = 0; l < 2; ++l)
        kv.write_row(l, 0, 13 + node, k[static_cast<size_t>(node)].data(), v[static_cast<size_t>(node)].data());
    }
    const std::vector<int32_t> path = {0, 3, 17, 18, 33};
    ASSERT_TRUE(kv.commit(0, path).ok());
    EXPECT_EQ(kv.n_past(0), 18);
    EXPECT_EQ(kv.n_free_blocks(), kv.n_blocks() - 2);  // cells 0..17: two blocks kept
    std::vector<float> kr(row), vr(row);
    for (size_t i = 0; i < path.size(); ++i) {
      for (int32_t l = 0; l < 2; ++l) {
        kv.read_row(l, 0, 13 + static_cast<int32_t>(i), kr.data(), vr.data());
        ASSERT_EQ(kr, round_trip(t, k[static_cast<size_t>(path[i])], 32)) << "path entry " << i;
        ASSERT_EQ(vr, round_trip(t, v[static_cast<size_t>(path[i])], 32)) << "path entry " << i;
      }
    }
  }
}

TEST(KvCache, GrowKeepsEveryStoredCell) {
  kv::KvCache kv(shape(1, 20, 0, DType::f16));
  core::Rng rng(3);
  ASSERT_TRUE(kv.reserve(0, 20).ok());
  std::vector<std::vector<float>> k, v;
  for (int32_t c = 0; c < 20; ++c) {
    k.push_back(random_row(rng, 64));
    v.push_back(random_row(rng, 64));
    kv.write_row(1, 0, c, k.back().data(), v.back().data());
  }
  ASSERT_TRUE(kv.commit(0, iota(20)).ok());
  EXPECT_EQ(kv.reserve(0, 1).code(), StatusCode::context_full);
  kv.grow(100);
  EXPECT_EQ(kv.n_cells(), 100);
  EXPECT_EQ(kv.n_blocks(), 7);
  ASSERT_TRUE(kv.reserve(0, 80).ok());
  std::vector<float> kr(64), vr(64);
  for (int32_t c = 0; c < 20; ++c) {
    kv.read_row(1, 0, c, kr.data(), vr.data());
    ASSERT_EQ(kr, round_trip(DType::f16, k[static_cast<size_t>(c)], 32)) << c;
    ASSERT_EQ(vr, round_trip(DType::f16, v[static_cast<size_t>(c)], 32)) << c;
  }
}

// A prefix of 37 committed cells (two whole blocks and 5 cells) serves a second
// sequence: the whole blocks are shared (written by nobody), the partial one is copied
// into a block of its own, every cell of every layer reads back the same bits, and the
// blocks come back when both let go. With no free block for the copy: kv_full.
TEST(KvCache, AdoptedPrefixSharesWholeBlocksAndCopiesThePartialOne) {
  for (DType t : kTypes) {
    kv::KvCache kv(shape(2, 64, 96, t));  // 6 blocks
    core::Rng rng(11);
    ASSERT_TRUE(kv.reserve(0, 40).ok());
    for (int32_t l = 0; l < 2; ++l) {
      for (int32_t c = 0; c < 40; ++c) {
        const auto k = random_row(rng, 64), v = random_row(rng, 64);
        kv.write_row(l, 0, c, k.data(), v.data());
      }
    }
    ASSERT_TRUE(kv.commit(0, iota(40)).ok());
    const std::vector<int32_t> blocks = kv.prefix_blocks(0, 37);
    ASSERT_EQ(blocks.size(), 3u);
    ASSERT_TRUE(kv.adopt_prefix(1, blocks, 37).ok());
    EXPECT_EQ(kv.n_past(1), 37);
    EXPECT_EQ(kv.n_free_blocks(), 2) << "3 blocks of sequence 0 and one copied block";
    std::vector<float> k0(64), v0(64), k1(64), v1(64);
    for (int32_t l = 0; l < 2; ++l) {
      for (int32_t c = 0; c < 37; ++c) {
        kv.read_row(l, 0, c, k0.data(), v0.data());
        kv.read_row(l, 1, c, k1.data(), v1.data());
        ASSERT_EQ(k0, k1) << kv::cache_type_name(t) << " layer " << l << " cell " << c;
        ASSERT_EQ(v0, v1) << kv::cache_type_name(t) << " layer " << l << " cell " << c;
      }
    }
    // Sequence 1 writes after its prefix, into its own block (write_row would assert on a
    // shared one), and sequence 0's cells stay as they were.
    ASSERT_TRUE(kv.reserve(1, 3).ok());
    const auto k = random_row(rng, 64), v = random_row(rng, 64);
    kv.write_row(0, 1, 37, k.data(), v.data());
    kv.read_row(0, 0, 37, k0.data(), v0.data());
    EXPECT_NE(k0, round_trip(t, k, 32));
    kv.clear(0);
    EXPECT_EQ(kv.n_free_blocks(), 3) << "the shared whole blocks stay with sequence 1";
    kv.clear(1);
    EXPECT_EQ(kv.n_free_blocks(), 6);
  }
  kv::KvCache kv(shape(2, 96, 48));  // 3 blocks
  ASSERT_TRUE(kv.reserve(0, 20).ok());
  ASSERT_TRUE(kv.commit(0, iota(20)).ok());
  EXPECT_EQ(kv.adopt_prefix(1, kv.prefix_blocks(0, 20), 20).code(), StatusCode::ok);
  kv.clear(1);
  ASSERT_TRUE(kv.reserve(0, 28).ok());  // the pool is full now
  EXPECT_EQ(kv.adopt_prefix(1, kv.prefix_blocks(0, 20), 20).code(), StatusCode::kv_full);
  EXPECT_EQ(kv.n_past(1), 0);
  ASSERT_TRUE(kv.adopt_prefix(1, kv.prefix_blocks(0, 16), 16).ok()) << "whole blocks need no free block";
}

TEST(KvCache, BadTypesAndShapesAreClearErrors) {
  EXPECT_EQ(kv::parse_cache_type("Q8_0", "-ctk"), DType::q8_0);
  EXPECT_EQ(kv::parse_cache_type("f16", "-ctk"), DType::f16);
  try {
    (void)kv::parse_cache_type("q4", "-ctv/--cache-type-v");
    FAIL() << "q4 accepted";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("-ctv/--cache-type-v"), std::string::npos) << m;
    EXPECT_NE(m.find("'q4'"), std::string::npos) << m;
    EXPECT_NE(m.find("q8_0"), std::string::npos) << m;
  }
  // q8_0 rows are blocks of 32 values.
  try {
    kv::KvCache kv(shape(1, 16, 0, DType::q8_0, 8));
    FAIL() << "q8_0 with head size 8 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kv::KvCache(shape(1, 16, 0, DType::q4_0)), InvalidArgument);
  EXPECT_THROW(kv::KvCache(shape(1, 0, 0)), InvalidArgument);
  // The pool's size follows the type: f16 is half of f32, q8_0 34/32 bytes per value.
  EXPECT_EQ(kv::KvCache::required_bytes(shape(1, 64, 0, DType::f16)) * 2, kv::KvCache::required_bytes(shape(1, 64, 0)));
  EXPECT_EQ(kv::KvCache::required_bytes(shape(1, 64, 0, DType::q8_0)), uint64_t{2} * 64 * 2 * 2 * 34);
}

// Attention reads a cell through the block table; the bits must equal those of the same
// rows laid out contiguously, in every cache type and at every ISA level.
TEST(KvCache, AttentionOverScatteredBlocksEqualsContiguousRows) {
  constexpr int32_t kCells = 150;  // committed cells: crosses the kernels' 128-cell chunks
  constexpr int64_t hd = 32, group = 2;
  for (DType t : kTypes) {
    SCOPED_TRACE(tensor::dtype_name(t));
    kv::KvCache kv(shape(2, 200, 0, t));
    core::Rng rng(11);
    for (int32_t c = 0; c < kCells + 3; ++c) {
      for (int32_t s = 0; s < 2; ++s) {  // interleaved: sequence 0's blocks are scattered
        ASSERT_TRUE(kv.reserve(s, c + 1).ok());
        for (int32_t l = 0; l < 2; ++l) {
          const auto k = random_row(rng, 64), v = random_row(rng, 64);
          kv.write_row(l, s, c, k.data(), v.data());
        }
      }
    }
    // Contiguous f32 copies of sequence 0's layer 1, KV head 1.
    std::vector<float> kc(static_cast<size_t>((kCells + 3) * hd)), vc(kc.size()), kr(64), vr(64);
    for (int32_t c = 0; c < kCells + 3; ++c) {
      kv.read_row(1, 0, c, kr.data(), vr.data());
      std::copy_n(kr.begin() + hd, hd, kc.begin() + c * hd);
      std::copy_n(vr.begin() + hd, hd, vc.begin() + c * hd);
    }
    // Three tree rows: a chain over the committed prefix.
    const std::vector<std::vector<int32_t>> extra = {{kCells}, {kCells, kCells + 1}, {kCells, kCells + 1, kCells + 2}};
    std::vector<const int32_t*> ptr;
    std::vector<int32_t> len;
    for (const auto& e : extra) {
      ptr.push_back(e.data());
      len.push_back(static_cast<int32_t>(e.size()));
    }
    const auto q = random_row(rng, 3 * group * hd);
    for (int isa = 0; isa < kernels::kNumIsas; ++isa) {
      if (!kernels::isa_supported(static_cast<kernels::Isa>(isa))) continue;
      kernels::set_active_isa(static_cast<kernels::Isa>(isa));
      SCOPED_TRACE(kernels::isa_name(static_cast<kernels::Isa>(isa)));
      std::vector<float> scratch(static_cast<size_t>(kernels::attention_scratch_floats(3, group, kCells + 3)));
      std::vector<float> paged(q.size()), flat(q.size());
      kernels::AttentionRows a;
      a.q = q.data();
      a.ldq = group * hd;
      a.ldo = group * hd;
      a.n_rows = 3;
      a.n_head = group;
      a.head_dim = hd;
      a.n_committed = kCells;
      a.extra = ptr.data();
      a.n_extra = len.data();
      a.scale = 0.17f;
      a.scratch = scratch.data();
      a.out = paged.data();
      a.k = kv.k_rows(1, 0, 1);
      a.v = kv.v_rows(1, 0, 1);
      kernels::attention_rows(a);
      a.out = flat.data();
      a.k = kernels::KvRows::contiguous(kc.data(), hd);
      a.v = kernels::KvRows::contiguous(vc.data(), hd);
      kernels::attention_rows(a);
      ASSERT_EQ(paged, flat);
    }
    kernels::set_active_isa(kernels::best_isa());
  }
}
