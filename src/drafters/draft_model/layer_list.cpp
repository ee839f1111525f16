#include "drafters/draft_model/layer_list.h"

#include <fmt/format.h>

#include <charconv>

#include "gguf/gguf.h"
#include "treespec/status.h"

namespace treespec::drafters {

namespace {

int32_t parse_index(std::string_view item, std::string_view part, std::string_view flag) {
  int32_t v = -1;
  const char* b = part.data();
  const char* e = part.data() + part.size();
  auto [ptr, ec] = std::from_chars(b, e, v);
  if (part.empty() || ec != std::errc() || ptr != e || v < 0) {
    throw InvalidArgument(
        fmt::format("{}: '{}' is not a layer index or range (expected e.g. 0,1,2 or 0-2,4 or 0-2+4)", flag, item));
  }
  return v;
}

}  // namespace

std::vector<int32_t> parse_layer_list(std::string_view text, int32_t n_layer, std::string_view flag) {
  std::vector<int32_t> out;
  if (text.empty()) throw InvalidArgument(fmt::format("{}: empty layer list", flag));
  size_t pos = 0;
  while (pos <= text.size()) {
    // '+' separates items too: bench method specs use ',' between methods (draft:layers=0-2+4).
    const size_t comma = text.find_first_of(",+", pos);
    const std::string_view item =
        text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    const size_t dash = item.find('-');
    int32_t lo = 0, hi = 0;
    if (dash == std::string_view::npos) {
      lo = hi = parse_index(item, item, flag);
    } else {
      lo = parse_index(item, item.substr(0, dash), flag);
      hi = parse_index(item, item.substr(dash + 1), flag);
      if (hi < lo) throw InvalidArgument(fmt::format("{}: range '{}' runs backwards", flag, item));
    }
    if (hi >= n_layer) {
      throw InvalidArgument(fmt::format("{}: layer {} in '{}' is out of range: the model has {} layers (0..{})", flag,
                                        hi, item, n_layer, n_layer - 1));
    }
    for (int32_t l = lo; l <= hi; ++l) {
      if (!out.empty() && l <= out.back()) {
        throw InvalidArgument(
            fmt::format("{}: layer {} in '{}' repeats or goes backwards: list layers once, in increasing order", flag,
                        l, item));
      }
      out.push_back(l);
    }
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::string format_layer_list(std::span<const int32_t> layers) {
  std::string s;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    if (!s.empty()) s += ',';
    s += j == i ? fmt::format("{}", layers[i]) : fmt::format("{}-{}", layers[i], layers[j]);
    i = j + 1;
  }
  return s;
}

void write_layer_subset(const std::string& in, const std::string& out, std::span<const int32_t> layers) {
  const auto src = gguf::GgufFile::open(in);
  const std::string arch = src->get_string("general.architecture");
  const std::string key = arch + ".block_count";
  const auto n_layer = static_cast<int32_t>(src->get_int(key));
  // Validates range and order (the same rules as --draft-layers).
  const std::vector<int32_t> keep = parse_layer_list(format_layer_list(layers), n_layer, "layer subset");
  if (keep.size() != layers.size()) throw InvalidArgument("layer subset: layers must be strictly increasing");

  gguf::GgufWriter w;
  for (const auto& [k, v] : src->metadata()) {
    if (k == "general.alignment") continue;
    w.set(k, v);
  }
  if (src->alignment() != gguf::kDefaultAlignment) w.set_alignment(src->alignment());
  w.set(key, gguf::Value::u32(static_cast<uint32_t>(keep.size())));
  const std::string name = src->get_string("general.name", "");
  w.set("general.name",
        gguf::Value::string(fmt::format("{}{}layers {}", name, name.empty() ? "" : " ", format_layer_list(keep))));

  std::vector<int32_t> new_index(static_cast<size_t>(n_layer), -1);
  for (size_t k = 0; k < keep.size(); ++k) new_index[static_cast<size_t>(keep[k])] = static_cast<int32_t>(k);
  std::vector<size_t> copied(keep.size(), 0);
  for (const auto& t : src->tensors()) {
    if (t.name.rfind("blk.", 0) != 0) {
      w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
      continue;
    }
    const size_t dot = t.name.find('.', 4);
    int32_t il = -1;
    if (dot != std::string::npos) {
      auto [ptr, ec] = std::from_chars(t.name.data() + 4, t.name.data() + dot, il);
      if (ec != std::errc() || ptr != t.name.data() + dot) il = -1;
    }
    if (il < 0 || il >= n_layer) {
      throw FormatError(fmt::format("{}: tensor '{}' names no layer in 0..{}", in, t.name, n_layer - 1));
    }
    const int32_t k = new_index[static_cast<size_t>(il)];
    if (k < 0) continue;
    w.add_tensor(fmt::format("blk.{}{}", k, t.name.substr(dot)), t.type, t.ne, t.data, t.nbytes);
    copied[static_cast<size_t>(k)]++;
  }
  for (size_t k = 0; k < keep.size(); ++k) {
    if (copied[k] == 0) throw FormatError(fmt::format("{}: layer {} has no tensors", in, keep[k]));
  }
  w.write(out);
}

}  // namespace treespec::drafters
