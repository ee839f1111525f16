// Model files truncated before and after loading.
//   Before: the reader checks every tensor against the file size, so loading fails with
//   a FormatError naming the first tensor whose data runs past the end.
//   After (the file shrinks under the mapping): touching a page past the new end raises
//   SIGBUS; with core::install_mapped_file_fault_handler (the treespec tool installs it)
//   the process prints one line naming the file and exits with status 1.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "common/test_util.h"
#include "common/tiny_model.h"
#include "core/mapped_files.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "treespec/status.h"

using namespace treespec;

namespace {

// The tensor whose data ends last in the file (the one a truncation cuts first).
std::string last_tensor(const std::string& path) {
  const auto f = gguf::GgufFile::open(path);
  const gguf::TensorInfo* last = nullptr;
  for (const auto& t : f->tensors()) {
    if (!last || t.offset > last->offset) last = &t;
  }
  return last->name;
}

}  // namespace

TEST(Truncation, FileTruncatedBeforeLoadNamesTheTensor) {
  const std::string path = test::temp_dir() + "/tiny.gguf";
  test::write_tiny_model(path, test::TinyModelConfig{});
  const std::string victim = last_tensor(path);
  const auto size = std::filesystem::file_size(path);
  for (uint64_t cut : {uint64_t{1}, uint64_t{100}}) {
    std::filesystem::resize_file(path, size - cut);
    try {
      (void)model::Model::load(path);
      FAIL() << "expected FormatError";
    } catch (const FormatError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find("tensor '" + victim + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("past the end of the file"), std::string::npos) << msg;
    }
  }
  // Cut inside the header: still a FormatError, never a crash.
  std::filesystem::resize_file(path, 40);
  EXPECT_THROW((void)model::Model::load(path), FormatError);
}

TEST(Truncation, RegistryNamesOnlyLiveMappings) {
  const int h = core::register_mapped_file(reinterpret_cast<const void*>(0x1000), 10, "x.gguf");
  EXPECT_GE(h, 0);
  core::unregister_mapped_file(h);
  core::unregister_mapped_file(-1);  // no-op
  core::unregister_mapped_file(core::kMaxMappedFiles);
}

using TruncationDeathTest = ::testing::Test;

TEST(TruncationDeathTest, FileTruncatedAfterLoadIsAClearErrorWithTheGuard) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string path = test::temp_dir() + "/tiny.gguf";
  test::write_tiny_model(path, test::TinyModelConfig{});
  EXPECT_EXIT(
      {
        core::install_mapped_file_fault_handler();
        auto m = model::Model::load(path);
        engine::EngineParams p;
        p.n_ctx = 16;
        engine::Engine eng(*m, p);
        std::filesystem::resize_file(path, 0);  // every page of the mapping is now past the end
        engine::SequenceParams sp;
        sp.sampling.temp = 0.0f;
        sp.n_predict = 4;
        engine::Sequence seq({1, 5, 6}, sp, nullptr);
        (void)eng.generate(seq);
        std::_Exit(0);  // not reached: the weights are read from the mapping
      },
      ::testing::ExitedWithCode(core::kMappedFileFaultExit),
      "model file '.*tiny.gguf' was truncated or rewritten while in use");
}

// Without the guard a fault outside any registered mapping keeps its default action.
TEST(TruncationDeathTest, UnregisteredBusErrorStillCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        core::install_mapped_file_fault_handler();
        ::raise(SIGBUS);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}
