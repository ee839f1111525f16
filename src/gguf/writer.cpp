// GgufWriter: the standard GGUF layout (as llama.cpp's gguf writer produces it):
// header, metadata, tensor infos, padding to the alignment, then each tensor's data
// padded to the alignment.
#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "gguf/gguf.h"
#include "treespec/status.h"

namespace treespec::gguf {

namespace {

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Collects bytes into a vector.
struct VectorSink {
  std::vector<uint8_t>& out;
  void put(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
  uint64_t written() const { return out.size(); }
};

// Streams bytes to a FILE*.
struct FileSink {
  std::FILE* f;
  const std::string& path;
  uint64_t n = 0;
  void put(const void* p, size_t len) {
    if (len && std::fwrite(p, 1, len, f) != len) {
      throw IoError(fmt::format("{}: write failed: {}", path, std::strerror(errno)));
    }
    n += len;
  }
  uint64_t written() const { return n; }
};

template <typename Sink, typename T>
void put_pod(Sink& s, T v) {
  s.put(&v, sizeof v);
}

template <typename Sink>
void put_string(Sink& s, const std::string& str) {
  put_pod<Sink, uint64_t>(s, str.size());
  s.put(str.data(), str.size());
}

template <typename Sink>
void put_value(Sink& s, const Value& v) {
  switch (v.type()) {
    case ValueType::u8: put_pod<Sink, uint8_t>(s, static_cast<uint8_t>(v.as_uint())); break;
    case ValueType::i8: put_pod<Sink, int8_t>(s, static_cast<int8_t>(v.as_int())); break;
    case ValueType::u16: put_pod<Sink, uint16_t>(s, static_cast<uint16_t>(v.as_uint())); break;
    case ValueType::i16: put_pod<Sink, int16_t>(s, static_cast<int16_t>(v.as_int())); break;
    case ValueType::u32: put_pod<Sink, uint32_t>(s, static_cast<uint32_t>(v.as_uint())); break;
    case ValueType::i32: put_pod<Sink, int32_t>(s, static_cast<int32_t>(v.as_int())); break;
    case ValueType::u64: put_pod<Sink, uint64_t>(s, v.as_uint()); break;
    case ValueType::i64: put_pod<Sink, int64_t>(s, v.as_int()); break;
    case ValueType::f32: put_pod<Sink, float>(s, static_cast<float>(v.as_float())); break;
    case ValueType::f64: put_pod<Sink, double>(s, v.as_float()); break;
    case ValueType::boolean: put_pod<Sink, uint8_t>(s, v.as_bool() ? 1 : 0); break;
    case ValueType::string: put_string(s, v.as_string()); break;
    case ValueType::array:
      put_pod<Sink, uint32_t>(s, static_cast<uint32_t>(v.elem_type()));
      put_pod<Sink, uint64_t>(s, v.items().size());
      for (const auto& it : v.items()) put_value(s, it);
      break;
  }
}

void check_alignment_value(uint64_t a) {
  if (!is_power_of_two(a) || a > (1ull << 30)) {
    throw InvalidArgument(fmt::format("GGUF alignment {} is not a power of two in [1, 2^30]", a));
  }
}

}  // namespace

GgufWriter::GgufWriter(uint32_t version) : version_(version) {
  if (version != 2 && version != 3) {
    throw InvalidArgument(fmt::format("GgufWriter: version {} not supported (2 or 3)", version));
  }
}

void GgufWriter::set(const std::string& key, Value v) {
  if (key == "general.alignment") {
    uint64_t a = 0;
    try {
      a = v.as_uint();
    } catch (const InvalidArgument&) {
      throw InvalidArgument(
          fmt::format("general.alignment must be a non-negative integer, got {}", value_type_name(v.type())));
    }
    check_alignment_value(a);
    alignment_ = a;
  }
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  }
  kv_.emplace_back(key, std::move(v));
}

void GgufWriter::set_alignment(uint64_t alignment) {
  check_alignment_value(alignment);
  set("general.alignment", Value::u32(static_cast<uint32_t>(alignment)));
}

void GgufWriter::add_tensor(const std::string& name, tensor::DType type, std::vector<int64_t> ne, const void* data,
                            size_t nbytes) {
  for (const auto& t : tensors_) {
    if (t.name == name) throw InvalidArgument(fmt::format("GgufWriter: duplicate tensor name '{}'", name));
  }
  if (ne.empty() || ne.size() > static_cast<size_t>(kMaxDims)) {
    throw InvalidArgument(fmt::format("GgufWriter: tensor '{}' has {} dims (1..{})", name, ne.size(), kMaxDims));
  }
  const auto traits = tensor::dtype_traits(static_cast<uint32_t>(type));
  if (!traits) throw InvalidArgument(fmt::format("GgufWriter: tensor '{}' has an unknown type", name));
  int64_t n = 1;
  for (int64_t d : ne) {
    if (d <= 0 || __builtin_mul_overflow(n, d, &n)) {
      throw InvalidArgument(fmt::format("GgufWriter: tensor '{}' has a bad dimension {}", name, d));
    }
  }
  if (ne[0] % traits->block_size != 0) {
    throw InvalidArgument(fmt::format("GgufWriter: tensor '{}': ne[0] = {} is not a multiple of the {} block size {}",
                                      name, ne[0], traits->name, traits->block_size));
  }
  int64_t expect = 0;
  if (__builtin_mul_overflow(n / traits->block_size, traits->type_size, &expect) ||
      static_cast<uint64_t>(expect) != nbytes) {
    throw InvalidArgument(fmt::format("GgufWriter: tensor '{}': {} bytes given, {} {} elements need {}", name, nbytes,
                                      n, traits->name, expect));
  }
  PendingTensor t{name, type, std::move(ne), {}};
  const auto* b = static_cast<const uint8_t*>(data);
  t.data.assign(b, b + nbytes);
  tensors_.push_back(std::move(t));
}

template <typename Sink>
void GgufWriter::emit(Sink& sink) const {
  put_pod<Sink, uint32_t>(sink, kMagic);
  put_pod<Sink, uint32_t>(sink, version_);
  put_pod<Sink, uint64_t>(sink, tensors_.size());
  put_pod<Sink, uint64_t>(sink, kv_.size());
  for (const auto& [key, v] : kv_) {
    put_string(sink, key);
    put_pod<Sink, uint32_t>(sink, static_cast<uint32_t>(v.type()));
    put_value(sink, v);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(sink, t.name);
    put_pod<Sink, uint32_t>(sink, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put_pod<Sink, uint64_t>(sink, static_cast<uint64_t>(d));
    put_pod<Sink, uint32_t>(sink, static_cast<uint32_t>(t.type));
    put_pod<Sink, uint64_t>(sink, offset);
    offset = align_up(offset + t.data.size(), alignment_);
  }
  static const std::vector<uint8_t> zeros(1u << 16, 0);
  auto pad = [&](uint64_t to) {
    while (sink.written() < to) {
      const uint64_t n = std::min<uint64_t>(to - sink.written(), zeros.size());
      sink.put(zeros.data(), n);
    }
  };
  pad(align_up(sink.written(), alignment_));
  const uint64_t data_start = sink.written();
  uint64_t rel = 0;
  for (const auto& t : tensors_) {
    sink.put(t.data.data(), t.data.size());
    rel = align_up(rel + t.data.size(), alignment_);
    pad(data_start + rel);
  }
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint8_t> out;
  VectorSink sink{out};
  emit(sink);
  return out;
}

void GgufWriter::write(const std::string& path) const {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) throw IoError(fmt::format("{}: cannot open for writing: {}", path, std::strerror(errno)));
  FileSink sink{f.get(), path};
  emit(sink);
  std::FILE* raw = f.release();
  if (std::fclose(raw) != 0) throw IoError(fmt::format("{}: close failed: {}", path, std::strerror(errno)));
}

}  // namespace treespec::gguf
