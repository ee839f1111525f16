#include "tensor/dtype.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "core/assert.h"

namespace treespec::tensor {

namespace {

struct Entry {
  uint32_t id;
  DTypeTraits traits;
};

// Block sizes and bytes per block from the GGML type table.
constexpr std::array<Entry, 33> kTable = {{
    {0, {"f32", 1, 4}},
    {1, {"f16", 1, 2}},
    {2, {"q4_0", 32, 18}},
    {3, {"q4_1", 32, 20}},
    {6, {"q5_0", 32, 22}},
    {7, {"q5_1", 32, 24}},
    {8, {"q8_0", 32, 34}},
    {9, {"q8_1", 32, 36}},
    {10, {"q2_k", 256, 84}},
    {11, {"q3_k", 256, 110}},
    {12, {"q4_k", 256, 144}},
    {13, {"q5_k", 256, 176}},
    {14, {"q6_k", 256, 210}},
    {15, {"q8_k", 256, 292}},
    {16, {"iq2_xxs", 256, 66}},
    {17, {"iq2_xs", 256, 74}},
    {18, {"iq3_xxs", 256, 98}},
    {19, {"iq1_s", 256, 50}},
    {20, {"iq4_nl", 32, 18}},
    {21, {"iq3_s", 256, 110}},
    {22, {"iq2_s", 256, 82}},
    {23, {"iq4_xs", 256, 136}},
    {24, {"i8", 1, 1}},
    {25, {"i16", 1, 2}},
    {26, {"i32", 1, 4}},
    {27, {"i64", 1, 8}},
    {28, {"f64", 1, 8}},
    {29, {"iq1_m", 256, 56}},
    {30, {"bf16", 1, 2}},
    {34, {"tq1_0", 256, 54}},
    {35, {"tq2_0", 256, 66}},
    // ids 4, 5, 31-33 were removed from GGML and are rejected.
    {0xffffffffu, {"", 0, 0}},
    {0xffffffffu, {"", 0, 0}},
}};

}  // namespace

std::optional<DTypeTraits> dtype_traits(uint32_t type_id) {
  for (const auto& e : kTable) {
    if (e.id == type_id && e.traits.block_size > 0) return e.traits;
  }
  return std::nullopt;
}

const DTypeTraits& dtype_traits(DType t) {
  for (const auto& e : kTable) {
    if (e.id == static_cast<uint32_t>(t)) return e.traits;
  }
  TREESPEC_ASSERT(false, "dtype_traits: unknown DType");
}

const char* dtype_name(DType t) { return dtype_traits(t).name; }

std::optional<DType> dtype_from_name(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const auto& e : kTable) {
    if (e.traits.block_size > 0 && lower == e.traits.name) return static_cast<DType>(e.id);
  }
  return std::nullopt;
}

}  // namespace treespec::tensor
