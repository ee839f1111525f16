#include "train/expand_heads.h"

#include <fmt/format.h>

#include <cmath>

#include "core/rng.h"
#include "drafters/eagle/eagle_layer.h"
#include "drafters/propd/heads_file.h"
#include "gguf/gguf.h"
#include "model/arch.h"
#include "model/expand.h"
#include "model/model.h"
#include "treespec/status.h"

namespace treespec::train {

using drafters::MedusaHeads;
using drafters::MedusaHeadsInfo;
using drafters::output_matrix_hash;
using drafters::PruneCalibration;
using drafters::PruneHead;
using drafters::PruneHeadSet;
using drafters::write_heads_file;

namespace {

// Dequantised rows of a projection: [n_out, n_in] f32.
std::vector<float> rows_f32(const model::Linear& w) {
  std::vector<float> out(static_cast<size_t>(w.n_out()) * static_cast<size_t>(w.n_in()));
  w.dequantize(out.data());
  return out;
}

float rms(const std::vector<float>& v) {
  double s = 0.0;
  for (float x : v) s += static_cast<double>(x) * x;
  return v.empty() ? 0.0f : static_cast<float>(std::sqrt(s / static_cast<double>(v.size())));
}

// src [n_out, n] -> [n_out_new, N]: the source block at the top left; rows < n_out copy
// (filler on the padded columns), rows >= n_out zero on columns < n_live (they must
// output 0) and filler elsewhere. Filler only ever multiplies an exact zero.
std::vector<float> widen(const std::vector<float>& src, int64_t n_out, int64_t n, int64_t n_out_new, int64_t N,
                         core::Rng& rng, float filler_std) {
  std::vector<float> dst(static_cast<size_t>(n_out_new) * static_cast<size_t>(N));
  auto filler = [&] { return static_cast<float>(rng.normal()) * filler_std; };
  for (int64_t o = 0; o < n_out_new; ++o) {
    float* d = dst.data() + o * N;
    for (int64_t i = 0; i < N; ++i) {
      if (o < n_out && i < n) d[i] = src[static_cast<size_t>(o * n + i)];
      else if (o >= n_out && i < n) d[i] = 0.0f;
      else d[i] = filler();
    }
  }
  return dst;
}

}  // namespace

ExpandedHeads expand_heads(const MedusaHeads& medusa, const PruneHeadSet* prune, int32_t n_embd, int32_t n_layer,
                           const std::vector<int32_t>& real_layer_pos, const std::string& output_hash, uint64_t seed) {
  const auto& in = medusa.info();
  const int64_t n = in.n_embd, N = n_embd, V = in.n_vocab;
  if (N < n)
    throw InvalidArgument(fmt::format("expand heads: the expanded width {} is smaller than the heads' {}", N, n));
  if (real_layer_pos.size() != static_cast<size_t>(in.base_n_layer)) {
    throw InvalidArgument(fmt::format("expand heads: the layer map has {} entries but the heads' base has {} layers",
                                      real_layer_pos.size(), in.base_n_layer));
  }
  for (size_t l = 0; l < real_layer_pos.size(); ++l) {
    if (real_layer_pos[l] < 0 || real_layer_pos[l] >= n_layer ||
        (l > 0 && real_layer_pos[l] <= real_layer_pos[l - 1])) {
      throw InvalidArgument(fmt::format("expand heads: layer map entry {} = {} is not increasing within 0..{}", l,
                                        real_layer_pos[l], n_layer - 1));
    }
  }
  core::Rng rng(seed ^ 0x68656164735f6578ull);
  ExpandedHeads out;
  // Medusa heads.
  MedusaHeadsInfo info = in;
  info.n_embd = n_embd;
  info.hidden_layer = n_layer;
  info.base_n_layer = n_layer;
  info.base_output_hash = output_hash;
  std::vector<std::vector<std::vector<float>>> bw(static_cast<size_t>(in.n_heads)), bb(static_cast<size_t>(in.n_heads));
  std::vector<std::vector<float>> ow;
  for (int32_t k = 0; k < in.n_heads; ++k) {
    const auto& hd = medusa.head(k);
    for (const auto& b : hd.blocks) {
      const auto w = rows_f32(b.w);
      bw[static_cast<size_t>(k)].push_back(widen(w, n, n, N, N, rng, rms(w)));
      std::vector<float> bias(static_cast<size_t>(N), 0.0f);
      std::copy(b.b.begin(), b.b.end(), bias.begin());
      bb[static_cast<size_t>(k)].push_back(std::move(bias));
    }
    if (in.shared_output) continue;  // the expanded model's own output matrix serves them
    const auto o = rows_f32(hd.out);
    ow.push_back(widen(o, V, n, V, N, rng, rms(o)));
  }
  out.medusa = MedusaHeads::from_f32(std::move(info), std::move(bw), std::move(bb), std::move(ow));

  if (prune == nullptr) return out;
  if (prune->n_embd != n || prune->n_vocab != V || prune->base_n_layer != in.base_n_layer) {
    throw InvalidArgument("expand heads: the prune heads and the Medusa heads were made for different models");
  }
  const int32_t L0 = prune->base_n_layer;
  // Expanded layer of "after l source layers" (l >= 1): just after source layer l - 1.
  auto map_layer = [&](int32_t l) { return l <= 0 ? 0 : real_layer_pos[static_cast<size_t>(l - 1)] + 1; };
  auto set = std::make_shared<PruneHeadSet>();
  set->n_embd = n_embd;
  set->n_vocab = static_cast<int32_t>(V);
  set->base_n_layer = n_layer;
  set->base_output_hash = output_hash;
  set->source = "<expanded>";
  const PruneCalibration& c0 = prune->calib;
  PruneCalibration& c = set->calib;
  c = c0;
  c.head_layers.clear();
  c.head_recall.clear();
  c.default_layer = c0.default_layer > 0 ? map_layer(c0.default_layer) : 0;
  if (c0.has_lens()) {
    // Row l' of the expanded table = the source row of the number of real layers below l'.
    c.lens_recall.assign(static_cast<size_t>(n_layer) * c0.top_k, 1.0f);
    for (int32_t lp = 0; lp < n_layer; ++lp) {
      int32_t below = 0;
      while (below < L0 && real_layer_pos[static_cast<size_t>(below)] < lp) ++below;
      if (below >= c0.lens_layers()) continue;  // past every real layer: the final state itself
      for (int32_t k = 0; k < c0.top_k; ++k) {
        c.lens_recall[static_cast<size_t>(lp * c0.top_k + k)] =
            c0.lens_recall[static_cast<size_t>(below * c0.top_k + k)];
      }
    }
  }
  for (size_t i = 0; i < c0.head_layers.size(); ++i) {
    const int32_t l = c0.head_layers[i];
    const PruneHead& h = *prune->heads.at(l);
    std::vector<std::vector<float>> hw, hb;
    for (int32_t r = 0; r < h.n_blocks(); ++r) {
      const auto w = rows_f32(h.block(r).w);
      hw.push_back(widen(w, n, n, N, N, rng, rms(w)));
      std::vector<float> bias(static_cast<size_t>(N), 0.0f);
      std::copy(h.block(r).b.begin(), h.block(r).b.end(), bias.begin());
      hb.push_back(std::move(bias));
    }
    const int32_t nl = map_layer(l);
    std::vector<float> ow;  // shared heads: none, the expanded model's output serves them
    if (!h.shared_output()) {
      const auto o = rows_f32(h.out());
      ow = widen(o, V, n, V, N, rng, rms(o));
    }
    set->heads[nl] =
        PruneHead::from_f32(nl, n_embd, static_cast<int32_t>(V), std::move(hw), std::move(hb), std::move(ow));
    c.head_layers.push_back(nl);
    if (!c0.head_recall.empty()) {
      c.head_recall.insert(c.head_recall.end(), c0.head_recall.begin() + static_cast<std::ptrdiff_t>(i * c0.top_k),
                           c0.head_recall.begin() + static_cast<std::ptrdiff_t>((i + 1) * c0.top_k));
    }
  }
  out.prune = std::move(set);
  return out;
}

void expand_heads_file(const std::string& in, const model::Model& expanded, const std::vector<int32_t>& real_layer_pos,
                       const std::string& out, uint64_t seed) {
  std::shared_ptr<const gguf::GgufFile> f(gguf::GgufFile::open(in));
  const auto medusa = MedusaHeads::from_gguf(f);
  std::shared_ptr<const PruneHeadSet> prune;
  if (PruneHeadSet::present_in(*f)) prune = PruneHeadSet::from_gguf(f);
  const auto& hp = expanded.hparams();
  if (hp.n_vocab != medusa->n_vocab()) {
    throw InvalidArgument(fmt::format("expand heads: '{}' has a vocabulary of {} but the expanded model '{}' has {}",
                                      in, medusa->n_vocab(), expanded.gguf().path(), hp.n_vocab));
  }
  const auto e =
      expand_heads(*medusa, prune.get(), hp.n_embd, hp.n_layer, real_layer_pos, output_matrix_hash(expanded), seed);
  write_heads_file(out, *e.medusa, e.prune.get());
}

void expand_eagle_file(const std::string& in, const model::Model& expanded, const std::string& out, uint64_t seed) {
  const auto layer = drafters::EagleLayer::load(in);
  const auto& hp = expanded.hparams();
  if (layer->info().n_vocab != hp.n_vocab) {
    throw InvalidArgument(
        fmt::format("expand: EAGLE layer '{}' has a vocabulary of {} but the expanded model '{}' has {}", in,
                    layer->info().n_vocab, expanded.gguf().path(), hp.n_vocab));
  }
  const model::ArchTraits* arch = model::find_arch(hp.arch);
  if (arch != nullptr && arch->embd_scale) {
    throw Unsupported(fmt::format(
        "expand: widening an EAGLE layer for a {} model is not supported (its embedding scale grows with the width)",
        hp.arch));
  }
  using gguf::Value;
  model::ExpandOptions o;
  o.n_embd = hp.n_embd;
  o.n_ff = hp.n_ff;
  o.n_layer = 1;
  o.n_head = hp.n_head;
  o.head_dim = hp.head_dim;
  o.seed = seed ^ 0x6561676c655f6578ull;
  o.metadata = {{drafters::kEagleKeyBaseLayers, Value::u32(static_cast<uint32_t>(hp.n_layer))},
                {drafters::kEagleKeyBaseHash, Value::string(output_matrix_hash(expanded))},
                {drafters::kEagleKeyBaseName, Value::string(hp.name)}};
  model::expand_gguf(in, out, o);
}

}  // namespace treespec::train
