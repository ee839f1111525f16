// GGUF writer -> reader round trips: every value type, nested/empty arrays, v2 and v3,
// tensor data with default and non-default alignment, typed getters, mmap open().
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "common/test_util.h"
#include "gguf/gguf.h"
#include "treespec/status.h"

using namespace treespec;
using gguf::GgufFile;
using gguf::GgufWriter;
using gguf::Value;
using gguf::ValueType;

namespace {

std::vector<std::pair<std::string, Value>> all_values() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::pair<std::string, Value>> kv = {
      {"t.u8", Value::u8(250)},
      {"t.i8", Value::i8(-120)},
      {"t.u16", Value::u16(65000)},
      {"t.i16", Value::i16(-32000)},
      {"t.u32", Value::u32(4000000000u)},
      {"t.i32", Value::i32(-2000000000)},
      {"t.u64", Value::u64(std::numeric_limits<uint64_t>::max())},
      {"t.i64", Value::i64(std::numeric_limits<int64_t>::min())},
      {"t.f32", Value::f32(3.25f)},
      {"t.f32_nan", Value::f32(nan)},
      {"t.f32_inf", Value::f32(-std::numeric_limits<float>::infinity())},
      {"t.f64", Value::f64(1e-300)},
      {"t.bool_t", Value::boolean(true)},
      {"t.bool_f", Value::boolean(false)},
      {"t.str", Value::string("hello \xe2\x96\x81world")},
      {"t.str_empty", Value::string("")},
      {"t.str_nul", Value::string(std::string("a\0b", 3))},
      {"t.arr_u8", Value::array(ValueType::u8, {Value::u8(1), Value::u8(255)})},
      {"t.arr_i8", Value::array(ValueType::i8, {Value::i8(-1)})},
      {"t.arr_u16", Value::array(ValueType::u16, {Value::u16(7)})},
      {"t.arr_i16", Value::array(ValueType::i16, {Value::i16(-7)})},
      {"t.arr_u32", Value::array(ValueType::u32, {Value::u32(1), Value::u32(2)})},
      {"t.arr_i32", Value::i32_array({-1, 0, 1})},
      {"t.arr_u64", Value::array(ValueType::u64, {Value::u64(1ull << 40)})},
      {"t.arr_i64", Value::array(ValueType::i64, {Value::i64(-(1ll << 40))})},
      {"t.arr_f32", Value::f32_array({0.5f, -1.5f, nan})},
      {"t.arr_f64", Value::array(ValueType::f64, {Value::f64(2.5)})},
      {"t.arr_bool", Value::array(ValueType::boolean, {Value::boolean(true), Value::boolean(false)})},
      {"t.arr_str", Value::string_array({"a", "", "\xe2\x96\x81the"})},
      {"t.arr_empty", Value::array(ValueType::f32, {})},
      {"t.arr_empty_str", Value::string_array({})},
      {"t.arr_nested", Value::array(ValueType::array, {Value::string_array({"x", "y"}),
                                                       Value::array(ValueType::string, {}), Value::i32_array({5})})},
      {"t.arr_nested2",
       Value::array(ValueType::array, {Value::array(ValueType::array, {Value::array(ValueType::u8, {Value::u8(9)})})})},
      {"", Value::string("empty key is legal")},
  };
  return kv;
}

std::unique_ptr<GgufFile> roundtrip(const GgufWriter& w, const std::string& name = "rt.gguf") {
  const auto bytes = w.to_bytes();
  return GgufFile::from_bytes(bytes.data(), bytes.size(), name);
}

}  // namespace

TEST(GgufRoundTrip, EveryValueTypeV3AndV2) {
  for (uint32_t version : {3u, 2u}) {
    GgufWriter w(version);
    const auto kv = all_values();
    for (const auto& [k, v] : kv) w.set(k, v);
    auto f = roundtrip(w);
    EXPECT_EQ(f->version(), version);
    ASSERT_EQ(f->metadata().size(), kv.size());
    for (size_t i = 0; i < kv.size(); ++i) {
      EXPECT_EQ(f->metadata()[i].first, kv[i].first);
      EXPECT_TRUE(f->metadata()[i].second == kv[i].second) << "key " << kv[i].first << " v" << version;
      EXPECT_EQ(f->metadata()[i].second.type(), kv[i].second.type());
    }
    EXPECT_TRUE(f->tensors().empty());
    EXPECT_EQ(f->alignment(), 32u);
  }
}

TEST(GgufRoundTrip, SetReplacesInPlace) {
  GgufWriter w;
  w.set("a", Value::u32(1));
  w.set("b", Value::u32(2));
  w.set("a", Value::string("x"));
  auto f = roundtrip(w);
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata()[0].first, "a");
  EXPECT_EQ(f->get_string("a"), "x");
}

TEST(GgufRoundTrip, TypedGetters) {
  GgufWriter w;
  w.set("i", Value::u32(7));
  w.set("neg", Value::i32(-3));
  w.set("f", Value::f32(0.25f));
  w.set("b", Value::boolean(true));
  w.set("s", Value::string("str"));
  w.set("sa", Value::string_array({"p", "q"}));
  w.set("fa", Value::f32_array({1.0f, 2.0f}));
  w.set("ia", Value::i32_array({4, -5}));
  w.set("big", Value::u64(std::numeric_limits<uint64_t>::max()));
  auto f = roundtrip(w, "getters.gguf");
  EXPECT_EQ(f->get_int("i"), 7);
  EXPECT_EQ(f->get_int("neg"), -3);
  EXPECT_EQ(f->get_int("missing", 42), 42);
  EXPECT_DOUBLE_EQ(f->get_float("f"), 0.25);
  EXPECT_DOUBLE_EQ(f->get_float("i"), 7.0);  // integers read as numbers
  EXPECT_DOUBLE_EQ(f->get_float("missing", 1.5), 1.5);
  EXPECT_TRUE(f->get_bool("b", false));
  EXPECT_FALSE(f->get_bool("missing", false));
  EXPECT_EQ(f->get_string("s"), "str");
  EXPECT_EQ(f->get_string("missing", "fb"), "fb");
  EXPECT_EQ(f->get_string_array("sa"), (std::vector<std::string>{"p", "q"}));
  EXPECT_EQ(f->get_float_array("fa"), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(f->get_int_array("ia"), (std::vector<int64_t>{4, -5}));
  EXPECT_TRUE(f->has("s"));
  EXPECT_FALSE(f->has("nope"));

  auto expect_format_error = [](auto fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no FormatError, expected one mentioning " << needle;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("getters.gguf"), std::string::npos) << e.what();
    }
  };
  expect_format_error([&] { f->get_int("missing"); }, "metadata key 'missing' missing");
  expect_format_error([&] { f->get_int("s"); }, "'s' has type string, expected an integer");
  expect_format_error([&] { f->get_int("big"); }, "'big'");
  expect_format_error([&] { f->get_string("i"); }, "'i' has type u32, expected string");
  expect_format_error([&] { f->get_bool("s", true); }, "expected bool");
  expect_format_error([&] { f->get_string_array("fa"); }, "array of f32, expected array of string");
  expect_format_error([&] { f->get_int_array("fa"); }, "expected array of integers");
  expect_format_error([&] { f->get_float_array("sa"); }, "expected array of f32");
}

TEST(GgufValue, ConversionsAndMismatches) {
  EXPECT_EQ(Value::u8(200).as_int(), 200);
  EXPECT_EQ(Value::i16(-5).as_int(), -5);
  EXPECT_EQ(Value::u64(5).as_uint(), 5u);
  EXPECT_THROW(Value::i32(-1).as_uint(), InvalidArgument);
  EXPECT_THROW(Value::u64(1ull << 63).as_int(), InvalidArgument);
  EXPECT_THROW(Value::string("x").as_int(), InvalidArgument);
  EXPECT_THROW(Value::f32(1).as_string(), InvalidArgument);
  EXPECT_THROW(Value::u8(1).items(), InvalidArgument);
  EXPECT_THROW(Value::u8(1).as_bool(), InvalidArgument);
  EXPECT_DOUBLE_EQ(Value::i64(-3).as_float(), -3.0);
  EXPECT_TRUE(Value::i8(1).is_integer());
  EXPECT_FALSE(Value::boolean(true).is_integer());
  EXPECT_TRUE(Value::f64(1).is_float());
  EXPECT_THROW(Value::array(ValueType::u32, {Value::u8(1)}), InvalidArgument);
  EXPECT_FALSE(Value::u32(1) == Value::i32(1));  // the exact type is part of the value
  try {
    Value::string("x").as_int();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("string"), std::string::npos);
  }
}

TEST(GgufValue, Display) {
  EXPECT_EQ(gguf::value_to_display(Value::u32(7)), "7");
  EXPECT_EQ(gguf::value_to_display(Value::i32(-7)), "-7");
  EXPECT_EQ(gguf::value_to_display(Value::boolean(true)), "true");
  EXPECT_EQ(gguf::value_to_display(Value::string("a\nb")), "\"a\\nb\"");
  EXPECT_EQ(gguf::value_to_display(Value::string(std::string(100, 'x')), 8, 4), "\"xxxx\"... (100 bytes)");
  EXPECT_EQ(gguf::value_to_display(Value::i32_array({1, 2, 3}), 2), "[i32 x 3] [1, 2, ...]");
  EXPECT_EQ(gguf::value_to_display(Value::string_array({})), "[string x 0]");
}

namespace {

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

}  // namespace

TEST(GgufRoundTrip, TensorDataDefaultAndCustomAlignment) {
  for (uint64_t align : {32ull, 64ull, 1ull, 4096ull}) {
    GgufWriter w;
    if (align != 32) w.set_alignment(align);
    w.set("general.architecture", Value::string("llama"));
    const auto a = pattern(4 * 3 * 5, 1);          // f32 ne {3, 5}
    const auto b = pattern(34 * 2, 2);             // q8_0 ne {64}: 2 blocks of 34 bytes
    const auto c = pattern(2 * 7, 3);              // f16 ne {7}
    const auto d = pattern(4 * 2 * 1 * 3 * 2, 4);  // f32 4-D
    w.add_tensor("a", tensor::DType::f32, {3, 5}, a.data(), a.size());
    w.add_tensor("b", tensor::DType::q8_0, {64}, b.data(), b.size());
    w.add_tensor("c", tensor::DType::f16, {7}, c.data(), c.size());
    w.add_tensor("d", tensor::DType::f32, {2, 1, 3, 2}, d.data(), d.size());
    const auto bytes = w.to_bytes();
    auto f = GgufFile::from_bytes(bytes.data(), bytes.size(), "t.gguf");
    EXPECT_EQ(f->alignment(), align);
    EXPECT_EQ(f->data_offset() % align, 0u);
    if (align != 32) {
      EXPECT_EQ(f->get_int("general.alignment"), static_cast<int64_t>(align));
    }
    ASSERT_EQ(f->tensors().size(), 4u);
    const std::vector<std::pair<std::string, const std::vector<uint8_t>*>> expect = {{"a", &a},
                                                                                     {"b", &b},
                                                                                     {"c", &c},
                                                                                     {"d", &d}};
    for (size_t i = 0; i < expect.size(); ++i) {
      const auto* ti = f->find_tensor(expect[i].first);
      ASSERT_NE(ti, nullptr);
      EXPECT_EQ(&f->tensors()[i], ti);  // file order kept
      EXPECT_EQ(ti->offset % align, 0u);
      ASSERT_EQ(ti->nbytes, expect[i].second->size());
      EXPECT_EQ(std::memcmp(ti->data, expect[i].second->data(), ti->nbytes), 0) << ti->name;
    }
    const auto* ta = f->find_tensor("a");
    EXPECT_EQ(ta->ne, (std::vector<int64_t>{3, 5}));
    EXPECT_EQ(ta->type, tensor::DType::f32);
    EXPECT_EQ(ta->n_elements(), 15);
    EXPECT_EQ(f->find_tensor("b")->type, tensor::DType::q8_0);
    EXPECT_EQ(f->find_tensor("b")->type_id, 8u);
    EXPECT_EQ(f->find_tensor("d")->ne.size(), 4u);
    EXPECT_EQ(f->find_tensor("zzz"), nullptr);
    // The standard layout: the file ends with the last tensor padded to the alignment.
    const auto* td = f->find_tensor("d");
    const uint64_t end = f->data_offset() + td->offset + td->nbytes;
    EXPECT_EQ(f->file_size(), (end + align - 1) / align * align);
  }
}

TEST(GgufRoundTrip, WriteAndOpenWithMmap) {
  GgufWriter w;
  w.set("general.name", Value::string("mapped"));
  const auto a = pattern(4 * 16, 9);
  w.add_tensor("w", tensor::DType::f32, {16}, a.data(), a.size());
  const std::string path = test::temp_dir() + "/m.gguf";
  w.write(path);
  auto f = GgufFile::open(path);
  EXPECT_EQ(f->path(), path);
  EXPECT_EQ(f->get_string("general.name"), "mapped");
  const auto* t = f->find_tensor("w");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(std::memcmp(t->data, a.data(), a.size()), 0);
  // write() and to_bytes() produce identical files.
  const auto bytes = w.to_bytes();
  EXPECT_EQ(test::read_file(path), std::string(bytes.begin(), bytes.end()));
}

TEST(GgufRoundTrip, OpenErrors) {
  const std::string dir = test::temp_dir();
  EXPECT_THROW(GgufFile::open(dir + "/does_not_exist.gguf"), IoError);
  EXPECT_THROW(GgufFile::open(dir), IoError);  // a directory
  { std::ofstream(dir + "/empty.gguf"); }
  try {
    GgufFile::open(dir + "/empty.gguf");
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("empty.gguf"), std::string::npos);
  }
}

TEST(GgufWriterChecks, RejectsBadTensorsAndOptions) {
  EXPECT_THROW(GgufWriter(1), InvalidArgument);
  EXPECT_THROW(GgufWriter(4), InvalidArgument);
  GgufWriter w;
  EXPECT_THROW(w.set_alignment(0), InvalidArgument);
  EXPECT_THROW(w.set_alignment(48), InvalidArgument);
  EXPECT_THROW(w.set("general.alignment", Value::string("x")), InvalidArgument);
  const std::vector<uint8_t> buf(4096);
  EXPECT_THROW(w.add_tensor("x", tensor::DType::f32, {}, buf.data(), 0), InvalidArgument);
  EXPECT_THROW(w.add_tensor("x", tensor::DType::f32, {1, 1, 1, 1, 1}, buf.data(), 4), InvalidArgument);
  EXPECT_THROW(w.add_tensor("x", tensor::DType::f32, {0}, buf.data(), 0), InvalidArgument);
  EXPECT_THROW(w.add_tensor("x", tensor::DType::f32, {4}, buf.data(), 15), InvalidArgument);
  EXPECT_THROW(w.add_tensor("x", tensor::DType::q8_0, {16}, buf.data(), 17), InvalidArgument);
  w.add_tensor("x", tensor::DType::f32, {4}, buf.data(), 16);
  EXPECT_THROW(w.add_tensor("x", tensor::DType::f32, {4}, buf.data(), 16), InvalidArgument);
  EXPECT_EQ(w.n_tensors(), 1u);
}
