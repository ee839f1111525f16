// treespec train-heads -m MODEL.gguf -o HEADS.gguf [--heads K] [--blocks R] [--steps N]
//   [--lr LR] [--seq-len L] [--samples S] [--prompts FILE] [-s SEED] [-t THREADS] ...
// Trains Medusa heads by self-distillation (the model writes its own training text; no
// dataset), prints progress to stderr and the held-out calibration table to stdout, and
// writes the heads (with the table in their metadata).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "bench/prompts.h"
#include "cli/options.h"
#include "command.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "drafters/propd/heads_file.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "train/medusa_train.h"
#include "train/prune_train.h"
#include "treespec/status.h"

namespace {

using namespace treespec;

struct TrainArgs {
  std::string model;
  std::string out;
  std::string merged;
  std::string prompts_file;
  int32_t n_threads = 0;
  int64_t seed = 1;
  bool quiet = false;
  train::MedusaTrainParams p;
  std::string prune_layers;  // --prune-layer: "L1,L2,..." or "all"
  train::PruneTrainParams pp;
};

// --prune-layer: comma-separated layers in 1..n_layer-1, or "all".
std::vector<int32_t> parse_prune_layers(const std::string& spec, int32_t n_layer) {
  std::vector<int32_t> out;
  if (spec == "all") {
    for (int32_t l = 1; l < n_layer; ++l) out.push_back(l);
    return out;
  }
  size_t b = 0;
  while (b <= spec.size()) {
    size_t e = spec.find(',', b);
    if (e == std::string::npos) e = spec.size();
    const std::string item = spec.substr(b, e - b);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v >= n_layer) {
      throw InvalidArgument(
          fmt::format("--prune-layer '{}': expected 'all' or layers in 1..{} separated by commas (bad item '{}')", spec,
                      n_layer - 1, item));
    }
    if (std::find(out.begin(), out.end(), static_cast<int32_t>(v)) == out.end()) out.push_back(static_cast<int32_t>(v));
    b = e + 1;
  }
  std::sort(out.begin(), out.end());
  return out;
}

// --prompts FILE[:field=...]: bench's prompt reader; by default one prompt per line, a line
// starting with '{' being a JSON object (its "prompt", "turns"[0], "text", ...).
std::vector<std::string> read_prompts(const std::string& arg) {
  bench::PromptSource src = bench::parse_prompt_source(arg);
  if (src.format.empty()) src.format = "lines";
  return bench::load_prompts(src).prompts;
}

std::string si(double v) {
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

// The trainers' progress reports on core's progress bar (stderr), with loss and rate.
void show_progress(core::ProgressBar& bar, const train::TrainProgress& pr) {
  std::string detail;
  if (pr.phase == "train") detail = fmt::format("  loss {:.4f}  {} tok/s", pr.loss, si(pr.rate));
  if (pr.phase == "generate") detail = fmt::format("  tokens  {} tok/s", si(pr.rate));
  bar.show(pr.phase, pr.done, pr.total, pr.elapsed_s, pr.eta_s, detail);
}

int run(TrainArgs& a) {
  auto model = model::Model::load(a.model);
  const auto tok = tokenizer::Tokenizer::from_gguf(model->gguf());
  train::MedusaTrainParams& p = a.p;
  p.n_threads = cli::resolve_threads(a.n_threads);
  if (a.seed < 0)
    throw InvalidArgument(fmt::format("-s/--seed must be >= 0 (training is deterministic for a seed), got {}", a.seed));
  p.seed = static_cast<uint64_t>(a.seed);
  p.eog_ids = tok->eog_ids();
  p.bos_id = tok->bos_id() >= 0 ? tok->bos_id() : 1;
  if (!a.prompts_file.empty()) {
    for (const auto& text : read_prompts(a.prompts_file)) p.prompts.push_back(tok->encode(text, true, false));
  }
  if (!a.prune_layers.empty()) {
    p.tap_layers = parse_prune_layers(a.prune_layers, model->hparams().n_layer);
    a.pp.seed = p.seed;
    a.pp.own_output = p.own_output;
    p.tap_top_k = a.pp.eval_top_k;
    a.pp.validate();
  }
  p.validate();
  std::fprintf(stderr,
               "train-heads: %s: %d heads x %d blocks (%s vocab projection), %d samples x %d tokens (%s), %d steps of "
               "%d positions, lr %g, %d threads\n",
               a.model.c_str(), p.n_heads, p.blocks_for(model->hparams().n_embd), p.own_output ? "own" : "the model's",
               p.samples, p.seq_len,
               p.prompts.empty() ? "from BOS" : fmt::format("{} prompts", p.prompts.size()).c_str(), p.steps, p.batch,
               static_cast<double>(p.lr), p.n_threads);
  core::ProgressBar bar(a.quiet ? nullptr : stderr);
  train::MedusaTrainReport rep;
  auto heads =
      train::train_medusa_heads(*model, p, &rep, [&](const train::TrainProgress& pr) { show_progress(bar, pr); });
  std::shared_ptr<drafters::PruneHeadSet> prune;
  train::PruneTrainReport prep;
  if (!p.tap_layers.empty()) {
    core::ThreadPool pool(p.n_threads);
    prune = train::train_prune_heads(*model, rep.taps, a.pp, pool, &prep,
                                     [&](const train::TrainProgress& pr) { show_progress(bar, pr); });
  }
  bar.finish();
  drafters::write_heads_file(a.out, *heads, prune.get());
  if (!a.merged.empty()) drafters::write_model_with_all_heads(*model, *heads, prune.get(), a.merged);

  const auto& ev = rep.after;
  std::printf(
      "generated %lld tokens in %.1f s; trained %d steps in %.1f s; evaluated %lld held-out positions (head 0)\n",
      static_cast<long long>(rep.generated_tokens), rep.gen_seconds, p.steps, rep.train_seconds,
      static_cast<long long>(rep.heldout_positions));
  if (rep.draft_vocab > 0) {
    std::printf("draft vocabulary: the %d most frequent tokens of the training text (%.2f%% of the held-out tokens)\n",
                rep.draft_vocab, 100.0 * rep.draft_vocab_coverage);
  }
  std::printf("calibration (held-out top-k accuracy; chance top-1 = %.4f):\n", 1.0 / model->hparams().n_vocab);
  std::string head = "head  loss(init)  loss  ";
  for (int32_t j = 1; j <= ev.top_k; ++j) head += fmt::format(" top-{:<2}", j);
  std::printf("%s\n", head.c_str());
  for (int32_t k = 0; k < p.n_heads; ++k) {
    std::string row = fmt::format("{:<4}  {:10.4f}  {:6.4f}", k, rep.before.loss[static_cast<size_t>(k)],
                                  ev.loss[static_cast<size_t>(k)]);
    for (int32_t j = 0; j < ev.top_k; ++j)
      row += fmt::format("  {:5.3f}", ev.topk_acc[static_cast<size_t>(k * ev.top_k + j)]);
    std::printf("%s\n", row.c_str());
  }
  if (prune) {
    const auto& c = prune->calib;
    std::printf(
        "\nProPD pruning: recall of the final argmax in the top-k of an early predictor (%lld held-out positions)\n",
        static_cast<long long>(c.n_positions));
    std::string hdr = "predictor          layer";
    for (int32_t k : {1, 2, 3, 4, 5, 8, 10, 12, 16}) {
      if (k <= c.top_k) hdr += fmt::format("  top-{:<2}", k);
    }
    std::printf("%s\n", hdr.c_str());
    auto row = [&](const char* what, int32_t l, const std::function<float(int32_t, int32_t)>& f) {
      std::string r = fmt::format("{:<18} {:5}", what, l);
      for (int32_t k : {1, 2, 3, 4, 5, 8, 10, 12, 16}) {
        if (k <= c.top_k) r += fmt::format("  {:6.4f}", f(l, k));
      }
      std::printf("%s\n", r.c_str());
    };
    for (int32_t l = 0; l < c.lens_layers(); ++l)
      row("logit lens", l, [&](int32_t ll, int32_t k) { return c.lens(ll, k); });
    for (int32_t l : c.head_layers) row("trained head", l, [&](int32_t ll, int32_t k) { return c.head(ll, k); });
    for (size_t i = 0; i < prep.layers.size(); ++i) {
      std::printf("prune head @%d: held-out cross-entropy to the final argmax %.4f (lens) -> %.4f (trained)\n",
                  prep.layers[i], prep.loss_before[i], prep.loss_after[i]);
    }
    if (c.default_layer > 0) {
      std::printf("default prune layer: %d (smallest trained layer with top-%d recall >= %.2f)\n", c.default_layer,
                  c.default_k, static_cast<double>(c.recall_target));
    } else {
      std::printf(
          "no trained layer reaches top-%d recall %.2f; --spec propd picks from the tables at run time (see "
          "docs/propd.md)\n",
          c.default_k, static_cast<double>(c.recall_target));
    }
    std::printf("prune heads trained in %.1f s\n", prep.seconds);
  }
  std::printf("wrote %s%s\n", a.out.c_str(), a.merged.empty() ? "" : fmt::format(" and {}", a.merged).c_str());
  return 0;
}

std::function<int()> setup(CLI::App& sub) {
  auto a = std::make_shared<TrainArgs>();
  auto& p = a->p;
  sub.add_option("-m,--model", a->model, "base GGUF model")->required();
  sub.add_option("-o,--output", a->out, "heads file to write")->required();
  sub.add_option("--merged", a->merged, "also write a copy of the model with the heads inside");
  sub.add_option("--heads", p.n_heads, "number of heads K (head k predicts k + 2 ahead)")->capture_default_str();
  sub.add_option("--blocks", p.n_blocks,
                 "residual SiLU blocks per head (default: 1 with --own-lm-head; else 512 / embedding width, 1..4)");
  sub.add_flag("--own-lm-head", p.own_output,
               "each head trains its own copy of the vocab projection (Medusa-1; default: the heads share the "
               "model's output matrix and the file holds only their blocks)");
  sub.add_option("--draft-vocab", p.draft_vocab,
                 "shared heads draft from the N most frequent tokens of the training text (default: the whole "
                 "vocabulary up to 16384 entries, else 16384)");
  sub.add_option("--steps", p.steps, "Adam steps")->capture_default_str();
  sub.add_option("--lr", p.lr, "peak learning rate (warm-up, cosine decay to 10%)")->capture_default_str();
  sub.add_option("--batch", p.batch, "positions per step")->capture_default_str();
  sub.add_option("--seq-len", p.seq_len, "generated tokens per sample")->capture_default_str();
  sub.add_option("--samples", p.samples, "generated samples (some held out for calibration)")->capture_default_str();
  sub.add_option("--holdout", p.holdout, "fraction of samples held out")->capture_default_str();
  sub.add_option("--prompts", a->prompts_file,
                 "prompts to continue, one per line or JSON lines with prompt/turns/text "
                 "(FILE[:field=F][:turn=N][:format=F] as bench's --prompts; default: from BOS)");
  sub.add_option("--temp", p.temp, "sampling temperature of the training text")->capture_default_str();
  sub.add_option("--top-p", p.top_p, "top-p of the training text")->capture_default_str();
  sub.add_option("--kl", p.kl_weight, "weight of the KL term to the base distribution (0 = cross-entropy only)")
      ->capture_default_str();
  sub.add_option("--kl-top", p.kl_top, "base distribution entries kept for the KL term")->capture_default_str();
  sub.add_option("--gen-batch", p.gen_batch, "sequences generated together")->capture_default_str();
  sub.add_option("--prune-layer", a->prune_layers,
                 "also train ProPD prune heads after these layers ('all' or e.g. 2,3) and measure the logit lens' "
                 "recall at every layer");
  sub.add_option("--prune-steps", a->pp.steps, "prune heads: Adam steps per layer")->capture_default_str();
  sub.add_option("--prune-lr", a->pp.lr, "prune heads: peak learning rate")->capture_default_str();
  sub.add_option("--prune-blocks", a->pp.n_blocks, "prune heads: residual blocks (default as --blocks)");
  sub.add_option("--prune-soft", a->pp.soft_weight, "prune heads: weight of the final distribution (rest: its argmax)")
      ->capture_default_str();
  sub.add_option("--prune-k", a->pp.default_k, "prune heads: k of the default-layer rule")->capture_default_str();
  sub.add_option("--prune-recall", a->pp.recall_target,
                 "prune heads: default layer = smallest with top-k recall >= this")
      ->capture_default_str();
  sub.add_option("-s,--seed", a->seed, "seed (same seed, same heads)")->capture_default_str();
  sub.add_option("-t,--threads", a->n_threads, "threads (default: all cores)");
  sub.add_flag("-q,--quiet", a->quiet, "no progress bar");
  return [a] { return run(*a); };
}

}  // namespace

TREESPEC_COMMAND("train-heads", "Train Medusa heads by self-distillation (no dataset needed)", setup);
