// Measurement (not a check): PTD vs the other training-free methods on the stories260K
// golden prompts, and the effect of each fix over the reference code. Disabled by
// default; run with
//   ./build/tests/test_ptd --gtest_also_run_disabled_tests --gtest_filter='PtdMeasure.*'
// It prints markdown tables. Greedy runs are also checked against the goldens. Timings are
// wall-clock on whatever machine runs it: compare ratios within one run only. The context
// is 512 cells (stories260K's training length), so no budget is clamped by the context
// end (the golden tests use 256, where the last steps of a 256-token golden get less room).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "common/golden.h"
#include "common/test_util.h"
#include "core/timer.h"
#include "drafters/factory.h"
#include "drafters/ptd/ptd_drafter.h"

using namespace treespec;

namespace {

struct Result {
  engine::SpecStats stats;
  std::map<std::string, double> drafter;  // counters summed over sequences (max_* : max)
  double wall_s = 0.0;
  int64_t mismatches = 0;
};

struct RunSpec {
  drafters::SpecConfig cfg;
  int32_t n_seq = 1;
  float temp = 0.0f;
  verify::Mode mode = verify::Mode::lossless;
  uint64_t seed = 1;
};

Result run_goldens(const test::StoriesModel& m, const RunSpec& rs) {
  const auto goldens = test::load_goldens();
  engine::EngineParams ep;
  ep.n_threads = 1;
  ep.n_ctx = 512;
  ep.n_slots = rs.n_seq;
  engine::Engine eng(*m.model, ep);
  eng.set_eog_ids(m.tok->eog_ids());
  Result r;
  const double t0 = core::now_s();
  for (size_t b = 0; b < goldens.size(); b += static_cast<size_t>(rs.n_seq)) {
    std::vector<std::unique_ptr<engine::Sequence>> seqs;
    std::vector<engine::Sequence*> ptrs;
    for (size_t i = b; i < goldens.size() && i < b + static_cast<size_t>(rs.n_seq); ++i) {
      engine::SequenceParams sp;
      sp.sampling.temp = rs.temp;
      sp.sampling.top_k = 0;
      sp.sampling.top_p = 1.0f;
      sp.sampling.min_p = 0.0f;
      sp.sampling.seed = rs.seed * 1000 + i;
      sp.mode = rs.mode;
      sp.n_predict = goldens[i].n_predict();
      auto d = drafters::make_drafter(rs.cfg, drafters::DrafterEnv{m.model.get(), m.tok->eog_ids(), sp.sampling.seed});
      seqs.push_back(std::make_unique<engine::Sequence>(goldens[i].prompt_tokens, sp, std::move(d)));
      EXPECT_TRUE(eng.add(*seqs.back()).ok());
      ptrs.push_back(seqs.back().get());
    }
    for (int guard = 0; guard < 100000; ++guard) {
      bool all = true;
      for (auto* s : ptrs) all &= s->finished();
      if (all) break;
      eng.step(ptrs);
    }
    for (size_t k = 0; k < seqs.size(); ++k) {
      if (rs.temp <= 0.0f && seqs[k]->generated() != goldens[b + k].generated_tokens) ++r.mismatches;
      r.stats.merge(seqs[k]->stats());
      for (const auto& [name, v] : seqs[k]->drafter().counters()) {
        double& acc = r.drafter[name];
        acc = name.rfind("max_", 0) == 0 ? std::max(acc, v) : acc + v;  // maxima: max over sequences
      }
    }
  }
  r.wall_s = core::now_s() - t0;
  return r;
}

drafters::SpecConfig method(const std::string& name) {
  drafters::SpecConfig c;
  c.method = name;
  return c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

TEST(PtdMeasure, DISABLED_MethodsOnGoldens) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = test::load_stories();
  std::vector<std::string> methods;
  for (const char* name : {"none", "lookup", "lookahead", "ptd"}) {
    const auto known = drafters::spec_methods();
    if (std::find(known.begin(), known.end(), name) != known.end()) methods.push_back(name);
  }
  const int rounds = 3;
  std::printf("\nstories260K, 10 golden prompts, greedy, 1 thread, %d interleaved rounds (tok/s: median)\n\n", rounds);
  std::printf(
      "| method | batch | mean accepted length | rows/step | draft rows/step | trie rows/step | tok/s | tok/s vs none "
      "|\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (int32_t n_seq : {1, 4}) {
    std::map<std::string, std::vector<double>> tps;
    std::map<std::string, Result> last;
    for (int r = 0; r < rounds; ++r) {
      for (const auto& name : methods) {
        RunSpec rs;
        rs.cfg = method(name);
        rs.n_seq = n_seq;
        Result res = run_goldens(m, rs);
        EXPECT_EQ(res.mismatches, 0) << name;
        tps[name].push_back(static_cast<double>(res.stats.n_generated) / res.wall_s);
        last[name] = std::move(res);
      }
    }
    const double base = median(tps["none"]);
    for (const auto& name : methods) {
      const Result& r = last[name];
      const double steps = r.drafter.count("steps") ? r.drafter.at("steps") : 0.0;
      auto per = [&](const char* k) { return steps > 0 && r.drafter.count(k) ? r.drafter.at(k) / steps : 0.0; };
      std::printf("| %s | %d | %.3f | %.1f | %.1f | %.1f | %.0f | %.2fx |\n", name.c_str(), n_seq,
                  r.stats.mean_accepted_length(), r.stats.rows_per_step(), per("draft_rows"), per("trie_rows"),
                  median(tps[name]), median(tps[name]) / base);
    }
  }
}

TEST(PtdMeasure, DISABLED_FixEffects) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = test::load_stories();
  struct Variant {
    std::string name;
    drafters::PtdParams p;
  };
  std::vector<Variant> vs;
  vs.push_back({"all fixes (default)", {}});
  {
    Variant v{"real_eos off (EOS id 2)", {}};
    v.p.real_eos = false;
    vs.push_back(v);
  }
  {
    Variant v{"reinsert off", {}};
    v.p.reinsert = false;
    vs.push_back(v);
  }
  {
    Variant v{"live_feedback off (snapshot)", {}};
    v.p.live_feedback = false;
    vs.push_back(v);
  }
  {
    Variant v{"reference (all three off)", {}};
    v.p.real_eos = false;
    v.p.reinsert = false;
    v.p.live_feedback = false;
    vs.push_back(v);
  }
  const std::vector<uint64_t> seeds{1, 2, 3};
  std::printf("\nPTD fix effects, stories260K goldens, greedy, batch 1, drafter seeds 1-3 (mean [min, max])\n\n");
  std::printf(
      "| variant | mean accepted length | rows/step | draft rows/step | trie rows/step | pool nodes at end | snapshot "
      "replacements | eos cuts |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const auto& v : vs) {
    std::vector<double> acc;
    double rows = 0, drows = 0, trows = 0, pool = 0, repl = 0, eos = 0;
    for (uint64_t seed : seeds) {
      RunSpec rs;
      rs.cfg.method = "ptd";
      rs.cfg.params<drafters::PtdParams>() = v.p;
      rs.seed = seed;
      const Result r = run_goldens(m, rs);
      EXPECT_EQ(r.mismatches, 0) << v.name;
      const double steps = r.drafter.at("steps");
      acc.push_back(r.stats.mean_accepted_length());
      rows += r.stats.rows_per_step();
      drows += r.drafter.at("draft_rows") / steps;
      trows += r.drafter.at("trie_rows") / steps;
      pool += r.drafter.at("pool_nodes");
      repl += r.drafter.at("snapshot_replacements");
      eos += r.drafter.at("eos_cuts");
    }
    const double n = static_cast<double>(seeds.size());
    double mean = 0;
    for (double a : acc) mean += a / n;
    std::printf("| %s | %.3f [%.3f, %.3f] | %.1f | %.1f | %.1f | %.0f | %.1f | %.1f |\n", v.name.c_str(), mean,
                *std::min_element(acc.begin(), acc.end()), *std::max_element(acc.begin(), acc.end()), rows / n,
                drows / n, trows / n, pool / n, repl / n, eos / n);
  }

  // Sampling: the lossless verifier vs the reference's argmax-fallback walk, several seeds.
  std::printf("\nPTD sampling, stories260K goldens, batch 1, top-k/top-p/min-p off, 5 seeds each\n\n");
  std::printf("| temp | verifier | mean accepted length | acceptance rate |\n|---|---|---|---|\n");
  for (float temp : {0.5f, 1.0f}) {
    for (verify::Mode mode : {verify::Mode::lossless, verify::Mode::ptd_reference}) {
      engine::SpecStats total;
      for (uint64_t seed = 1; seed <= 5; ++seed) {
        RunSpec rs;
        rs.cfg.method = "ptd";
        rs.temp = temp;
        rs.mode = mode;
        rs.seed = seed;
        total.merge(run_goldens(m, rs).stats);
      }
      std::printf("| %.1f | %s | %.3f | %.3f |\n", temp, verify::mode_name(mode), total.mean_accepted_length(),
                  total.acceptance_rate());
    }
  }
}
