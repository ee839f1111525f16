// GGUF files: a validated, memory-mapped reader and a writer.
//
// GgufFile owns the mapping; TensorInfo::data points into it and stays valid for the
// file's lifetime. Everything is validated before use (magic, version, counts, string
// and array lengths, tensor dims/types/offsets/sizes, alignment, duplicates): a bad file
// raises FormatError naming the file and what is wrong (key, tensor, offset).
//
// Format reference (versions 2 and 3, little endian):
//   u32 magic "GGUF", u32 version, u64 n_tensors, u64 n_kv,
//   n_kv x { string key, u32 value_type, value },
//   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset },
//   padding to general.alignment (default 32), tensor data (offsets relative to here).
//   string = u64 length + bytes (no terminator); array = u32 elem_type, u64 count, items.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/dtype.h"

namespace treespec::gguf {

// File magic: "GGUF" read as a little-endian u32.
inline constexpr uint32_t kMagic = 0x46554747u;
// general.alignment must be a power of two (of at most 2^30).
constexpr bool is_power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

enum class ValueType : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

const char* value_type_name(ValueType t);

// Limits the reader enforces beyond "fits in the file" (documented in docs/gguf.md).
constexpr int kMaxArrayDepth = 8;                        // array nesting levels
constexpr uint64_t kMaxMetadataArrayItems = 1ull << 24;  // all metadata array items together
constexpr int kMaxDims = 4;                              // GGML_MAX_DIMS
constexpr uint64_t kDefaultAlignment = 32;

// One metadata value. Scalars keep their exact GGUF type so a round trip is lossless.
class Value {
 public:
  Value() = default;
  static Value u8(uint8_t v);
  static Value i8(int8_t v);
  static Value u16(uint16_t v);
  static Value i16(int16_t v);
  static Value u32(uint32_t v);
  static Value i32(int32_t v);
  static Value u64(uint64_t v);
  static Value i64(int64_t v);
  static Value f32(float v);
  static Value f64(double v);
  static Value boolean(bool v);
  static Value string(std::string v);
  // Array of elem_type; every item must have that type (arrays may nest).
  static Value array(ValueType elem_type, std::vector<Value> items);
  static Value string_array(const std::vector<std::string>& v);
  static Value f32_array(const std::vector<float>& v);
  static Value i32_array(const std::vector<int32_t>& v);

  ValueType type() const { return type_; }
  bool is_integer() const;
  bool is_float() const { return type_ == ValueType::f32 || type_ == ValueType::f64; }

  // Conversions; each throws InvalidArgument (naming the actual type) on a mismatch
  // or when an integer does not fit the requested range.
  int64_t as_int() const;    // any integer type (u64 above INT64_MAX is an error)
  uint64_t as_uint() const;  // any non-negative integer
  double as_float() const;   // f32, f64, or any integer
  bool as_bool() const;
  const std::string& as_string() const;
  ValueType elem_type() const;              // arrays only
  const std::vector<Value>& items() const;  // arrays only

  // Number of items for arrays, 0 otherwise.
  size_t size() const { return items_.size(); }

  // Bitwise for floats (NaN == NaN when the bits match), recursive for arrays.
  bool operator==(const Value& o) const;

 private:
  ValueType type_ = ValueType::u8;
  union {
    uint64_t u;
    int64_t i;
    double f;
  } num_{};
  std::string str_;
  ValueType elem_type_ = ValueType::u8;
  std::vector<Value> items_;
};

struct TensorInfo {
  std::string name;
  uint32_t type_id = 0;           // raw GGML type id (validated: known to the dtype table)
  tensor::DType type{};           // same, as enum
  std::vector<int64_t> ne;        // GGML order: ne[0] is the contiguous dimension
  uint64_t offset = 0;            // relative to the start of the data section
  uint64_t nbytes = 0;            // validated: inside the file
  const uint8_t* data = nullptr;  // into the mapping

  int64_t n_elements() const;
};

class GgufFile {
 public:
  // Maps and validates a file. Throws IoError (cannot open/map) or FormatError. Tensor
  // data is read in place: the file must not be truncated or rewritten while this object
  // lives (see core/mapped_files.h for how the tool reports it if that happens).
  static std::unique_ptr<GgufFile> open(const std::string& path);
  // Validates an in-memory image (copied). `name` is used in error messages.
  static std::unique_ptr<GgufFile> from_bytes(const uint8_t* data, size_t size, const std::string& name = "<memory>");
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute file offset of the data section
  uint64_t file_size() const { return size_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;  // nullptr if absent
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters: throw FormatError "<file>: metadata key '<key>' missing" or
  // "... has type X, expected Y" so callers get a message that names the key.
  int64_t get_int(std::string_view key) const;
  int64_t get_int(std::string_view key, int64_t fallback) const;
  double get_float(std::string_view key) const;
  double get_float(std::string_view key, double fallback) const;
  bool get_bool(std::string_view key, bool fallback) const;
  std::string get_string(std::string_view key) const;
  std::string get_string(std::string_view key, const std::string& fallback) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<float> get_float_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;  // nullptr if absent

  // The whole pages inside [p, p + n) (tensor data of this file) leave the process's
  // resident set; reading them again re-reads the file, so the data stays valid. Used
  // after load-time repacking, when the kernels read a copy. No-op for from_bytes images.
  void release_pages(const void* p, size_t n) const;

 private:
  GgufFile() = default;
  void parse();

  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  bool mapped_ = false;
  int map_handle_ = -1;         // core::register_mapped_file handle of the mapping
  std::vector<uint8_t> owned_;  // from_bytes copy
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Human-readable rendering for `treespec info` and messages: scalars as text, strings
// quoted and cut after max_chars bytes, arrays as "[type x count] [first items...]".
std::string value_to_display(const Value& v, size_t max_items = 8, size_t max_chars = 64);

// Builds a GGUF file in memory order: metadata as set (set() on an existing key replaces
// it in place), tensors in insertion order, data aligned to general.alignment.
class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3);

  void set(const std::string& key, Value v);
  void set_alignment(uint64_t alignment);  // also writes general.alignment (u32)
  // Copies the bytes. nbytes must equal the size implied by type and ne.
  void add_tensor(const std::string& name, tensor::DType type, std::vector<int64_t> ne, const void* data,
                  size_t nbytes);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  size_t n_tensors() const { return tensors_.size(); }

  std::vector<uint8_t> to_bytes() const;
  void write(const std::string& path) const;  // throws IoError; streams, no full copy in memory

 private:
  uint32_t version_;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, Value>> kv_;
  struct PendingTensor {
    std::string name;
    tensor::DType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;
  };
  std::vector<PendingTensor> tensors_;

  template <typename Sink>
  void emit(Sink& sink) const;
};

}  // namespace treespec::gguf
