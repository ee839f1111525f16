// SpecStats: vLLM counter definitions, our per-step mean, merge and JSON.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/stats.h"

using treespec::engine::SpecStats;

TEST(SpecStats, CountersFollowVllmDefinitions) {
  SpecStats s;
  s.record_step(1, 0, 0, 0);   // plain step: no draft
  s.record_step(9, 3, 6, 2);   // drafted 6 tokens up to depth 3, accepted 2
  s.record_step(20, 4, 8, 4);  // accepted 4 (a full branch)
  s.record_step(5, 1, 4, 0);
  EXPECT_EQ(s.n_steps, 4);
  EXPECT_EQ(s.n_drafts, 3);
  EXPECT_EQ(s.n_draft_tokens, 18);
  EXPECT_EQ(s.n_accepted, 6);
  EXPECT_EQ(s.n_rows, 35);
  EXPECT_EQ(s.accepted_per_pos, (std::vector<int64_t>{2, 2, 1, 1}));
  EXPECT_EQ(s.drafted_per_pos, (std::vector<int64_t>{3, 2, 2, 1}));
  EXPECT_DOUBLE_EQ(s.acceptance_rate(), 6.0 / 18.0);
  EXPECT_DOUBLE_EQ(s.mean_accepted_length(), (6.0 + 4.0) / 4.0);  // per step, plain steps included
  EXPECT_DOUBLE_EQ(s.mean_acceptance_length(), 1.0 + 6.0 / 3.0);  // vLLM: per draft
  EXPECT_DOUBLE_EQ(s.rows_per_step(), 35.0 / 4.0);
  const auto j = s.to_json();
  EXPECT_EQ(j.at("num_drafts"), 3);
  EXPECT_EQ(j.at("num_draft_tokens"), 18);
  EXPECT_EQ(j.at("num_accepted_tokens"), 6);
  EXPECT_EQ(j.at("steps"), 4);
  EXPECT_EQ(j.at("rows_fed"), 35);
  EXPECT_EQ(j.at("accepted_per_pos").get<std::vector<int64_t>>(), s.accepted_per_pos);
  const auto per_pos = j.at("per_pos_acceptance_rate").get<std::vector<double>>();
  ASSERT_EQ(per_pos.size(), 4u);
  EXPECT_DOUBLE_EQ(per_pos[0], 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(per_pos[3], 1.0 / 3.0);
  const auto by_depth = j.at("acceptance_by_depth").get<std::vector<double>>();
  EXPECT_DOUBLE_EQ(by_depth[0], 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(by_depth[1], 1.0);
  EXPECT_DOUBLE_EQ(by_depth[3], 1.0);
  for (const char* key : {"draft", "forward", "verify", "commit"}) EXPECT_TRUE(j.at("time_s").contains(key)) << key;
  for (const char* key :
       {"mean_accepted_length", "mean_acceptance_length", "rows_per_step", "tokens_per_s", "acceptance_rate"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  const std::string line = s.summary();
  for (const char* frag :
       {"tok/step", "rows/step", "3 drafts", "18 drafted", "6 accepted", "draft", "forward", "verify", "commit"}) {
    EXPECT_NE(line.find(frag), std::string::npos) << frag << " missing from: " << line;
  }
}

TEST(SpecStats, MergeAddsEverything) {
  SpecStats a, b;
  a.record_step(3, 2, 2, 1);
  a.t_draft = 1.0;
  b.record_step(7, 5, 6, 5);
  b.record_step(1, 0, 0, 0);
  b.t_forward = 2.0;
  a.merge(b);
  EXPECT_EQ(a.n_steps, 3);
  EXPECT_EQ(a.n_drafts, 2);
  EXPECT_EQ(a.n_accepted, 6);
  EXPECT_EQ(a.accepted_per_pos, (std::vector<int64_t>{2, 1, 1, 1, 1}));
  EXPECT_EQ(a.drafted_per_pos, (std::vector<int64_t>{2, 2, 1, 1, 1}));
  EXPECT_DOUBLE_EQ(a.t_decode(), 3.0);
  SpecStats empty;
  EXPECT_DOUBLE_EQ(empty.mean_accepted_length(), 0.0);
  EXPECT_DOUBLE_EQ(empty.mean_acceptance_length(), 1.0);
  EXPECT_DOUBLE_EQ(empty.tokens_per_s(), 0.0);
}
