// treespec expand -m SMALL.gguf -o BIG.gguf --dim D --ffn F --layers L [--heads H]
//                 [--head-dim HD] [--type q8_0] [--seed S]
//                 [--heads-in HEADS.gguf --heads-out BIG_HEADS.gguf ... [--heads-only] [--heads-type T]]
// Function-preserving expansion for memory-bound benchmarks (docs/expand.md); with
// --heads-in, also widens a Medusa / ProPD heads file trained on SMALL for BIG, using the
// expansion's own layer map (docs/propd.md, "Heads on an expanded model"), or an EAGLE
// draft layer trained on SMALL (docs/eagle.md).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "command.h"
#include "drafters/eagle/eagle_layer.h"
#include "drafters/medusa/medusa_heads.h"
#include "gguf/gguf.h"
#include "model/expand.h"
#include "model/model.h"
#include "model/quantize.h"
#include "tensor/dtype.h"
#include "train/expand_heads.h"
#include "treespec/status.h"

namespace {

struct ExpandArgs {
  std::string in, out, type;
  std::vector<std::string> heads_in, heads_out;  // pairs: the i-th --heads-in goes to the i-th --heads-out
  std::string heads_type;
  bool heads_only = false;
  treespec::model::ExpandOptions opts;
};

// Argmax of every position of a short prefill: a cheap check that `big` computes what
// `src` computes (--heads-only trusts an existing file to be this expansion; a quantised
// one may differ at near ties).
std::vector<int32_t> prefill_argmax(const treespec::model::Model& m) {
  using namespace treespec;
  const int32_t V = m.hparams().n_vocab;
  std::vector<int32_t> toks;
  for (int32_t i = 0; i < 12; ++i) toks.push_back(static_cast<int32_t>((1 + 37 * i) % V));
  model::ForwardContext ctx(m, 1);
  kv::KvCache kv(m.kv_shape(1, 16));
  model::Batch b;
  b.add_chain(0, 0, toks);
  std::vector<float> logits(toks.size() * static_cast<size_t>(V));
  const Status st = m.forward(ctx, b, kv, {}, logits.data());
  if (!st.ok()) throw InvalidArgument("expand --heads-only: forward failed: " + st.message());
  std::vector<int32_t> out;
  for (size_t r = 0; r < toks.size(); ++r) {
    const float* l = logits.data() + r * static_cast<size_t>(V);
    out.push_back(static_cast<int32_t>(std::max_element(l, l + V) - l));
  }
  return out;
}

// Whether heads file `in` is an EAGLE layer (else Medusa / ProPD heads), after checking
// that it was trained on the source model: before any work is done.
bool check_heads_in(const ExpandArgs& a, const std::string& in, const treespec::model::Model& src) {
  using namespace treespec;
  std::shared_ptr<const gguf::GgufFile> f(gguf::GgufFile::open(in));
  if (drafters::EagleLayer::present_in(*f)) {
    drafters::EagleLayer::from_gguf(f)->check_fits(src, a.in);
    return true;
  }
  drafters::MedusaHeads::from_gguf(f)->check_fits(src, a.in);
  return false;
}

// Widens every --heads-in (Medusa / ProPD heads, or an EAGLE layer where eagle[i]) for the
// expansion at a->out whose source layer l sits at map[l].
void widen_heads(const ExpandArgs& a, const treespec::model::Model& src, const std::vector<int32_t>& map,
                 const std::vector<bool>& eagle) {
  using namespace treespec;
  const auto big = model::Model::load(a.out);
  const auto& hp = big->hparams();
  if (hp.n_embd != a.opts.n_embd || hp.n_ff != a.opts.n_ff || hp.n_layer != a.opts.n_layer) {
    throw InvalidArgument(fmt::format(
        "expand --heads-only: '{}' has dim {}, ffn {}, {} layers, not the --dim {} --ffn {} --layers {} given", a.out,
        hp.n_embd, hp.n_ff, hp.n_layer, a.opts.n_embd, a.opts.n_ff, a.opts.n_layer));
  }
  if (a.heads_only) {
    // A quantised expansion may flip a near tie of the source; another model agrees with it
    // at few of the positions.
    const auto want = prefill_argmax(src), got = prefill_argmax(*big);
    size_t same = 0;
    for (size_t i = 0; i < want.size(); ++i) same += want[i] == got[i];
    if (3 * same < 2 * want.size()) {
      throw InvalidArgument(fmt::format(
          "expand --heads-only: '{}' does not compute what '{}' computes (not its expansion: {} of {} next-token "
          "choices agree)",
          a.out, a.in, same, want.size()));
    }
  }
  for (size_t i = 0; i < a.heads_in.size(); ++i) {
    const std::string& in = a.heads_in[i];
    const std::string& out = a.heads_out[i];
    auto widen = [&](const std::string& to) {
      if (eagle[i]) {
        train::expand_eagle_file(in, *big, to, a.opts.seed);
      } else {
        train::expand_heads_file(in, *big, map, to, a.opts.seed);
      }
    };
    if (a.heads_type.empty() || a.heads_type == "f32") {
      widen(out);
    } else {  // widened in f32, then every block matrix quantised as `treespec quantize` does
      const tensor::DType t = *tensor::dtype_from_name(a.heads_type);  // checked at start
      const std::string tmp = out + ".f32.tmp";
      widen(tmp);
      try {
        model::quantize_gguf(tmp, out, t);
      } catch (...) {
        std::remove(tmp.c_str());
        throw;
      }
      std::remove(tmp.c_str());
    }
    std::printf("wrote %s: %s of %s widened to dim %d, %d layers\n", out.c_str(), eagle[i] ? "EAGLE layer" : "heads",
                in.c_str(), hp.n_embd, hp.n_layer);
  }
}

std::function<int()> setup_expand(CLI::App& sub) {
  auto a = std::make_shared<ExpandArgs>();
  sub.add_option("-m,--model", a->in, "source GGUF (any supported architecture)")->required();
  sub.add_option("-o,--output", a->out, "expanded GGUF")->required();
  sub.add_option("--dim", a->opts.n_embd, "new embedding width")->required();
  sub.add_option("--ffn", a->opts.n_ff, "new feed-forward width")->required();
  sub.add_option("--layers", a->opts.n_layer, "new number of layers")->required();
  sub.add_option("--heads", a->opts.n_head, "new number of attention heads (default dim / head-dim)");
  sub.add_option("--head-dim", a->opts.head_dim, "new head dimension, a multiple of the source's (default: keep)");
  sub.add_option("--type", a->type, "weight type of all matrices (default: keep each source tensor's type)");
  sub.add_option("--seed", a->opts.seed, "seed of the random filler")->capture_default_str();
  sub.add_option("--heads-in", a->heads_in,
                 "Medusa / ProPD heads file or EAGLE layer (train-eagle) trained on the source model: widen it for "
                 "the expansion (repeatable, one --heads-out each)");
  sub.add_option("--heads-out", a->heads_out, "where the --heads-in of the same position goes, widened");
  sub.add_option("--heads-type", a->heads_type,
                 "weight type of the widened heads' matrices (default f32; q8_0 makes 1 B-wide blocks 3.8x smaller)");
  sub.add_flag("--heads-only", a->heads_only,
               "do not write the model: -o is an existing expansion made with these options; only widen the heads");
  return [a]() -> int {
    using namespace treespec;
    if (!a->type.empty()) {
      const auto t = tensor::dtype_from_name(a->type);
      if (!t) throw InvalidArgument("--type: unknown type '" + a->type + "'");
      a->opts.type = *t;
    }
    if (a->heads_in.size() != a->heads_out.size()) {
      throw InvalidArgument(
          fmt::format("expand: --heads-in and --heads-out go in pairs ({} --heads-in, {} --heads-out)",
                      a->heads_in.size(), a->heads_out.size()));
    }
    if (!a->heads_type.empty() && a->heads_out.empty())
      throw InvalidArgument("expand: --heads-type needs --heads-in and --heads-out");
    if (!a->heads_type.empty() && !tensor::dtype_from_name(a->heads_type))
      throw InvalidArgument("--heads-type: unknown type '" + a->heads_type + "'");
    if (a->heads_only && a->heads_in.empty())
      throw InvalidArgument("expand: --heads-only needs --heads-in and --heads-out");
    std::unique_ptr<model::Model> src;
    std::vector<bool> eagle;
    if (!a->heads_in.empty()) {
      src = model::Model::load(a->in);
      for (const auto& in : a->heads_in) eagle.push_back(check_heads_in(*a, in, *src));
    }
    if (a->heads_only) {
      widen_heads(*a, *src, model::expanded_layer_positions(src->hparams(), a->opts.n_layer), eagle);
      return 0;
    }
    const auto s = model::expand_gguf(a->in, a->out, a->opts);
    std::string pos;
    for (size_t i = 0; i < s.real_layer_pos.size(); ++i) pos += (i ? "," : "") + std::to_string(s.real_layer_pos[i]);
    std::printf(
        "wrote %s: dim %d, ffn %d, %d layers (source layers at %s), %d heads / %d kv heads of %d; "
        "%llu parameters, %llu bytes of tensor data\n",
        a->out.c_str(), s.n_embd, s.n_ff, s.n_layer, pos.c_str(), s.n_head, s.n_head_kv, s.head_dim,
        static_cast<unsigned long long>(s.n_params), static_cast<unsigned long long>(s.tensor_bytes));
    if (src) widen_heads(*a, *src, s.real_layer_pos, eagle);
    return 0;
  };
}

}  // namespace

TREESPEC_COMMAND("expand", "Function-preserving expansion of a model to a larger size (memory-bound benchmarks)",
                 setup_expand);
