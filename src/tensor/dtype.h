// Weight and activation element types, numbered exactly as GGML / GGUF number them, with
// their block layouts. The table covers every GGML type id so the GGUF reader can check
// tensor sizes even for types treespec cannot compute with yet.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace treespec::tensor {

enum class DType : uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  iq2_xxs = 16,
  iq2_xs = 17,
  iq3_xxs = 18,
  iq1_s = 19,
  iq4_nl = 20,
  iq3_s = 21,
  iq2_s = 22,
  iq4_xs = 23,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  iq1_m = 29,
  bf16 = 30,
  tq1_0 = 34,
  tq2_0 = 35,
};

struct DTypeTraits {
  const char* name;    // GGML spelling, e.g. "q8_0"
  int64_t block_size;  // elements per block (1 for plain types)
  int64_t type_size;   // bytes per block
};

// Traits for a raw GGML type id, or nullopt if the id is not a known GGML type.
std::optional<DTypeTraits> dtype_traits(uint32_t type_id);
const DTypeTraits& dtype_traits(DType t);
const char* dtype_name(DType t);
// Parses "f16", "q8_0", ... (case-insensitive); nullopt if unknown.
std::optional<DType> dtype_from_name(const std::string& name);

// Bytes for a row of n elements; n must be a multiple of the block size (checked by callers).
inline int64_t row_bytes(DType t, int64_t n) {
  const auto& tr = dtype_traits(t);
  return n / tr.block_size * tr.type_size;
}

// Block layouts (little endian, packed) for the types treespec computes with.
constexpr int kQK8_0 = 32;  // Q8_0: f16 scale d, then 32 x int8; x = d * q
constexpr int kQK4_0 = 32;  // Q4_0: f16 scale d, then 16 bytes of nibbles; x = d * (q - 8);
                            // byte j holds element j (low nibble) and j + 16 (high nibble)
constexpr int kQK_K = 256;  // super-block size of the K-quants

}  // namespace treespec::tensor
