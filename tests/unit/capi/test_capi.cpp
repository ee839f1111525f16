// The C API (include/treespec.h) through the shared library: error paths (a status and
// a message naming the problem, never a crash), tokenizer round trips, streaming,
// cancellation and statistics, on the project's own model (models/kjv-5m.gguf).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "treespec.h"

namespace {

std::string repo_file(const std::string& rel) { return std::string(TREESPEC_SOURCE_DIR) + "/" + rel; }
const std::string kModel = repo_file("models/kjv-5m.gguf");
const std::string kHeads = repo_file("models/kjv-5m.medusa.gguf");
const std::string kEagle = repo_file("models/kjv-5m.eagle.gguf");
const std::string kPrompt = "And it came to pass";

struct ModelHandle {
  treespec_model* m = nullptr;
  ModelHandle() {
    treespec_model_params p = treespec_model_default_params();
    p.n_threads = 1;
    p.n_ctx = 256;
    EXPECT_EQ(treespec_model_load(kModel.c_str(), &p, &m), TREESPEC_OK) << treespec_last_error();
  }
  ~ModelHandle() { treespec_model_free(m); }
};

struct Collected {
  std::string text;
  std::vector<int32_t> tokens;
  int stop_after = -1;  // tokens to accept before asking to stop
  int flushes = 0;
};

int collect(void* ud, int32_t token, const char* piece, size_t len) {
  auto* c = static_cast<Collected*>(ud);
  c->text.append(piece, len);
  if (token < 0) {
    ++c->flushes;
    return 0;
  }
  c->tokens.push_back(token);
  return c->stop_after >= 0 && static_cast<int>(c->tokens.size()) >= c->stop_after ? 1 : 0;
}

treespec_generation_params greedy(int32_t n, const char* spec = "none") {
  treespec_generation_params p = treespec_generation_default_params();
  p.temperature = 0.0f;
  p.max_tokens = n;
  p.ignore_eos = 1;
  p.spec = spec;
  return p;
}

std::string generated(treespec_model* m, const treespec_generation_params& p, Collected* c = nullptr,
                      treespec_stats* st = nullptr) {
  treespec_generation* g = nullptr;
  EXPECT_EQ(treespec_generation_create(m, &p, &g), TREESPEC_OK) << treespec_last_error();
  if (g == nullptr) return "";
  Collected local;
  Collected* cc = c != nullptr ? c : &local;
  EXPECT_EQ(treespec_generate(g, kPrompt.data(), kPrompt.size(), collect, cc), TREESPEC_OK) << treespec_last_error();
  size_t len = 0;
  std::string text(treespec_generation_text(g, &len));
  EXPECT_EQ(text.size(), len);
  if (st != nullptr) {
    EXPECT_EQ(treespec_generation_stats(g, st), TREESPEC_OK);
  }
  treespec_generation_free(g);
  return text;
}

}  // namespace

TEST(CApi, VersionAndNames) {
  EXPECT_EQ(treespec_api_version(), TREESPEC_API_VERSION);
  EXPECT_STRNE(treespec_version(), "");
  EXPECT_STREQ(treespec_status_name(TREESPEC_ERR_IO), "io");
  EXPECT_STREQ(treespec_status_name(static_cast<treespec_status>(99)), "unknown");
}

TEST(CApi, MissingFileIsAnIoErrorNamingIt) {
  treespec_model* m = reinterpret_cast<treespec_model*>(0x1);
  const std::string path = treespec::test::temp_dir() + "/no-such-model.gguf";
  EXPECT_EQ(treespec_model_load(path.c_str(), nullptr, &m), TREESPEC_ERR_IO);
  EXPECT_NE(std::string(treespec_last_error()).find(path), std::string::npos) << treespec_last_error();
  EXPECT_EQ(m, reinterpret_cast<treespec_model*>(0x1));  // untouched on failure
}

TEST(CApi, NotAGgufIsAFormatErrorNamingIt) {
  const std::string path = treespec::test::temp_dir() + "/junk.gguf";
  std::ofstream(path) << "this is not a GGUF file at all, just some text long enough";
  treespec_model* m = nullptr;
  EXPECT_EQ(treespec_model_load(path.c_str(), nullptr, &m), TREESPEC_ERR_FORMAT);
  EXPECT_NE(std::string(treespec_last_error()).find(path), std::string::npos) << treespec_last_error();
  EXPECT_EQ(m, nullptr);
}

TEST(CApi, NullAndOutOfRangeArgumentsAreRefused) {
  treespec_model* m = nullptr;
  EXPECT_EQ(treespec_model_load(nullptr, nullptr, &m), TREESPEC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(treespec_model_load(kModel.c_str(), nullptr, nullptr), TREESPEC_ERR_INVALID_ARGUMENT);
  treespec_model_params p = treespec_model_default_params();
  p.n_threads = -2;
  EXPECT_EQ(treespec_model_load(kModel.c_str(), &p, &m), TREESPEC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(treespec_last_error()).find("n_threads"), std::string::npos) << treespec_last_error();
  size_t n = 0;
  EXPECT_EQ(treespec_tokenize(nullptr, "x", 1, 1, 1, nullptr, 0, &n), TREESPEC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(treespec_generate(nullptr, "x", 1, nullptr, nullptr), TREESPEC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(treespec_generation_create(nullptr, nullptr, nullptr), TREESPEC_ERR_INVALID_ARGUMENT);
  treespec_model_free(nullptr);
  treespec_generation_free(nullptr);
}

TEST(CApi, BadSpecStringsAreRefusedAtCreate) {
  ModelHandle mh;
  ASSERT_NE(mh.m, nullptr);
  struct Case {
    const char* spec;
    treespec_status status;
    std::string needle;
  };
  const std::string missing = treespec::test::temp_dir() + "/missing.heads.gguf";
  const std::string medusa_missing = "medusa:heads=" + missing;
  for (const Case& c : {Case{"fancy", TREESPEC_ERR_INVALID_ARGUMENT, "unknown speculative method 'fancy'"},
                        Case{"lookup:bogus=1", TREESPEC_ERR_INVALID_ARGUMENT, "bogus"},
                        Case{"lookup:draft=x", TREESPEC_ERR_INVALID_ARGUMENT, "lookup:draft=x"},
                        Case{"none:draft=1", TREESPEC_ERR_INVALID_ARGUMENT, "takes no parameters"},
                        Case{"lookup:", TREESPEC_ERR_INVALID_ARGUMENT, "nothing after ':'"},
                        Case{medusa_missing.c_str(), TREESPEC_ERR_IO, missing}}) {
    treespec_generation_params p = greedy(4, c.spec);
    treespec_generation* g = nullptr;
    EXPECT_EQ(treespec_generation_create(mh.m, &p, &g), c.status) << c.spec << ": " << treespec_last_error();
    EXPECT_NE(std::string(treespec_last_error()).find(c.needle), std::string::npos)
        << c.spec << ": " << treespec_last_error();
    EXPECT_EQ(g, nullptr);
  }
  treespec_generation_params p = greedy(4);
  p.top_p = 2.0f;
  treespec_generation* g = nullptr;
  EXPECT_EQ(treespec_generation_create(mh.m, &p, &g), TREESPEC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(treespec_last_error()).find("top_p"), std::string::npos) << treespec_last_error();
  p = greedy(4);
  p.verify = "sloppy";
  EXPECT_EQ(treespec_generation_create(mh.m, &p, &g), TREESPEC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(treespec_last_error()).find("sloppy"), std::string::npos) << treespec_last_error();
}

TEST(CApi, TokenizeDetokenizeRoundTripAndBufferSizes) {
  ModelHandle mh;
  ASSERT_NE(mh.m, nullptr);
  size_t n = 0;
  EXPECT_EQ(treespec_tokenize(mh.m, kPrompt.data(), kPrompt.size(), 1, 1, nullptr, 0, &n),
            TREESPEC_ERR_BUFFER_TOO_SMALL);
  ASSERT_GT(n, 1u);
  std::vector<int32_t> ids(n);
  ASSERT_EQ(treespec_tokenize(mh.m, kPrompt.data(), kPrompt.size(), 1, 1, ids.data(), ids.size(), &n), TREESPEC_OK);
  size_t bytes = 0;
  EXPECT_EQ(treespec_detokenize(mh.m, ids.data(), ids.size(), nullptr, 0, &bytes), TREESPEC_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(bytes, kPrompt.size());
  std::string text(bytes + 1, '?');
  ASSERT_EQ(treespec_detokenize(mh.m, ids.data(), ids.size(), text.data(), text.size(), &bytes), TREESPEC_OK);
  EXPECT_EQ(std::string(text.c_str()), kPrompt);
  const int32_t bad[] = {1, treespec_model_n_vocab(mh.m)};
  EXPECT_EQ(treespec_detokenize(mh.m, bad, 2, text.data(), text.size(), &bytes), TREESPEC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(treespec_last_error()).find("outside the vocabulary"), std::string::npos)
      << treespec_last_error();
}

TEST(CApi, StreamedPiecesConcatenateToTheTextAndStatsAreFilled) {
  ModelHandle mh;
  ASSERT_NE(mh.m, nullptr);
  Collected c;
  treespec_stats st{};
  const std::string text = generated(mh.m, greedy(40), &c, &st);
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(c.text, text);
  EXPECT_EQ(c.tokens.size(), 40u);
  EXPECT_LE(c.flushes, 1);
  EXPECT_EQ(st.n_generated, 40);
  EXPECT_GT(st.n_prompt_tokens, 1);
  EXPECT_EQ(st.finish_reason, TREESPEC_FINISH_LENGTH);
  EXPECT_GE(st.n_steps, 1);
  EXPECT_GE(st.mean_accepted_length, 1.0);
  EXPECT_GT(st.tokens_per_s, 0.0);
  EXPECT_GT(st.decode_s, 0.0);
  // Speculation changes nothing in greedy output, and reports its acceptance.
  treespec_stats sst{};
  EXPECT_EQ(generated(mh.m, greedy(40, "lookup:draft=4:--budget=8"), nullptr, &sst), text);
  EXPECT_GT(sst.n_drafts, 0);
  EXPECT_EQ(generated(mh.m, greedy(40, ("medusa:heads=" + kHeads + ":tree=auto:8").c_str()), nullptr, &sst), text);
  EXPECT_GT(sst.n_draft_tokens, 0);
  EXPECT_GT(sst.mean_accepted_length, 1.0);
  EXPECT_EQ(generated(mh.m, greedy(40, ("eagle:layer=" + kEagle + ":--budget=8").c_str()), nullptr, &sst), text);
  EXPECT_GT(sst.mean_accepted_length, 1.0);
  // "auto" chooses among the methods given (docs/auto.md); its parameters are theirs.
  EXPECT_EQ(generated(mh.m, greedy(40, "auto")), text);
  EXPECT_EQ(generated(mh.m, greedy(40, ("auto:heads=" + kHeads + ":explore=0.05").c_str())), text);
  EXPECT_EQ(generated(mh.m, greedy(40, ("auto:heads=" + kHeads + ":eagle=" + kEagle).c_str())), text);
}

// Sampling with a seed (coupled verification, the default): every spec gives the same
// text; an unseeded run reports the seed it drew, and that seed reproduces it.
TEST(CApi, SeededSamplingIsTheSameForEverySpecAndAnUnseededRunReportsItsSeed) {
  ModelHandle mh;
  ASSERT_NE(mh.m, nullptr);
  auto sampled = [](const char* spec, int64_t seed) {
    treespec_generation_params p = greedy(40, spec);
    p.temperature = 0.9f;
    p.seed = seed;
    return p;
  };
  treespec_stats st{};
  const std::string text = generated(mh.m, sampled("none", 5), nullptr, &st);
  EXPECT_EQ(st.seed, 5u);
  EXPECT_EQ(generated(mh.m, sampled("lookup:draft=4", 5)), text);
  EXPECT_EQ(generated(mh.m, sampled("ptd", 5)), text);
  EXPECT_EQ(generated(mh.m, sampled(("medusa:heads=" + kHeads + ":tree=auto:8").c_str(), 5)), text);
  EXPECT_EQ(generated(mh.m, sampled(("auto:heads=" + kHeads).c_str(), 5)), text);
  EXPECT_EQ(generated(mh.m, sampled(("eagle:layer=" + kEagle).c_str(), 5)), text);
  EXPECT_NE(generated(mh.m, sampled("none", 6)), text) << "the seed is not used";
  const std::string drawn = generated(mh.m, sampled("none", -1), nullptr, &st);
  ASSERT_LT(st.seed, uint64_t{1} << 63);
  EXPECT_EQ(generated(mh.m, sampled("lookup", static_cast<int64_t>(st.seed))), drawn);
}

TEST(CApi, CallbackReturningNonzeroCancels) {
  ModelHandle mh;
  ASSERT_NE(mh.m, nullptr);
  for (const char* spec : {"none", "ptd"}) {
    treespec_generation_params p = greedy(60, spec);
    treespec_generation* g = nullptr;
    ASSERT_EQ(treespec_generation_create(mh.m, &p, &g), TREESPEC_OK) << treespec_last_error();
    Collected c;
    c.stop_after = 5;
    ASSERT_EQ(treespec_generate(g, kPrompt.data(), kPrompt.size(), collect, &c), TREESPEC_OK) << treespec_last_error();
    EXPECT_EQ(c.tokens.size(), 5u) << spec;
    size_t n = 0;
    const int32_t* toks = treespec_generation_tokens(g, &n);
    ASSERT_EQ(n, 5u);
    EXPECT_EQ(std::vector<int32_t>(toks, toks + n), c.tokens);
    EXPECT_EQ(std::string(treespec_generation_text(g, nullptr)), c.text);
    treespec_stats st{};
    ASSERT_EQ(treespec_generation_stats(g, &st), TREESPEC_OK);
    EXPECT_EQ(st.finish_reason, TREESPEC_FINISH_CANCELLED);
    EXPECT_EQ(st.n_generated, 5);
    // The same generation runs again, from scratch, to the end.
    Collected all;
    ASSERT_EQ(treespec_generate(g, kPrompt.data(), kPrompt.size(), collect, &all), TREESPEC_OK);
    EXPECT_EQ(all.tokens.size(), 60u);
    EXPECT_EQ(std::vector<int32_t>(all.tokens.begin(), all.tokens.begin() + 5), c.tokens);
    treespec_generation_free(g);
  }
}

TEST(CApi, BadPromptsGiveAStatusNotACrash) {
  ModelHandle mh;
  ASSERT_NE(mh.m, nullptr);
  treespec_generation_params p = greedy(4);
  treespec_generation* g = nullptr;
  ASSERT_EQ(treespec_generation_create(mh.m, &p, &g), TREESPEC_OK);
  EXPECT_EQ(treespec_generate_tokens(g, nullptr, 0, nullptr, nullptr), TREESPEC_ERR_INVALID_ARGUMENT);
  EXPECT_STRNE(treespec_last_error(), "");
  const int32_t out_of_vocab[] = {1, 1 << 30};
  EXPECT_EQ(treespec_generate_tokens(g, out_of_vocab, 2, nullptr, nullptr), TREESPEC_ERR_INVALID_ARGUMENT);
  EXPECT_STRNE(treespec_last_error(), "");
  std::vector<int32_t> too_long(300, 1);  // n_ctx is 256
  EXPECT_EQ(treespec_generate_tokens(g, too_long.data(), too_long.size(), nullptr, nullptr),
            TREESPEC_ERR_INVALID_ARGUMENT);
  EXPECT_STRNE(treespec_last_error(), "");
  // Still usable afterwards.
  EXPECT_EQ(treespec_generate(g, kPrompt.data(), kPrompt.size(), nullptr, nullptr), TREESPEC_OK)
      << treespec_last_error();
  treespec_generation_free(g);
}

namespace {
// Runs a generation with `setup` applied after create; returns the text and the ids.
struct CapiRun {
  std::string text;
  std::vector<int32_t> tokens;
};
template <class F>
CapiRun run_with(treespec_model* m, const treespec_generation_params& p, F&& setup) {
  CapiRun out;
  treespec_generation* g = nullptr;
  EXPECT_EQ(treespec_generation_create(m, &p, &g), TREESPEC_OK) << treespec_last_error();
  if (g == nullptr) return out;
  setup(g);
  EXPECT_EQ(treespec_generate(g, kPrompt.data(), kPrompt.size(), nullptr, nullptr), TREESPEC_OK)
      << treespec_last_error();
  out.text = treespec_generation_text(g, nullptr);
  size_t n = 0;
  const int32_t* ids = treespec_generation_tokens(g, &n);
  out.tokens.assign(ids, ids + n);
  treespec_generation_free(g);
  return out;
}
std::string run_cli_text(const std::string& flags) {
  const treespec::test::CliResult r =
      treespec::test::run_treespec("run -m " + kModel + " -t 1 -c 256 -p '" + kPrompt + "' " + flags + " --json");
  EXPECT_EQ(r.status, 0) << r.err;
  return r.status == 0 ? nlohmann::json::parse(r.out)["text"].get<std::string>() : std::string();
}
}  // namespace

TEST(CApi, PenaltiesTypicalPAndLogitBiasMatchRunAndEveryMethod) {
  ModelHandle mh;
  ASSERT_NE(mh.m, nullptr);
  auto none = [](treespec_generation*) {};
  const CapiRun plain = run_with(mh.m, greedy(32), none);
  ASSERT_GE(plain.tokens.size(), 2u);
  // Penalties and a bias (ban the first greedy token, favour the second).
  const int32_t ids[2] = {plain.tokens[0], plain.tokens[1]};
  const float biases[2] = {-INFINITY, 2.0f};
  auto shaped = [&](treespec_generation* g) {
    EXPECT_EQ(treespec_generation_set_penalties(g, 1.3f, 32, 0.1f, 0.4f), TREESPEC_OK) << treespec_last_error();
    EXPECT_EQ(treespec_generation_set_logit_bias(g, ids, biases, 2), TREESPEC_OK) << treespec_last_error();
  };
  const CapiRun want = run_with(mh.m, greedy(32), shaped);
  EXPECT_NE(want.text, plain.text);
  EXPECT_EQ(std::count(want.tokens.begin(), want.tokens.end(), plain.tokens[0]), 0);
  for (const char* spec : {"lookup", "ptd", "lookahead"})
    EXPECT_EQ(run_with(mh.m, greedy(32, spec), shaped).text, want.text) << spec;
  const std::string cli = run_cli_text(
      "-n 32 --temp 0 --ignore-eos --repeat-penalty 1.3 --repeat-last-n 32 --frequency-penalty 0.1 "
      "--presence-penalty 0.4 -l " +
      std::to_string(ids[0]) + "-inf -l " + std::to_string(ids[1]) + "+2");
  EXPECT_EQ(cli, want.text);
  // Typical-p, sampled: the same tokens with every method, and as run prints them.
  treespec_generation_params s = greedy(32);
  s.temperature = 1.0f;
  s.seed = 9;
  auto typical = [](treespec_generation* g) { EXPECT_EQ(treespec_generation_set_typical_p(g, 0.5f), TREESPEC_OK); };
  const CapiRun t = run_with(mh.m, s, typical);
  EXPECT_NE(run_with(mh.m, s, none).text, t.text);
  s.spec = "lookup";
  EXPECT_EQ(run_with(mh.m, s, typical).text, t.text);
  EXPECT_EQ(run_cli_text("-n 32 --temp 1 -s 9 --ignore-eos --typical 0.5"), t.text);
}

TEST(CApi, CacheTypesAreThoseOfRunAndUnknownNamesAreRefused) {
  treespec_model_params p = treespec_model_default_params();
  p.n_threads = 1;
  p.n_ctx = 256;
  treespec_model* m = nullptr;
  // Unknown names: refused before the file is read, naming the parameter and the name.
  EXPECT_EQ(treespec_model_load_with_cache_types(kModel.c_str(), &p, "q4_0", nullptr, &m),
            TREESPEC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(m, nullptr);
  EXPECT_NE(std::string(treespec_last_error()).find("cache_type_k: unknown KV cache type 'q4_0'"), std::string::npos)
      << treespec_last_error();
  EXPECT_EQ(treespec_model_load_with_cache_types(kModel.c_str(), &p, "f16", "int4", &m), TREESPEC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(treespec_last_error()).find("cache_type_v"), std::string::npos) << treespec_last_error();
  EXPECT_EQ(treespec_model_cache_type_k(nullptr), nullptr);
  // NULL is the default (f16, as treespec_model_load and run).
  ASSERT_EQ(treespec_model_load_with_cache_types(kModel.c_str(), &p, nullptr, nullptr, &m), TREESPEC_OK)
      << treespec_last_error();
  EXPECT_STREQ(treespec_model_cache_type_k(m), "f16");
  EXPECT_STREQ(treespec_model_cache_type_v(m), "f16");
  treespec_model_free(m);
  m = nullptr;
  // Q8_0 keys and values (names are case-insensitive, as -ctk): every method's greedy
  // text is plain greedy's with that cache, and run's with -ctk q8_0 -ctv q8_0.
  ASSERT_EQ(treespec_model_load_with_cache_types(kModel.c_str(), &p, "Q8_0", "q8_0", &m), TREESPEC_OK)
      << treespec_last_error();
  EXPECT_STREQ(treespec_model_cache_type_k(m), "q8_0");
  EXPECT_STREQ(treespec_model_cache_type_v(m), "q8_0");
  auto none = [](treespec_generation*) {};
  const std::string plain = run_with(m, greedy(48), none).text;
  EXPECT_EQ(run_cli_text("-n 48 --temp 0 --ignore-eos -ctk q8_0 -ctv q8_0"), plain);
  for (const char* spec : {"lookup", "ptd", "lookahead"})
    EXPECT_EQ(run_with(m, greedy(48, spec), none).text, plain) << spec;
  const std::string medusa = "medusa:heads=" + kHeads;
  EXPECT_EQ(run_with(m, greedy(48, medusa.c_str()), none).text, plain);
  treespec_model_free(m);
}

TEST(CApi, BadSamplingSettersAreRefusedAndLeaveTheGenerationAsItWas) {
  ModelHandle mh;
  ASSERT_NE(mh.m, nullptr);
  const std::string want = generated(mh.m, greedy(16));
  treespec_generation_params p = greedy(16);
  treespec_generation* g = nullptr;
  ASSERT_EQ(treespec_generation_create(mh.m, &p, &g), TREESPEC_OK) << treespec_last_error();
  struct Case {
    treespec_status st;
    const char* needle;
  };
  const int32_t out_of_vocab = treespec_model_n_vocab(mh.m);
  const int32_t ok_id = 5;
  const float nan_bias = NAN, inf_bias = INFINITY, one = 1.0f;
  const std::vector<Case> cases = {{treespec_generation_set_penalties(g, 0.0f, 64, 0.0f, 0.0f), "repeat_penalty"},
                                   {treespec_generation_set_penalties(g, 1.1f, -2, 0.0f, 0.0f), "repeat_last_n"},
                                   {treespec_generation_set_penalties(g, 1.1f, 64, 3.0f, 0.0f), "frequency_penalty"},
                                   {treespec_generation_set_typical_p(g, 1.5f), "typical_p"},
                                   {treespec_generation_set_logit_bias(g, &out_of_vocab, &one, 1), "vocabulary"},
                                   {treespec_generation_set_logit_bias(g, &ok_id, &nan_bias, 1), "logit_bias"},
                                   {treespec_generation_set_logit_bias(g, &ok_id, &inf_bias, 1), "logit_bias"},
                                   {treespec_generation_set_logit_bias(g, nullptr, nullptr, 1), "NULL"},
                                   {treespec_generation_set_typical_p(nullptr, 0.5f), "NULL"}};
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(cases[i].st, TREESPEC_ERR_INVALID_ARGUMENT) << i;
  // (The message of the last call is the one still readable.)
  EXPECT_NE(std::string(treespec_last_error()).find("NULL"), std::string::npos) << treespec_last_error();
  EXPECT_EQ(treespec_generation_set_typical_p(g, 1.5f), TREESPEC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(treespec_last_error()).find("typical_p"), std::string::npos) << treespec_last_error();
  EXPECT_EQ(treespec_generation_set_logit_bias(g, &out_of_vocab, &one, 1), TREESPEC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(treespec_last_error()).find(std::to_string(out_of_vocab)), std::string::npos)
      << treespec_last_error();
  ASSERT_EQ(treespec_generate(g, kPrompt.data(), kPrompt.size(), nullptr, nullptr), TREESPEC_OK)
      << treespec_last_error();
  EXPECT_EQ(std::string(treespec_generation_text(g, nullptr)), want);
  EXPECT_EQ(treespec_generation_set_logit_bias(g, nullptr, nullptr, 0), TREESPEC_OK);  // clears
  treespec_generation_free(g);
}
