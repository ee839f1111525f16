// Engine-level limits (docs/reliability.md): context overflow mid-generation, n_predict
// 0 and huge, thread counts, empty and special-only prompts, invalid UTF-8 prompts, and
// KV caches larger than the machine's memory. Each is a documented outcome, never a
// crash.
#include <gtest/gtest.h>

#include <climits>
#include <memory>

#include "common/test_util.h"
#include "common/tiny_model.h"
#include "core/memory.h"
#include "drafters/factory.h"
#include "engine/engine.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "treespec/status.h"

using namespace treespec;

namespace {

// One tiny SPM model (vocab 64: <unk> <s> </s> t3 ...) shared by the tests.
const model::Model& tiny() {
  static const std::unique_ptr<model::Model> m = [] {
    const std::string path = test::temp_dir() + "/tiny.gguf";
    test::write_tiny_model(path, test::TinyModelConfig{});
    return model::Model::load(path);
  }();
  return *m;
}

engine::EngineParams params(int32_t n_ctx) {
  engine::EngineParams p;
  p.n_threads = 1;
  p.n_ctx = n_ctx;
  return p;
}

engine::SequenceParams greedy(int32_t n_predict) {
  engine::SequenceParams sp;
  sp.sampling.temp = 0.0f;
  sp.n_predict = n_predict;
  sp.ignore_eog = true;
  return sp;
}

std::unique_ptr<drafters::Drafter> drafter(const std::string& method) {
  drafters::SpecConfig cfg;
  cfg.method = method;
  drafters::DrafterEnv env{&tiny(), {}, 1};
  return drafters::make_drafter(cfg, env);
}

}  // namespace

// A sequence of n_ctx cells emits at most n_ctx - n_prompt + 1 tokens, then finishes
// with reason `context` (not an error), with and without speculation (trees are clamped
// to the free cells).
TEST(EngineLimits, ContextOverflowMidGenerationFinishesWithContext) {
  for (const std::string method : {"none", "lookup"}) {
    engine::Engine eng(tiny(), params(8));
    engine::Sequence seq({1, 5, 6}, greedy(-1), drafter(method));
    ASSERT_TRUE(eng.generate(seq).ok());
    EXPECT_EQ(seq.finish_reason(), engine::FinishReason::context) << method;
    EXPECT_EQ(seq.generated().size(), 8u - 3u + 1u) << method;
    EXPECT_EQ(eng.free_slots(), 1) << method;
    EXPECT_EQ(eng.kv().n_free_blocks(), eng.kv().n_blocks()) << method;  // released: its blocks are back
  }
}

// The prompt filling the context exactly still yields its one token.
TEST(EngineLimits, PromptFillingTheContextYieldsOneToken) {
  engine::Engine eng(tiny(), params(4));
  engine::Sequence seq({1, 5, 6, 7}, greedy(-1), nullptr);
  ASSERT_TRUE(eng.generate(seq).ok());
  EXPECT_EQ(seq.finish_reason(), engine::FinishReason::context);
  EXPECT_EQ(seq.generated().size(), 1u);
}

TEST(EngineLimits, PromptLongerThanContextIsInvalidArgument) {
  engine::Engine eng(tiny(), params(4));
  engine::Sequence seq({1, 5, 6, 7, 8}, greedy(-1), nullptr);
  try {
    (void)eng.generate(seq);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("prompt has 5 tokens but the context holds 4"), std::string::npos) << e.what();
  }
  EXPECT_EQ(eng.free_slots(), 1);
}

TEST(EngineLimits, NPredictZeroGeneratesNothingAndTakesNoSlot) {
  engine::Engine eng(tiny(), params(16));
  engine::Sequence seq({1, 5}, greedy(0), nullptr);
  ASSERT_TRUE(eng.generate(seq).ok());
  EXPECT_TRUE(seq.generated().empty());
  EXPECT_EQ(seq.finish_reason(), engine::FinishReason::length);
  EXPECT_EQ(eng.free_slots(), 1);
}

TEST(EngineLimits, HugeNPredictIsBoundedByTheContext) {
  engine::Engine eng(tiny(), params(12));
  engine::Sequence seq({1, 5}, greedy(INT32_MAX), drafter("lookup"));
  ASSERT_TRUE(eng.generate(seq).ok());
  EXPECT_EQ(seq.finish_reason(), engine::FinishReason::context);
  EXPECT_EQ(seq.generated().size(), 12u - 2u + 1u);
}

TEST(EngineLimits, BadEngineParametersAreInvalidArgument) {
  auto expect_invalid = [](engine::EngineParams p, const char* what) {
    try {
      engine::Engine eng(tiny(), p);
      ADD_FAILURE() << "expected InvalidArgument for " << what;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  engine::EngineParams p = params(16);
  p.n_threads = 0;
  expect_invalid(p, "thread count must be >= 1, got 0");
  p.n_threads = -4;
  expect_invalid(p, "thread count must be >= 1, got -4");
  p = params(0);
  expect_invalid(p, "context size must be >= 1, got 0");
  p = params(-5);
  expect_invalid(p, "context size must be >= 1, got -5");
  p = params(16);
  p.n_batch = 0;
  expect_invalid(p, "batch size must be >= 1");
  p = params(16);
  p.n_slots = 0;
  expect_invalid(p, "sequence slot count must be >= 1");
}

// An empty token list has nothing to condition on: a clear error, not ids.back() of an
// empty vector. A BOS-only prompt (what an empty text encodes to) generates normally.
TEST(EngineLimits, EmptyPromptIsInvalidArgumentAndBosOnlyGenerates) {
  engine::Engine eng(tiny(), params(16));
  engine::Sequence empty({}, greedy(4), nullptr);
  try {
    (void)eng.generate(empty);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("prompt is empty"), std::string::npos) << e.what();
  }
  EXPECT_EQ(eng.free_slots(), 1);
  engine::Sequence bos({1}, greedy(4), nullptr);
  ASSERT_TRUE(eng.generate(bos).ok());
  EXPECT_EQ(bos.generated().size(), 4u);
}

TEST(EngineLimits, PromptTokenOutsideTheVocabularyIsInvalidArgument) {
  engine::Engine eng(tiny(), params(16));
  for (int32_t bad : {-1, 64, INT32_MAX}) {
    engine::Sequence seq({1, bad}, greedy(4), nullptr);
    EXPECT_THROW((void)eng.generate(seq), InvalidArgument) << bad;
    EXPECT_EQ(eng.free_slots(), 1);
  }
}

// A prompt of only special tokens (BOS, EOS, BOS) is a prompt like any other; ending in
// EOS does not end generation (only generated EOG tokens do).
TEST(EngineLimits, PromptOfOnlySpecialTokensGenerates) {
  engine::Engine eng(tiny(), params(16));
  engine::SequenceParams sp = greedy(3);
  sp.ignore_eog = false;
  engine::Sequence seq({1, 2, 1, 2}, sp, nullptr);
  ASSERT_TRUE(eng.generate(seq).ok());
  EXPECT_TRUE(seq.finished());
  EXPECT_NE(seq.finish_reason(), engine::FinishReason::none);
}

// Refused before allocating, with a message naming the bytes requested and available.
TEST(KvMemory, CacheLargerThanAvailableMemoryIsRefusedBeforeAllocating) {
  // 2^12 layers x 2^6 heads x 2^8 dims x 2^30 cells x 8 bytes = 2^59 bytes: no machine.
  const kv::KvShape shape{4096, 64, 256, 1, 1 << 30};
  EXPECT_EQ(kv::KvCache::required_bytes(shape), uint64_t{1} << 59);
  try {
    kv::KvCache kv(shape);
    FAIL() << "expected an out-of-memory Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("out of memory: the KV cache"), std::string::npos) << msg;
    EXPECT_NE(msg.find("576460752303423488 bytes"), std::string::npos) << msg;  // 2^59, exact
    EXPECT_NE(msg.find("are available"), std::string::npos) << msg;
  }
}

TEST(KvMemory, SizeOverflowIsAnErrorNotAWrapAround) {
  const kv::KvShape shape{INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX};
  try {
    (void)kv::KvCache::required_bytes(shape);
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more bytes than this machine can address"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kv::KvCache kv(shape), Error);
}

TEST(KvMemory, AvailableMemoryIsPositiveAndNamesItsSource) {
  const core::MemoryInfo m = core::available_memory();
  EXPECT_GT(m.available, 0u);
  EXPECT_FALSE(m.source.empty());
  EXPECT_EQ(core::format_bytes(1536), "1536 bytes (1.5 KiB)");
}

// The engine checks memory before the context cap, so a huge -c reports what it needs.
TEST(KvMemory, EngineRefusesHugeContextBeforeAllocating) {
  engine::EngineParams p = params(2'000'000'000);  // tiny(): 256 bytes per cell -> 512 GB
  const uint64_t need = kv::KvCache::required_bytes(engine::engine_kv_shape(tiny(), p));
  if (need <= core::available_memory().available) GTEST_SKIP() << "this machine has " << need << " bytes available";
  try {
    engine::Engine eng(tiny(), p);
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory: the KV cache"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(need) + " bytes"), std::string::npos) << e.what();
  }
}

TEST(KvMemory, ContextAboveTheCapIsInvalidArgumentWhenMemoryAllows) {
  engine::EngineParams p = params(engine::kMaxContext + 1);
  const uint64_t need = kv::KvCache::required_bytes(engine::engine_kv_shape(tiny(), p));
  if (need > core::available_memory().available) GTEST_SKIP() << "not enough memory to reach the cap check";
  try {
    engine::Engine eng(tiny(), p);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("is larger than 16777216"), std::string::npos) << e.what();
  }
}
