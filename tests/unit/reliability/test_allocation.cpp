// Allocation sizes at the edge of size_t.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/aligned_buffer.h"
#include "treespec/status.h"

using namespace treespec;

// Regression (found while triaging the first sanitizer run): rounding SIZE_MAX - 10
// bytes up to the 64-byte alignment wrapped around to a 0-byte allocation, which then
// succeeded; the buffer claimed SIZE_MAX - 10 elements backed by nothing.
TEST(Allocation, SizeNearSizeMaxThrowsInsteadOfWrappingAround) {
  for (size_t n : {SIZE_MAX, SIZE_MAX - 10, SIZE_MAX - 63, SIZE_MAX - 64}) {
    try {
      core::AlignedBuffer<uint8_t> b(n, "edge");
      ADD_FAILURE() << n << " bytes: got a buffer of " << b.size();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("edge"), std::string::npos) << e.what();
    }
  }
}

TEST(Allocation, HugeElementCountsThrow) {
  EXPECT_THROW(core::AlignedBuffer<float>(SIZE_MAX / 2, "huge"), Error);
  EXPECT_THROW(core::AlignedBuffer<double>(SIZE_MAX / 8 + 1, "overflowing"), Error);
}
