// The statistical check of lossless sampling with a stochastic drafter, shared by the
// drafters that draw their drafts from a distribution q (the draft model, EAGLE).
//
// A target with a small vocabulary generates 2 tokens from a fixed prompt, n times with
// different seeds, through the engine with the chosen verifier. The counts of the first
// token and of the first two tokens are compared with the exact target probabilities
// P(x) = p(x | prompt) and P(x, y) = p(x | prompt) p(y | prompt x) (target forward passes,
// warped by the same sampling parameters) by Pearson's chi-square test (cells with
// expected count < 5 pooled). Power: WrongQ reports a uniform q for every sampled node, so
// the verifier uses the wrong ratio and the output is biased; the test must reject it.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "drafters/drafter.h"
#include "engine/engine.h"
#include "model/model.h"
#include "sampling/sampling.h"
#include "unit/verify/chi_square.h"

namespace treespec::test {

// Reports a uniform q over `n_vocab` tokens for every node whose children were sampled.
class WrongQ final : public drafters::Drafter {
 public:
  WrongQ(std::unique_ptr<drafters::Drafter> inner, int32_t n_vocab) : inner_(std::move(inner)) {
    uniform_.ids.resize(static_cast<size_t>(n_vocab));
    uniform_.p.assign(static_cast<size_t>(n_vocab), 1.0f / static_cast<float>(n_vocab));
    for (int32_t i = 0; i < n_vocab; ++i) uniform_.ids[static_cast<size_t>(i)] = i;
  }
  std::string name() const override { return "wrong-q"; }
  void begin(std::span<const int32_t> p) override { inner_->begin(p); }
  bool wants_prompt_hidden() const override { return inner_->wants_prompt_hidden(); }
  void observe_prompt(int32_t first, int32_t n, const float* hidden) override {
    inner_->observe_prompt(first, n, hidden);
  }
  tree::TokenTree propose(const drafters::DraftInput& in) override {
    auto t = inner_->propose(in);
    ptr_.clear();
    for (const auto* q : inner_->draft_distributions()) ptr_.push_back(q ? &uniform_ : nullptr);
    return t;
  }
  void observe(const drafters::StepFeedback& fb) override { inner_->observe(fb); }
  std::span<const sampling::Distribution* const> draft_distributions() const override { return ptr_; }
  int32_t max_nodes() const override { return inner_->max_nodes(); }
  std::vector<std::pair<std::string, double>> counters() const override { return inner_->counters(); }

 private:
  std::unique_ptr<drafters::Drafter> inner_;
  sampling::Distribution uniform_;
  std::vector<const sampling::Distribution*> ptr_;
};

// Warped target distribution after ctx, dense [n_vocab].
inline std::vector<double> warped_target(const model::Model& m, const std::vector<int32_t>& ctx,
                                         const sampling::SamplingParams& sp) {
  const int32_t V = m.hparams().n_vocab;
  model::ForwardContext fc(m, 1);
  kv::KvCache kv(m.kv_shape(1, 32));
  model::Batch b;
  b.add_chain(0, 0, ctx);
  std::vector<float> logits(static_cast<size_t>(V));
  const int32_t last = static_cast<int32_t>(ctx.size()) - 1;
  EXPECT_TRUE(m.forward(fc, b, kv, std::span<const int32_t>(&last, 1), logits.data()).ok());
  const auto d = sampling::warp(logits.data(), V, sp);
  std::vector<double> p(static_cast<size_t>(V), 0.0);
  for (size_t i = 0; i < d.ids.size(); ++i) p[static_cast<size_t>(d.ids[i])] = d.p[i];
  return p;
}

struct TwoTokenResult {
  ChiSquare first, pairs;
  double mean_accepted_length = 0.0;
  int64_t accepted = 0;
  int64_t sampled_nodes = 0;  // draft tokens drawn from q (the drafter's counter)
  int64_t pruned = 0;         // tree rows removed by early pruning
};

// A drafter for one sequence, given the sequence's seed.
using SeededDrafterMaker = std::function<std::unique_ptr<drafters::Drafter>(uint64_t seed)>;

struct TwoTokenRun {
  int32_t n = 0;         // samples
  uint64_t seed = 1;     // sample i decodes with seed * 1000003 + i
  bool wrong_q = false;  // wrap every drafter in WrongQ
  int32_t batch = 1;     // sequences decoding together (one forward pass for all)
  verify::Mode mode = verify::Mode::lossless;
  std::string sampled_counter;              // the drafter counter of nodes drawn from q
  std::vector<int32_t>* outputs = nullptr;  // if given: the two tokens of every sample, in seed order
};

inline TwoTokenResult simulate_two_tokens(const model::Model& target, const SeededDrafterMaker& make,
                                          const sampling::SamplingParams& sp0, const TwoTokenRun& run) {
  const std::vector<int32_t> prompt = {1, 7, 11};
  const int32_t V = target.hparams().n_vocab;
  engine::EngineParams ep;
  ep.n_ctx = 32;
  ep.n_slots = run.batch;
  engine::Engine eng(target, ep);
  eng.set_eog_ids({});
  std::vector<int64_t> first(static_cast<size_t>(V), 0), pairs(static_cast<size_t>(V * V), 0);
  engine::SpecStats total;
  int64_t sampled = 0;
  for (int32_t i0 = 0; i0 < run.n; i0 += run.batch) {
    std::vector<std::unique_ptr<engine::Sequence>> group;
    for (int32_t i = i0; i < std::min(run.n, i0 + run.batch); ++i) {
      engine::SequenceParams sp;
      sp.sampling = sp0;
      sp.sampling.seed = run.seed * 1000003 + static_cast<uint64_t>(i);
      sp.mode = run.mode;
      sp.n_predict = 2;
      sp.ignore_eog = true;
      auto d = make(sp.sampling.seed);
      if (run.wrong_q) d = std::make_unique<WrongQ>(std::move(d), V);
      group.push_back(std::make_unique<engine::Sequence>(prompt, sp, std::move(d)));
      EXPECT_TRUE(eng.add(*group.back()).ok());
    }
    for (;;) {
      std::vector<engine::Sequence*> active;
      for (auto& q : group) {
        if (!q->finished()) active.push_back(q.get());
      }
      if (active.empty()) break;
      eng.step(active);
    }
    for (auto& q : group) {
      const engine::Sequence& seq = *q;
      for (const auto& [k, v] : seq.drafter().counters()) {
        if (k == run.sampled_counter) sampled += static_cast<int64_t>(v);
      }
      EXPECT_EQ(seq.generated().size(), 2u);
      const int32_t x = seq.generated()[0], y = seq.generated()[1];
      if (run.outputs) run.outputs->insert(run.outputs->end(), {x, y});
      first[static_cast<size_t>(x)] += 1;
      pairs[static_cast<size_t>(x * V + y)] += 1;
      total.merge(seq.stats());
    }
  }
  const auto p1 = warped_target(target, prompt, sp0);
  std::vector<double> p2(static_cast<size_t>(V * V), 0.0);
  for (int32_t x = 0; x < V; ++x) {
    if (p1[static_cast<size_t>(x)] <= 0.0) continue;
    auto ctx = prompt;
    ctx.push_back(x);
    const auto py = warped_target(target, ctx, sp0);
    for (int32_t y = 0; y < V; ++y)
      p2[static_cast<size_t>(x * V + y)] = p1[static_cast<size_t>(x)] * py[static_cast<size_t>(y)];
  }
  TwoTokenResult r;
  r.first = chi_square(first, p1);
  r.pairs = chi_square(pairs, p2);
  r.mean_accepted_length = total.mean_accepted_length();
  r.accepted = total.n_accepted;
  r.sampled_nodes = sampled;
  r.pruned = total.n_pruned;
  return r;
}

inline sampling::SamplingParams sampling_params(float temp, int32_t top_k, float top_p, float min_p) {
  sampling::SamplingParams p;
  p.temp = temp;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

}  // namespace treespec::test
