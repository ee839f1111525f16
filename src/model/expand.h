// Function-preserving expansion of a GGUF model of any supported architecture (`treespec
// expand`): wider residual stream, more attention heads (optionally a larger head_dim),
// a wider FFN and more layers, such that the expanded model computes the same function
// as the source.
// Used to benchmark in the memory-bound regime with the predictions of a real model.
// Construction and exactness argument: docs/expand.md.
//
// The placement helpers (AxisMap, place_matrix, scale_norm_gain) are generic so other
// weight files that read or write the residual stream (e.g. Medusa heads) can be widened
// with the same residual map later (see docs/expand.md).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "gguf/gguf.h"
#include "tensor/dtype.h"

namespace treespec::model {

struct Hparams;

struct ExpandOptions {
  int32_t n_embd = 0;    // new residual width (>= source)
  int32_t n_ff = 0;      // new FFN width (>= source)
  int32_t n_layer = 0;   // new depth (>= source)
  int32_t n_head = 0;    // 0: n_embd / head_dim
  int32_t head_dim = 0;  // 0: keep the source's; else a multiple of it (RoPE must be full-width)
  // Weight type of every matrix (quant_type_for rules, falls back per tensor); nullopt:
  // each matrix keeps its source type when the new row length fits its blocks.
  std::optional<tensor::DType> type;
  uint64_t seed = 1;
  // Metadata set after the source's and the new shape's (a layer stack's new base
  // identity, train::expand_eagle_file).
  std::vector<std::pair<std::string, gguf::Value>> metadata;
};

struct ExpandSummary {
  int32_t n_embd = 0, n_ff = 0, n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  std::vector<int32_t> real_layer_pos;  // new index of source layer l
  uint64_t n_params = 0;
  uint64_t tensor_bytes = 0;
};

// One axis of a widened tensor: where each source index lands, and for each new index
// whether it carries a value that can be non-zero at run time ("live"). A new index that
// is not live only ever holds exact zeros.
struct AxisMap {
  int64_t n_new = 0;
  std::vector<int64_t> src_to_new;                               // [n_src]
  std::vector<uint8_t> live;                                     // [n_new]
  static AxisMap identity_padded(int64_t n_src, int64_t n_new);  // i -> i, live iff i < n_src
};

// Fills dst [out.n_new, in.n_new] (row-major, rows = outputs) from src [n_out_src,
// n_in_src]: dst[out.src_to_new[o]][in.src_to_new[i]] = scale * src[o][i]. Every other
// entry is zero when its row is `exact` (its output must be reproduced exactly: a real
// output, or one that must stay zero) and its column is live or shares a quantisation
// block (`block` columns) with a live column of that row; otherwise it is random filler
// (N(0, filler_std) approximately): it only ever multiplies zeros.
void place_matrix(const float* src, int64_t n_in_src, int64_t n_out_src, const AxisMap& in, const AxisMap& out,
                  const std::vector<uint8_t>& row_exact, float scale, float filler_std, int64_t block, core::Rng& rng,
                  float* dst);

// Approximately normal filler (sum of four uniforms, scaled): fast and incompressible.
float filler(core::Rng& rng, float std);

// Where expand_gguf places the source layers: new index of source layer l, for a source
// of n_layer_src layers expanded to n_layer_new (the rest are pass-throughs). For tools
// that widen other weight files for an expansion (`treespec expand --heads-in`), never
// for drafters (docs/expand.md, "Honest use").
// Where layers are of different kinds by index (`kind`: Gemma's local and global
// attention, SmolLM3's RoPE-free layers; model/arch.h), each layer then moves to the
// nearest index of its own kind.
std::vector<int32_t> expanded_layer_positions(int32_t n_layer_src, int32_t n_layer_new,
                                              const std::function<int(int64_t)>& kind = {});
// The same for a source model (the kinds of its family's layers).
std::vector<int32_t> expanded_layer_positions(const Hparams& src, int32_t n_layer_new);

// Writes the expanded model to `out`. A layer stack (model::kLayerStackArch: an EAGLE
// draft layer) is widened to the same width, heads and FFN, keeping its layer count
// (n_layer is ignored); its own metadata prefix gets the new shape. Errors: InvalidArgument (sizes smaller than the
// source, head_dim not a multiple, GQA group not preserved, local/global layers that do
// not fit), Unsupported (partial RoPE with a new head_dim, source tensor type), IoError,
// FormatError.
ExpandSummary expand_gguf(const std::string& in, const std::string& out, const ExpandOptions& opts);

}  // namespace treespec::model
