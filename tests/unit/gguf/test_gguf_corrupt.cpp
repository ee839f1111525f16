// Corrupt GGUF files, each built by patching the bytes of one valid file: every case
// must raise FormatError whose message names the file and the culprit. Plus: every
// truncation of a small valid file fails cleanly.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "gguf/gguf.h"
#include "treespec/status.h"

using namespace treespec;
using gguf::GgufFile;
using gguf::GgufWriter;
using gguf::Value;
using gguf::ValueType;

namespace {

using Bytes = std::vector<uint8_t>;

// A valid file with known landmarks. Tensor "d" is last and exactly 32 bytes, so the
// file has no trailing padding and every strict prefix is invalid.
Bytes valid_file(uint64_t alignment = 32) {
  GgufWriter w;
  w.set("general.architecture", Value::string("llama"));
  if (alignment != 32) w.set_alignment(alignment);
  w.set("test.k1", Value::u32(7));
  w.set("test.k2", Value::u32(8));
  w.set("test.arr", Value::i32_array({1, 2, 3}));
  w.set("test.flag", Value::boolean(true));
  w.set("test.nest", Value::array(ValueType::array, {Value::string_array({"x"})}));
  std::vector<uint8_t> data(256);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i);
  w.add_tensor("ta", tensor::DType::f32, {4, 2}, data.data(), 32);
  w.add_tensor("tb", tensor::DType::q8_0, {32}, data.data(), 34);
  w.add_tensor("tc", tensor::DType::f16, {4}, data.data(), 8);
  w.add_tensor("td", tensor::DType::f32, {8}, data.data(), 32);
  return w.to_bytes();
}

// Offset just past the GGUF string `s` (u64 length + bytes) found in the file.
size_t after_string(const Bytes& b, const std::string& s) {
  Bytes needle(8);
  const uint64_t n = s.size();
  std::memcpy(needle.data(), &n, 8);
  needle.insert(needle.end(), s.begin(), s.end());
  auto it = std::search(b.begin(), b.end(), needle.begin(), needle.end());
  if (it == b.end()) throw std::runtime_error("landmark not found: " + s);
  return static_cast<size_t>(it - b.begin()) + needle.size();
}
size_t string_at(const Bytes& b, const std::string& s) { return after_string(b, s) - 8 - s.size(); }

template <typename T>
void poke(Bytes& b, size_t off, T v) {
  std::memcpy(b.data() + off, &v, sizeof v);
}
template <typename T>
T peek(const Bytes& b, size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof v);
  return v;
}

// Tensor info landmarks: after the name come u32 n_dims, u64 ne[n_dims], u32 type, u64 offset.
struct TensorField {
  size_t n_dims, ne0, type, offset;
};
TensorField tensor_fields(const Bytes& b, const std::string& name) {
  const size_t p = after_string(b, name);
  const uint32_t nd = peek<uint32_t>(b, p);
  return {p, p + 4, p + 4 + 8 * nd, p + 4 + 8 * nd + 4};
}

void expect_format_error(const Bytes& b, std::initializer_list<std::string> needles) {
  try {
    GgufFile::from_bytes(b.data(), b.size(), "corrupt.gguf");
    ADD_FAILURE() << "no FormatError; expected one mentioning " << *needles.begin();
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("corrupt.gguf"), std::string::npos) << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "missing '" << n << "' in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

}  // namespace

TEST(GgufCorrupt, BaseFileIsValid) {
  const Bytes b = valid_file();
  auto f = GgufFile::from_bytes(b.data(), b.size());
  EXPECT_EQ(f->tensors().size(), 4u);
  const auto* td = f->find_tensor("td");
  EXPECT_EQ(f->data_offset() + td->offset + td->nbytes, b.size());
}

TEST(GgufCorrupt, TruncatedHeader) {
  Bytes b = valid_file();
  b.resize(10);
  expect_format_error(b, {"truncated", "tensor count"});
  b.resize(3);
  expect_format_error(b, {"too small"});
}

TEST(GgufCorrupt, BadMagic) {
  Bytes b = valid_file();
  b[0] = 'X';
  expect_format_error(b, {"bad magic", "XGUF"});
}

TEST(GgufCorrupt, UnsupportedVersions) {
  Bytes b = valid_file();
  poke<uint32_t>(b, 4, 1);
  expect_format_error(b, {"version 1 is not supported"});
  poke<uint32_t>(b, 4, 7);
  expect_format_error(b, {"unsupported GGUF version 7"});
  poke<uint32_t>(b, 4, 0x03000000u);
  expect_format_error(b, {"big-endian"});
}

TEST(GgufCorrupt, HugeTensorCount) {
  Bytes b = valid_file();
  poke<uint64_t>(b, 8, 1ull << 60);
  expect_format_error(b, {"n_tensors = 1152921504606846976"});
  poke<uint64_t>(b, 8, ~0ull);
  expect_format_error(b, {"n_tensors"});
}

TEST(GgufCorrupt, HugeKvCount) {
  Bytes b = valid_file();
  poke<uint64_t>(b, 16, 1ull << 62);
  expect_format_error(b, {"n_kv = 4611686018427387904"});
}

TEST(GgufCorrupt, StringLengthPastEnd) {
  Bytes b = valid_file();
  poke<uint64_t>(b, string_at(b, "test.k2"), 1ull << 40);
  expect_format_error(b, {"string length 1099511627776", "past the end"});
  // A string value (not a key): the architecture name.
  Bytes c = valid_file();
  const size_t v = after_string(c, "general.architecture") + 4;
  poke<uint64_t>(c, v, c.size());
  expect_format_error(c, {"metadata key 'general.architecture'", "string length"});
}

TEST(GgufCorrupt, ArrayCountPastEnd) {
  Bytes b = valid_file();
  const size_t p = after_string(b, "test.arr");  // u32 type, u32 elem type, u64 count
  poke<uint64_t>(b, p + 8, 1ull << 50);
  expect_format_error(b, {"metadata key 'test.arr'", "array of 1125899906842624 i32 items cannot fit"});
}

TEST(GgufCorrupt, NestedArrayCountPastEnd) {
  Bytes b = valid_file();
  // test.nest: u32 array, u32 elem array, u64 1, then inner: u32 elem string, u64 count.
  const size_t p = after_string(b, "test.nest");
  poke<uint64_t>(b, p + 16 + 4, 1ull << 33);
  expect_format_error(b, {"metadata key 'test.nest'", "cannot fit"});
}

TEST(GgufCorrupt, UnknownValueType) {
  Bytes b = valid_file();
  poke<uint32_t>(b, after_string(b, "test.k1"), 99);
  expect_format_error(b, {"metadata key 'test.k1'", "unknown value type 99"});
  Bytes c = valid_file();
  poke<uint32_t>(c, after_string(c, "test.arr") + 4, 13);
  expect_format_error(c, {"test.arr", "unknown array element type 13"});
}

TEST(GgufCorrupt, BadBool) {
  Bytes b = valid_file();
  b[after_string(b, "test.flag") + 4] = 2;
  expect_format_error(b, {"test.flag", "bool value 2"});
}

TEST(GgufCorrupt, DuplicateKey) {
  Bytes b = valid_file();
  const size_t p = string_at(b, "test.k2") + 8;
  b[p + 6] = '1';  // test.k2 -> test.k1
  expect_format_error(b, {"duplicate metadata key 'test.k1'"});
}

TEST(GgufCorrupt, TensorOffsetPastEnd) {
  Bytes b = valid_file();
  poke<uint64_t>(b, tensor_fields(b, "tc").offset, 1ull << 40);
  expect_format_error(b, {"tensor 'tc'", "data offset 1099511627776", "past the end"});
}

TEST(GgufCorrupt, TensorDataPastEnd) {
  Bytes b = valid_file();
  poke<uint64_t>(b, tensor_fields(b, "td").ne0, 16);  // 64 bytes, only 32 in the file
  expect_format_error(b, {"tensor 'td'", "runs past the end"});
}

TEST(GgufCorrupt, MisalignedTensorOffset) {
  Bytes b = valid_file();
  const auto f = tensor_fields(b, "tb");
  poke<uint64_t>(b, f.offset, peek<uint64_t>(b, f.offset) + 4);
  expect_format_error(b, {"tensor 'tb'", "not a multiple of the alignment 32"});
}

TEST(GgufCorrupt, OverlappingTensors) {
  Bytes b = valid_file();
  poke<uint64_t>(b, tensor_fields(b, "tb").offset, 0);  // same place as "ta"
  expect_format_error(b, {"overlaps", "'ta'", "'tb'"});
}

TEST(GgufCorrupt, OverflowingDims) {
  Bytes b = valid_file();
  const auto f = tensor_fields(b, "ta");
  poke<uint64_t>(b, f.ne0, 1ull << 40);
  poke<uint64_t>(b, f.ne0 + 8, 1ull << 40);
  expect_format_error(b, {"tensor 'ta'", "overflows"});
  Bytes c = valid_file();
  poke<uint64_t>(c, tensor_fields(c, "tc").ne0, ~0ull);  // does not fit int64
  expect_format_error(c, {"tensor 'tc'", "overflows"});
}

TEST(GgufCorrupt, ByteSizeOverflow) {
  Bytes b = valid_file();
  const auto f = tensor_fields(b, "ta");
  poke<uint64_t>(b, f.ne0, 1ull << 31);
  poke<uint64_t>(b, f.ne0 + 8, 1ull << 31);  // 2^62 elements * 4 bytes overflows int64
  expect_format_error(b, {"tensor 'ta'", "overflows"});
}

TEST(GgufCorrupt, ZeroDim) {
  Bytes b = valid_file();
  poke<uint64_t>(b, tensor_fields(b, "ta").ne0 + 8, 0);
  expect_format_error(b, {"tensor 'ta'", "ne[1] is zero"});
}

TEST(GgufCorrupt, TooManyAndTooFewDims) {
  Bytes b = valid_file();
  poke<uint32_t>(b, tensor_fields(b, "ta").n_dims, 5);
  expect_format_error(b, {"tensor 'ta'", "n_dims = 5"});
  poke<uint32_t>(b, tensor_fields(b, "ta").n_dims, 0);
  expect_format_error(b, {"tensor 'ta'", "n_dims = 0"});
}

TEST(GgufCorrupt, DuplicateTensorName) {
  Bytes b = valid_file();
  b[string_at(b, "tb") + 8 + 1] = 'a';  // tb -> ta
  expect_format_error(b, {"duplicate tensor name 'ta'"});
}

TEST(GgufCorrupt, UnknownGgmlType) {
  for (uint32_t bad : {4u, 5u, 31u, 36u, 1000u}) {
    Bytes b = valid_file();
    poke<uint32_t>(b, tensor_fields(b, "ta").type, bad);
    expect_format_error(b, {"tensor 'ta'", "unknown ggml type id " + std::to_string(bad)});
  }
}

TEST(GgufCorrupt, BadAlignmentValue) {
  Bytes b = valid_file(64);
  const size_t p = after_string(b, "general.alignment");
  ASSERT_EQ(peek<uint32_t>(b, p), static_cast<uint32_t>(ValueType::u32));
  poke<uint32_t>(b, p + 4, 48);
  expect_format_error(b, {"general.alignment", "48", "power of two"});
  poke<uint32_t>(b, p + 4, 0);
  expect_format_error(b, {"general.alignment", "power of two"});
  poke<uint32_t>(b, p, static_cast<uint32_t>(ValueType::f32));
  expect_format_error(b, {"general.alignment", "type f32"});
}

TEST(GgufCorrupt, BlockSizeMultiple) {
  Bytes b = valid_file();
  poke<uint64_t>(b, tensor_fields(b, "tb").ne0, 16);  // q8_0 needs multiples of 32
  expect_format_error(b, {"tensor 'tb'", "ne[0] = 16", "block size 32"});
}

TEST(GgufCorrupt, NestingTooDeep) {
  Value v = Value::u8(1);
  for (int i = 0; i < gguf::kMaxArrayDepth + 1; ++i) {
    v = Value::array(v.type(), {v});
  }
  GgufWriter w;
  w.set("deep", v);
  const Bytes b = w.to_bytes();
  expect_format_error(b, {"metadata key 'deep'", "nested deeper"});
}

TEST(GgufCorrupt, EveryTruncationFailsCleanly) {
  const Bytes full = valid_file();
  ASSERT_NO_THROW(GgufFile::from_bytes(full.data(), full.size()));
  for (size_t n = 0; n < full.size(); ++n) {
    try {
      GgufFile::from_bytes(full.data(), n, "prefix.gguf");
      ADD_FAILURE() << "prefix of " << n << " bytes was accepted";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("prefix.gguf"), std::string::npos);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "prefix of " << n << ": wrong exception: " << e.what();
    }
  }
}

// Flip every byte of the header and metadata region to a few values: whatever happens,
// the reader must either accept the file or throw FormatError (never crash, never throw
// anything else). Cheap deterministic fuzzing.
TEST(GgufCorrupt, ByteFlipsNeverCrash) {
  const Bytes full = valid_file();
  auto f = GgufFile::from_bytes(full.data(), full.size());
  const size_t region = f->data_offset();
  for (size_t i = 0; i < region; ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0xff}, uint8_t{0x80}, static_cast<uint8_t>(full[i] ^ 1)}) {
      Bytes b = full;
      b[i] = v;
      try {
        GgufFile::from_bytes(b.data(), b.size());
      } catch (const FormatError&) {
      } catch (const std::exception& e) {
        ADD_FAILURE() << "byte " << i << " = " << int(v) << ": " << e.what();
      }
    }
  }
}
