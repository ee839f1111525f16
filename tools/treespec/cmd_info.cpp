// treespec info MODEL.gguf: header, metadata (arrays and long strings summarised) and
// the tensor table with totals.
#include <fmt/format.h>

#include <cstdio>

#include "command.h"
#include "gguf/gguf.h"

namespace {

std::function<int()> setup_info(CLI::App& sub) {
  auto path = std::make_shared<std::string>();
  auto max_items = std::make_shared<size_t>(6);
  sub.add_option("model", *path, "GGUF file")->required();
  sub.add_option("--items", *max_items, "array items shown per metadata key (default 6)");
  return [path, max_items]() -> int {
    using namespace treespec;
    const auto f = gguf::GgufFile::open(*path);
    std::string out;
    out += fmt::format("file: {}\n", f->path());
    out += fmt::format("GGUF version {}, alignment {}, data offset {}, file size {} bytes\n", f->version(),
                       f->alignment(), f->data_offset(), f->file_size());
    out += fmt::format("metadata: {} keys\n", f->metadata().size());
    for (const auto& [key, v] : f->metadata()) {
      const char* type = v.type() == gguf::ValueType::array ? "array" : gguf::value_type_name(v.type());
      out += fmt::format("  {:<44} {:<6} {}\n", key, type, gguf::value_to_display(v, *max_items, 64));
    }
    out += fmt::format("tensors: {}\n", f->tensors().size());
    size_t width = 4;
    for (const auto& t : f->tensors()) width = std::max(width, t.name.size());
    if (!f->tensors().empty()) {
      out += fmt::format("  {:<{}} {:<7} {:<24} {:>12} {:>12}\n", "name", width, "type", "ne", "offset", "bytes");
    }
    int64_t n_params = 0;
    uint64_t n_bytes = 0;
    for (const auto& t : f->tensors()) {
      std::string ne = "[";
      for (size_t i = 0; i < t.ne.size(); ++i) ne += (i ? ", " : "") + std::to_string(t.ne[i]);
      ne += "]";
      out += fmt::format("  {:<{}} {:<7} {:<24} {:>12} {:>12}\n", t.name, width, tensor::dtype_name(t.type), ne,
                         t.offset, t.nbytes);
      n_params += t.n_elements();
      n_bytes += t.nbytes;
    }
    out += fmt::format("total: {} tensors, {} parameters, {} bytes of tensor data\n", f->tensors().size(), n_params,
                       n_bytes);
    std::fputs(out.c_str(), stdout);
    return 0;
  };
}

}  // namespace

TREESPEC_COMMAND("info", "Print a GGUF file's metadata and tensor table", setup_info);
