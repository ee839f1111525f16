// treespec train-eagle -m MODEL.gguf -o EAGLE.gguf [--steps N] [--samples S] [--seq-len L]
//   [--prompts FILE] [-s SEED] [-t THREADS] ...
// Trains an EAGLE draft layer by self-distillation (the model writes its own training
// text; no dataset), prints progress to stderr and the held-out accuracy table to stdout,
// and writes the layer file (docs/eagle.md).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "bench/prompts.h"
#include "cli/options.h"
#include "command.h"
#include "core/progress.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "train/eagle_train.h"
#include "treespec/status.h"

namespace {

using namespace treespec;

struct EagleArgs {
  std::string model;
  std::string out;
  std::string prompts_file;
  int32_t n_threads = 0;
  int64_t seed = 1;
  bool quiet = false;
  bool seq_len_given = false;  // else the default shrinks to fit the model's context
  train::EagleTrainParams p;
};

int run_train_eagle(EagleArgs& a) {
  auto model = model::Model::load(a.model);
  const auto tok = tokenizer::Tokenizer::from_gguf(model->gguf());
  train::EagleTrainParams& p = a.p;
  p.gen.n_threads = cli::resolve_threads(a.n_threads);
  if (a.seed < 0)
    throw InvalidArgument(fmt::format("-s/--seed must be >= 0 (training is deterministic for a seed), got {}", a.seed));
  p.gen.seed = static_cast<uint64_t>(a.seed);
  p.gen.eog_ids = tok->eog_ids();
  p.gen.bos_id = tok->bos_id() >= 0 ? tok->bos_id() : 1;
  if (!a.prompts_file.empty()) {
    bench::PromptSource src = bench::parse_prompt_source(a.prompts_file);
    if (src.format.empty()) src.format = "lines";
    for (const auto& text : bench::load_prompts(src).prompts) p.gen.prompts.push_back(tok->encode(text, true, false));
  }
  const auto& hp = model->hparams();
  if (!a.seq_len_given) {
    // The default (256) is a length, not a requirement: a model with a shorter training
    // context (kjv-5m: 256, prompts included) trains on what fits.
    size_t longest = 1;  // BOS
    for (const auto& pr : p.gen.prompts) longest = std::max(longest, pr.size());
    const auto room = static_cast<int32_t>(std::max<int64_t>(0, hp.n_ctx_train - static_cast<int64_t>(longest)));
    if (room > 0 && room < p.gen.seq_len) p.gen.seq_len = room;
  }
  p.validate();
  std::fprintf(stderr,
               "train-eagle: %s: one decoder layer (%d heads / %d KV heads of %d, FFN %d), %d samples x %d tokens "
               "(%s), %d steps of %d x %d rows, lr %g, %d threads\n",
               a.model.c_str(), hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_ff, p.gen.samples, p.gen.seq_len,
               p.gen.prompts.empty() ? "from BOS" : fmt::format("{} prompts", p.gen.prompts.size()).c_str(), p.steps,
               p.windows, p.window, static_cast<double>(p.lr), p.gen.n_threads);
  core::ProgressBar bar(a.quiet ? nullptr : stderr);
  train::EagleTrainReport rep;
  train::train_eagle(*model, p, a.out, &rep, [&](const train::TrainProgress& pr) {
    std::string detail;
    if (pr.phase == "train") detail = fmt::format("  loss {:.4f}  {:.0f} rows/s", pr.loss, pr.rate);
    if (pr.phase == "generate") detail = fmt::format("  {:.0f} tok/s", pr.rate);
    bar.show(pr.phase, pr.done, pr.total, pr.elapsed_s, pr.eta_s, detail);
  });
  bar.finish();
  std::printf("generated %lld tokens in %.1f s; trained %d steps in %.1f s on %lld rows; %lld held-out rows\n",
              static_cast<long long>(rep.generated_tokens), rep.gen_seconds, p.steps, rep.train_seconds,
              static_cast<long long>(rep.train_rows), static_cast<long long>(rep.after.n));
  std::printf("held-out agreement with the model's argmax (chance top-1 = %.4f):\n", 1.0 / hp.n_vocab);
  std::printf("depth  features      top-1 (init)  top-1   top-5\n");
  for (size_t d = 0; d < rep.after.top1.size(); ++d) {
    std::printf("%-5zu  %-12s  %12.4f  %6.4f  %6.4f\n", d + 1, d == 0 ? "the model's" : "own", rep.before.top1[d],
                rep.after.top1[d], rep.after.top5[d]);
  }
  std::printf("held-out loss %.4f (init %.4f)\nwrote %s\n", rep.after.loss, rep.before.loss, a.out.c_str());
  return 0;
}

std::function<int()> setup_train_eagle(CLI::App& sub) {
  auto a = std::make_shared<EagleArgs>();
  auto& p = a->p;
  sub.add_option("-m,--model", a->model, "base GGUF model")->required();
  sub.add_option("-o,--output", a->out, "EAGLE layer file to write")->required();
  sub.add_option("--steps", p.steps, "Adam steps")->capture_default_str();
  sub.add_option("--lr", p.lr, "peak learning rate (warm-up, cosine decay to 10%)")->capture_default_str();
  sub.add_option("--window", p.window, "rows per training window (one causal sequence)")->capture_default_str();
  sub.add_option("--windows", p.windows, "windows per step")->capture_default_str();
  sub.add_option("--feat-weight", p.feat_weight, "weight of the feature regression (SmoothL1)")->capture_default_str();
  sub.add_option("--tok-weight", p.tok_weight, "weight of the token cross-entropy through the model's output matrix")
      ->capture_default_str();
  sub.add_option("--kl", p.kl_weight, "share of the model's distribution in the token target (rest: sampled token)")
      ->capture_default_str();
  sub.add_option("--noise", p.noise, "uniform input-feature noise, times the row's RMS")->capture_default_str();
  sub.add_option(
         "--seq-len", p.gen.seq_len,
         "generated tokens per sample (the default shrinks to fit the model's context after the longest prompt)")
      ->capture_default_str()
      ->each([a](const std::string&) { a->seq_len_given = true; });
  sub.add_option("--samples", p.gen.samples, "generated samples (some held out)")->capture_default_str();
  sub.add_option("--holdout", p.gen.holdout, "fraction of samples held out")->capture_default_str();
  sub.add_option("--prompts", a->prompts_file,
                 "prompts to continue (FILE[:field=F][:turn=N][:format=F] as bench's --prompts; default: from BOS)");
  sub.add_option("--temp", p.gen.temp, "sampling temperature of the training text")->capture_default_str();
  sub.add_option("--top-p", p.gen.top_p, "top-p of the training text")->capture_default_str();
  sub.add_option("--kl-top", p.gen.kl_top, "model distribution entries kept per position")->capture_default_str();
  sub.add_option("--gen-batch", p.gen.gen_batch, "sequences generated together")->capture_default_str();
  sub.add_option("-s,--seed", a->seed, "seed (same seed, same layer)")->capture_default_str();
  sub.add_option("-t,--threads", a->n_threads, "threads (default: all cores)");
  sub.add_flag("-q,--quiet", a->quiet, "no progress bar");
  return [a] { return run_train_eagle(*a); };
}

}  // namespace

TREESPEC_COMMAND("train-eagle", "Train an EAGLE draft layer by self-distillation (no dataset needed)",
                 setup_train_eagle);
