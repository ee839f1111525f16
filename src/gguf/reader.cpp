// GgufFile: maps a GGUF file and validates every count, length, offset and size before
// anything is allocated or dereferenced. See docs/gguf.md for the full list of checks.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/mapped_files.h"
#include "gguf/gguf.h"
#include "treespec/status.h"

namespace treespec::gguf {

namespace {

// Smallest encodings, used to reject counts that the remaining bytes cannot hold.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;                  // empty key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, 1 dim, type, offset

uint64_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::u8:
    case ValueType::i8:
    case ValueType::boolean: return 1;
    case ValueType::u16:
    case ValueType::i16: return 2;
    case ValueType::u32:
    case ValueType::i32:
    case ValueType::f32: return 4;
    case ValueType::u64:
    case ValueType::i64:
    case ValueType::f64: return 8;
    case ValueType::string: return 8;  // at least the length
    case ValueType::array: return 12;  // at least elem type + count
  }
  return 1;
}

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::f64); }

// Bounds-checked little-endian reads over the file image. Every failure names the file,
// what was being read and the byte offset.
class Cursor {
 public:
  Cursor(const uint8_t* base, uint64_t size, const std::string& file) : base_(base), size_(size), file_(file) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  [[noreturn]] void fail(const std::string& what, uint64_t at) const {
    throw FormatError(fmt::format("{}: {} (at byte offset {})", file_, what, at));
  }

  template <typename T>
  T read(const std::string& what) {
    if (remaining() < sizeof(T)) {
      fail(fmt::format("truncated: {} needs {} bytes, {} left in the file of {} bytes", what, sizeof(T), remaining(),
                       size_),
           pos_);
    }
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const std::string& what) {
    const uint64_t at = pos_;
    const auto n = read<uint64_t>(what + " length");
    if (n > remaining()) {
      fail(fmt::format("{}: string length {} runs past the end of the file ({} bytes left)", what, n, remaining()), at);
    }
    std::string s(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(n));
    pos_ += n;
    return s;
  }

 private:
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& file_;
};

struct ParseState {
  uint64_t array_items = 0;  // running total, bounded by kMaxMetadataArrayItems
};

Value read_value(Cursor& c, ValueType t, const std::string& what, int depth, ParseState& st) {
  switch (t) {
    case ValueType::u8: return Value::u8(c.read<uint8_t>(what));
    case ValueType::i8: return Value::i8(c.read<int8_t>(what));
    case ValueType::u16: return Value::u16(c.read<uint16_t>(what));
    case ValueType::i16: return Value::i16(c.read<int16_t>(what));
    case ValueType::u32: return Value::u32(c.read<uint32_t>(what));
    case ValueType::i32: return Value::i32(c.read<int32_t>(what));
    case ValueType::u64: return Value::u64(c.read<uint64_t>(what));
    case ValueType::i64: return Value::i64(c.read<int64_t>(what));
    case ValueType::f32: return Value::f32(c.read<float>(what));
    case ValueType::f64: return Value::f64(c.read<double>(what));
    case ValueType::boolean: {
      const uint64_t at = c.pos();
      const auto b = c.read<uint8_t>(what);
      if (b > 1) c.fail(fmt::format("{}: bool value {} is neither 0 nor 1", what, b), at);
      return Value::boolean(b != 0);
    }
    case ValueType::string: return Value::string(c.read_string(what));
    case ValueType::array: {
      const uint64_t at = c.pos();
      const auto elem = c.read<uint32_t>(what + " array element type");
      if (!valid_value_type(elem)) c.fail(fmt::format("{}: unknown array element type {}", what, elem), at);
      const auto et = static_cast<ValueType>(elem);
      if (et == ValueType::array && depth + 1 >= kMaxArrayDepth) {
        c.fail(fmt::format("{}: arrays nested deeper than {} levels", what, kMaxArrayDepth), at);
      }
      const uint64_t count_at = c.pos();
      const auto count = c.read<uint64_t>(what + " array count");
      const uint64_t min = scalar_size(et);
      if (count > c.remaining() / min) {
        c.fail(fmt::format("{}: array of {} {} items cannot fit in the {} bytes left", what, count, value_type_name(et),
                           c.remaining()),
               count_at);
      }
      st.array_items += count;
      if (st.array_items > kMaxMetadataArrayItems) {
        c.fail(fmt::format("{}: metadata arrays hold more than {} items in total (treespec's limit)", what,
                           kMaxMetadataArrayItems),
               count_at);
      }
      std::vector<Value> items;
      items.reserve(static_cast<size_t>(std::min<uint64_t>(count, 1u << 16)));  // grows with real items
      for (uint64_t i = 0; i < count; ++i) {
        items.push_back(read_value(c, et, what, depth + 1, st));
      }
      return Value::array(et, std::move(items));
    }
  }
  c.fail(fmt::format("{}: unknown value type {}", what, static_cast<uint32_t>(t)), c.pos());
}

}  // namespace

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;  // validated on load: cannot overflow
  return n;
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw IoError(fmt::format("{}: cannot stat: {}", path, std::strerror(e)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError(fmt::format("{}: not a regular file", path));
  }
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->size_ = static_cast<uint64_t>(st.st_size);
  if (f->size_ == 0) {
    ::close(fd);
    throw FormatError(fmt::format("{}: file is empty, not a GGUF file", path));
  }
  void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) throw IoError(fmt::format("{}: cannot mmap {} bytes: {}", path, f->size_, std::strerror(e)));
  f->base_ = static_cast<const uint8_t*>(p);
  f->mapped_ = true;
  // Lets the tool's SIGBUS handler name this file if it is truncated underneath us.
  f->map_handle_ = core::register_mapped_file(p, f->size_, path.c_str());
  f->parse();  // on a throw, ~GgufFile unmaps
  return f;
}

void GgufFile::release_pages(const void* p, size_t n) const {
  if (!mapped_ || n == 0) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto lo = reinterpret_cast<uintptr_t>(p), hi = lo + n;
  const auto base = reinterpret_cast<uintptr_t>(base_);
  if (lo < base || hi > base + size_) return;
  const uintptr_t a = (lo + page - 1) / page * page, b = hi / page * page;
  if (a < b) ::madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}

std::unique_ptr<GgufFile> GgufFile::from_bytes(const uint8_t* data, size_t size, const std::string& name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = name;
  f->owned_.assign(data, data + size);
  f->base_ = f->owned_.data();
  f->size_ = size;
  f->parse();
  return f;
}

GgufFile::~GgufFile() {
  if (mapped_ && base_) {
    core::unregister_mapped_file(map_handle_);
    ::munmap(const_cast<uint8_t*>(base_), size_);
  }
}

namespace {

struct GgufCounts {
  uint32_t version = 0;
  uint64_t n_tensors = 0;
  uint64_t n_kv = 0;
};

// Magic, version and the two counts, each checked against the bytes that must hold them.
GgufCounts read_gguf_header(Cursor& c, uint64_t size) {
  if (size < 4) c.fail(fmt::format("file is {} bytes, too small to be GGUF", size), 0);
  const auto magic = c.read<uint32_t>("magic");
  if (magic != kMagic) {
    char m[4];
    std::memcpy(m, &magic, 4);
    std::string shown;
    for (char ch : m) shown += (ch >= 0x20 && ch < 0x7f) ? std::string(1, ch) : fmt::format("\\x{:02x}", (uint8_t)ch);
    c.fail(fmt::format("bad magic \"{}\", expected \"GGUF\" (not a GGUF file)", shown), 0);
  }
  GgufCounts h;
  h.version = c.read<uint32_t>("version");
  if (h.version == 1) {
    c.fail("GGUF version 1 is not supported (only versions 2 and 3); re-convert the model", 4);
  }
  if (h.version != 2 && h.version != 3) {
    const bool swapped = (h.version & 0xffffu) == 0 && (h.version >> 16) != 0;
    c.fail(fmt::format("unsupported GGUF version {}{} (only versions 2 and 3)", h.version,
                       swapped ? " (a big-endian file?)" : ""),
           4);
  }
  h.n_tensors = c.read<uint64_t>("tensor count");
  h.n_kv = c.read<uint64_t>("metadata count");
  if (h.n_kv > c.remaining() / kMinKvBytes) {
    c.fail(fmt::format("metadata count n_kv = {} cannot fit in the {} bytes left", h.n_kv, c.remaining()), 16);
  }
  if (h.n_tensors > c.remaining() / kMinTensorInfoBytes ||
      h.n_kv * kMinKvBytes + h.n_tensors * kMinTensorInfoBytes > c.remaining()) {
    c.fail(fmt::format("tensor count n_tensors = {} cannot fit in the {} bytes left", h.n_tensors, c.remaining()), 8);
  }
  return h;
}

// general.alignment if present (an unsigned power of two up to 2^30), else the default.
uint64_t gguf_alignment(const Cursor& c, const Value* a) {
  if (a == nullptr) return kDefaultAlignment;
  if (!a->is_integer()) {
    c.fail(fmt::format("metadata key 'general.alignment' has type {}, expected u32", value_type_name(a->type())),
           c.pos());
  }
  uint64_t av = 0;
  bool ok = true;
  try {
    av = a->as_uint();
  } catch (const InvalidArgument&) {
    ok = false;  // negative
  }
  if (!ok || !is_power_of_two(av) || av > (1ull << 30)) {
    c.fail(fmt::format("metadata key 'general.alignment' = {} is not a power of two in [1, 2^30]",
                       value_to_display(*a)),
           c.pos());
  }
  return av;
}

// Entry #i of the tensor table: name (not in `seen`), dims, type, byte size and an aligned
// offset relative to the data section (checked against the file later).
TensorInfo read_tensor_info(Cursor& c, uint64_t i, uint64_t alignment,
                            const std::map<std::string, size_t, std::less<>>& seen) {
  const uint64_t at = c.pos();
  TensorInfo ti;
  ti.name = c.read_string(fmt::format("tensor #{} name", i));
  const std::string what = fmt::format("tensor '{}'", ti.name);
  if (seen.count(ti.name)) c.fail(fmt::format("duplicate tensor name '{}'", ti.name), at);
  const uint64_t dims_at = c.pos();
  const auto n_dims = c.read<uint32_t>(what + " n_dims");
  if (n_dims < 1 || n_dims > static_cast<uint32_t>(kMaxDims)) {
    c.fail(fmt::format("{}: n_dims = {} is outside 1..{}", what, n_dims, kMaxDims), dims_at);
  }
  int64_t n_el = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t d_at = c.pos();
    const auto dim = c.read<uint64_t>(fmt::format("{} ne[{}]", what, d));
    if (dim == 0) c.fail(fmt::format("{}: ne[{}] is zero", what, d), d_at);
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(n_el, static_cast<int64_t>(dim), &n_el)) {
      c.fail(fmt::format("{}: element count overflows (ne[{}] = {})", what, d, dim), d_at);
    }
    ti.ne.push_back(static_cast<int64_t>(dim));
  }
  const uint64_t type_at = c.pos();
  ti.type_id = c.read<uint32_t>(what + " type");
  const auto traits = tensor::dtype_traits(ti.type_id);
  if (!traits) c.fail(fmt::format("{}: unknown ggml type id {}", what, ti.type_id), type_at);
  ti.type = static_cast<tensor::DType>(ti.type_id);
  if (ti.ne[0] % traits->block_size != 0) {
    c.fail(fmt::format("{}: ne[0] = {} is not a multiple of the {} block size {}", what, ti.ne[0], traits->name,
                       traits->block_size),
           dims_at);
  }
  int64_t nbytes = 0;
  if (__builtin_mul_overflow(n_el / traits->block_size, traits->type_size, &nbytes)) {
    c.fail(fmt::format("{}: byte size overflows ({} elements of {})", what, n_el, traits->name), dims_at);
  }
  ti.nbytes = static_cast<uint64_t>(nbytes);
  const uint64_t off_at = c.pos();
  ti.offset = c.read<uint64_t>(what + " offset");
  if (ti.offset % alignment != 0) {
    c.fail(fmt::format("{}: data offset {} is not a multiple of the alignment {}", what, ti.offset, alignment), off_at);
  }
  return ti;
}

// Every tensor's data lies inside the data section [data_offset, size) and no two overlap.
void check_tensor_extents(const std::vector<TensorInfo>& tensors, const std::string& path, uint64_t data_offset,
                          uint64_t size) {
  const uint64_t data_size = size - data_offset;
  for (const auto& ti : tensors) {
    if (ti.offset > data_size) {
      throw FormatError(
          fmt::format("{}: tensor '{}': data offset {} (absolute {}) is past the end of the file ({} bytes)", path,
                      ti.name, ti.offset, data_offset + ti.offset, size));
    }
    if (ti.nbytes > data_size - ti.offset) {
      throw FormatError(fmt::format(
          "{}: tensor '{}': data [{}, {} + {}) (absolute offset {}) runs past the end of the file ({} bytes)", path,
          ti.name, ti.offset, ti.offset, ti.nbytes, data_offset + ti.offset, size));
    }
  }
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors[a].offset < tensors[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const auto& prev = tensors[order[k - 1]];
    const auto& cur = tensors[order[k]];
    if (cur.offset < prev.offset + prev.nbytes) {
      throw FormatError(fmt::format("{}: tensor '{}' (data offset {}) overlaps tensor '{}' (data offset {}, {} bytes)",
                                    path, cur.name, cur.offset, prev.name, prev.offset, prev.nbytes));
    }
  }
}

}  // namespace

void GgufFile::parse() {
  Cursor c(base_, size_, path_);
  const GgufCounts h = read_gguf_header(c, size_);
  version_ = h.version;

  // Metadata.
  ParseState st;
  kv_.reserve(static_cast<size_t>(std::min<uint64_t>(h.n_kv, 1024)));
  for (uint64_t i = 0; i < h.n_kv; ++i) {
    const uint64_t at = c.pos();
    std::string key = c.read_string(fmt::format("metadata entry #{} key", i));
    const std::string what = fmt::format("metadata key '{}'", key);
    if (kv_index_.count(key)) c.fail(fmt::format("duplicate {}", what), at);
    const uint64_t type_at = c.pos();
    const auto t = c.read<uint32_t>(what + " type");
    if (!valid_value_type(t)) c.fail(fmt::format("{}: unknown value type {}", what, t), type_at);
    Value v = read_value(c, static_cast<ValueType>(t), what, 0, st);
    kv_index_.emplace(key, kv_.size());
    kv_.emplace_back(std::move(key), std::move(v));
  }
  alignment_ = gguf_alignment(c, find("general.alignment"));

  // Tensor table.
  tensors_.reserve(static_cast<size_t>(std::min<uint64_t>(h.n_tensors, 4096)));
  for (uint64_t i = 0; i < h.n_tensors; ++i) {
    TensorInfo ti = read_tensor_info(c, i, alignment_, tensor_index_);
    tensor_index_.emplace(ti.name, tensors_.size());
    tensors_.push_back(std::move(ti));
  }

  // Data section: starts at the next multiple of the alignment after the tensor table.
  const uint64_t table_end = c.pos();
  data_offset_ = (table_end + alignment_ - 1) / alignment_ * alignment_;
  if (tensors_.empty()) {
    data_offset_ = std::min(data_offset_, size_);  // vocab-only files may end without padding
    return;
  }
  if (data_offset_ > size_) {
    c.fail(fmt::format("data section would start at {} (aligned to {}), past the end of the file ({} bytes)",
                       data_offset_, alignment_, size_),
           table_end);
  }
  check_tensor_extents(tensors_, path_, data_offset_, size_);
  for (auto& ti : tensors_) ti.data = base_ + data_offset_ + ti.offset;
}

const Value* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

[[noreturn]] void missing_key(const std::string& file, std::string_view key) {
  throw FormatError(fmt::format("{}: metadata key '{}' missing", file, key));
}

[[noreturn]] void wrong_type(const std::string& file, std::string_view key, const Value& v, const char* expected) {
  std::string actual = value_type_name(v.type());
  if (v.type() == ValueType::array) actual = fmt::format("array of {}", value_type_name(v.elem_type()));
  throw FormatError(fmt::format("{}: metadata key '{}' has type {}, expected {}", file, key, actual, expected));
}

}  // namespace

int64_t GgufFile::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) missing_key(path_, key);
  if (!v->is_integer()) wrong_type(path_, key, *v, "an integer");
  try {
    return v->as_int();
  } catch (const InvalidArgument& e) {
    throw FormatError(fmt::format("{}: metadata key '{}': {}", path_, key, e.what()));
  }
}

int64_t GgufFile::get_int(std::string_view key, int64_t fallback) const { return has(key) ? get_int(key) : fallback; }

double GgufFile::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) missing_key(path_, key);
  if (!v->is_float() && !v->is_integer()) wrong_type(path_, key, *v, "a number");
  return v->as_float();
}

double GgufFile::get_float(std::string_view key, double fallback) const { return has(key) ? get_float(key) : fallback; }

bool GgufFile::get_bool(std::string_view key, bool fallback) const {
  const Value* v = find(key);
  if (!v) return fallback;
  if (v->type() != ValueType::boolean) wrong_type(path_, key, *v, "bool");
  return v->as_bool();
}

std::string GgufFile::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) missing_key(path_, key);
  if (v->type() != ValueType::string) wrong_type(path_, key, *v, "string");
  return v->as_string();
}

std::string GgufFile::get_string(std::string_view key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) missing_key(path_, key);
  if (v->type() != ValueType::array || v->elem_type() != ValueType::string) {
    wrong_type(path_, key, *v, "array of string");
  }
  std::vector<std::string> out;
  out.reserve(v->items().size());
  for (const auto& it : v->items()) out.push_back(it.as_string());
  return out;
}

std::vector<float> GgufFile::get_float_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) missing_key(path_, key);
  if (v->type() != ValueType::array) wrong_type(path_, key, *v, "array of f32");
  const ValueType et = v->elem_type();
  const bool numeric = et != ValueType::string && et != ValueType::array && et != ValueType::boolean;
  if (!numeric) wrong_type(path_, key, *v, "array of f32");
  std::vector<float> out;
  out.reserve(v->items().size());
  for (const auto& it : v->items()) out.push_back(static_cast<float>(it.as_float()));
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) missing_key(path_, key);
  if (v->type() != ValueType::array) wrong_type(path_, key, *v, "array of integers");
  const ValueType et = v->elem_type();
  const bool integer = et == ValueType::u8 || et == ValueType::i8 || et == ValueType::u16 || et == ValueType::i16 ||
                       et == ValueType::u32 || et == ValueType::i32 || et == ValueType::u64 || et == ValueType::i64;
  if (!integer) wrong_type(path_, key, *v, "array of integers");
  std::vector<int64_t> out;
  out.reserve(v->items().size());
  for (size_t i = 0; i < v->items().size(); ++i) {
    try {
      out.push_back(v->items()[i].as_int());
    } catch (const InvalidArgument& e) {
      throw FormatError(fmt::format("{}: metadata key '{}' item {}: {}", path_, key, i, e.what()));
    }
  }
  return out;
}

}  // namespace treespec::gguf
