#include "tree/tree_choices.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <queue>

#include "core/files.h"
#include "treespec/status.h"

namespace treespec::tree {

namespace {

// Bounds that keep a shape usable by the rest of the engine (TokenTree masks, scratch
// rows) and a malformed file from asking for absurd memory.
constexpr int32_t kMaxShapeNodes = 4096;
constexpr int32_t kMaxShapeDepth = 64;
constexpr int32_t kMaxRank = 1 << 16;

std::string path_str(const std::vector<int32_t>& p) { return fmt::format("[{}]", fmt::join(p, ", ")); }

}  // namespace

TreeShape::TreeShape() : parent_{-1}, depth_{0}, rank_{-1} {}

TreeShape TreeShape::from_paths(const std::vector<std::vector<int32_t>>& paths, const std::string& what) {
  if (paths.size() + 1 > static_cast<size_t>(kMaxShapeNodes)) {
    throw InvalidArgument(
        fmt::format("{}: {} paths, more than the {} nodes a tree may have", what, paths.size(), kMaxShapeNodes - 1));
  }
  std::map<std::vector<int32_t>, int32_t> index;  // path -> position in `paths`
  for (size_t i = 0; i < paths.size(); ++i) {
    const auto& p = paths[i];
    if (p.empty()) throw InvalidArgument(fmt::format("{}: path {} is empty (the root is implicit)", what, i));
    if (p.size() > static_cast<size_t>(kMaxShapeDepth)) {
      throw InvalidArgument(
          fmt::format("{}: path {} has depth {}, more than {}", what, path_str(p), p.size(), kMaxShapeDepth));
    }
    for (int32_t r : p) {
      if (r < 0 || r >= kMaxRank)
        throw InvalidArgument(fmt::format("{}: path {} has rank {} outside 0..{}", what, path_str(p), r, kMaxRank - 1));
    }
    if (!index.emplace(p, static_cast<int32_t>(i)).second) {
      throw InvalidArgument(fmt::format("{}: path {} is listed twice", what, path_str(p)));
    }
  }
  // Children of each listed path (by position), and the depth-1 nodes.
  std::vector<std::vector<int32_t>> kids(paths.size());
  std::vector<int32_t> roots;
  for (size_t i = 0; i < paths.size(); ++i) {
    const auto& p = paths[i];
    if (p.size() == 1) {
      roots.push_back(static_cast<int32_t>(i));
      continue;
    }
    const std::vector<int32_t> up(p.begin(), p.end() - 1);
    const auto it = index.find(up);
    if (it == index.end()) {
      throw InvalidArgument(
          fmt::format("{}: path {} has no parent: {} is not listed", what, path_str(p), path_str(up)));
    }
    kids[static_cast<size_t>(it->second)].push_back(static_cast<int32_t>(i));
  }
  // Stable topological order: always emit the ready node listed first. An already
  // ancestor-closed list comes out unchanged.
  std::priority_queue<int32_t, std::vector<int32_t>, std::greater<>> ready(roots.begin(), roots.end());
  TreeShape s;
  std::vector<int32_t> node_of(paths.size(), -1);
  while (!ready.empty()) {
    const int32_t i = ready.top();
    ready.pop();
    const auto& p = paths[static_cast<size_t>(i)];
    int32_t parent = 0;
    if (p.size() > 1) parent = node_of[static_cast<size_t>(index.at(std::vector<int32_t>(p.begin(), p.end() - 1)))];
    node_of[static_cast<size_t>(i)] = s.size();
    s.parent_.push_back(parent);
    s.depth_.push_back(static_cast<int32_t>(p.size()));
    s.rank_.push_back(p.back());
    for (int32_t c : kids[static_cast<size_t>(i)]) ready.push(c);
  }
  return s;
}

std::vector<int32_t> TreeShape::path(int32_t i) const {
  std::vector<int32_t> p;
  for (int32_t n = i; n > 0; n = parent(n)) p.push_back(rank(n));
  std::reverse(p.begin(), p.end());
  return p;
}

int32_t TreeShape::max_depth() const { return *std::max_element(depth_.begin(), depth_.end()); }

int32_t TreeShape::max_rank() const { return *std::max_element(rank_.begin(), rank_.end()); }

std::vector<std::vector<int32_t>> TreeShape::paths() const {
  std::vector<std::vector<int32_t>> out;
  for (int32_t i = 1; i < size(); ++i) out.push_back(path(i));
  return out;
}

TreeShape TreeShape::prefix(int32_t n) const {
  if (n < 1) throw InvalidArgument(fmt::format("tree prefix must keep at least the root, got {} nodes", n));
  TreeShape s = *this;
  if (n < size()) {
    s.parent_.resize(static_cast<size_t>(n));
    s.depth_.resize(static_cast<size_t>(n));
    s.rank_.resize(static_cast<size_t>(n));
  }
  return s;
}

TreeShape TreeShape::limit_depth(int32_t max_depth) const {
  TreeShape s;
  std::vector<int32_t> new_index(static_cast<size_t>(size()), -1);
  new_index[0] = 0;
  for (int32_t i = 1; i < size(); ++i) {
    if (depth(i) > max_depth) continue;
    new_index[static_cast<size_t>(i)] = s.size();
    s.parent_.push_back(new_index[static_cast<size_t>(parent(i))]);
    s.depth_.push_back(depth(i));
    s.rank_.push_back(rank(i));
  }
  return s;
}

// ---------------------------------------------------------------------------------------
// JSON

namespace {

nlohmann::json parse_json(const std::string& text, const std::string& source) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    throw FormatError(fmt::format("{}: not valid JSON: {}", source, e.what()));
  }
}

std::vector<std::vector<int32_t>> paths_from_json(const nlohmann::json& j, const std::string& what) {
  if (!j.is_array()) throw FormatError(fmt::format("{}: expected a list of rank paths, got {}", what, j.type_name()));
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& p = j[i];
    if (!p.is_array())
      throw FormatError(fmt::format("{}: entry {} is {}, expected a list of ranks", what, i, p.type_name()));
    std::vector<int32_t> path;
    for (const auto& r : p) {
      if (!r.is_number_integer())
        throw FormatError(fmt::format("{}: entry {} holds {}, expected integer ranks", what, i, r.dump()));
      const int64_t v = r.get<int64_t>();
      if (v < 0 || v >= kMaxRank)
        throw FormatError(fmt::format("{}: entry {} has rank {} outside 0..{}", what, i, v, kMaxRank - 1));
      path.push_back(static_cast<int32_t>(v));
    }
    out.push_back(std::move(path));
  }
  return out;
}

std::vector<std::string> names_of(const nlohmann::json& j) {
  std::vector<std::string> names;
  if (j.is_object() && j.contains("trees") && j["trees"].is_object()) {
    for (auto it = j["trees"].begin(); it != j["trees"].end(); ++it) names.push_back(it.key());
  }
  return names;
}

}  // namespace

std::vector<std::string> tree_names_in_file(const std::string& path) {
  return names_of(parse_json(core::read_text_file(path, "tree choices file"), path));
}

TreeShape parse_tree_choices(const std::string& json_text, const std::string& name, const std::string& source) {
  const nlohmann::json j = parse_json(json_text, source);
  if (j.is_array()) {
    if (!name.empty())
      throw InvalidArgument(fmt::format("{}: holds one unnamed tree, but tree '{}' was asked for", source, name));
    return TreeShape::from_paths(paths_from_json(j, source), source);
  }
  if (!j.is_object() || !j.contains("trees") || !j["trees"].is_object()) {
    throw FormatError(
        fmt::format("{}: expected {{\"trees\": {{name: [[rank, ...], ...]}}}} or a list of rank paths", source));
  }
  const auto& trees = j["trees"];
  const std::vector<std::string> names = names_of(j);
  std::string pick = name;
  if (pick.empty()) {
    if (names.size() != 1) {
      throw InvalidArgument(
          fmt::format("{}: holds {} trees; name one of: {}", source, names.size(), fmt::join(names, ", ")));
    }
    pick = names.front();
  }
  if (!trees.contains(pick)) {
    throw InvalidArgument(fmt::format("{}: no tree named '{}' (available: {})", source, pick, fmt::join(names, ", ")));
  }
  const std::string what = fmt::format("{}: tree '{}'", source, pick);
  return TreeShape::from_paths(paths_from_json(trees[pick], what), what);
}

TreeShape load_tree_choices(const std::string& path, const std::string& name) {
  return parse_tree_choices(core::read_text_file(path, "tree choices file"), name, path);
}

// ---------------------------------------------------------------------------------------
// Acceptance table

AcceptanceTable::AcceptanceTable(int32_t n_depth, int32_t top_k) : n_depth_(n_depth), top_k_(top_k) {
  if (n_depth < 1 || n_depth > kMaxShapeDepth)
    throw InvalidArgument(fmt::format("acceptance table depth must be in 1..{}, got {}", kMaxShapeDepth, n_depth));
  if (top_k < 1 || top_k > 1024)
    throw InvalidArgument(fmt::format("acceptance table top-k must be in 1..1024, got {}", top_k));
  p_.assign(static_cast<size_t>(n_depth) * static_cast<size_t>(top_k), 0.0f);
}

AcceptanceTable AcceptanceTable::from_cumulative(int32_t n_depth, int32_t top_k, std::span<const float> cum) {
  AcceptanceTable t(n_depth, top_k);
  if (cum.size() != t.p_.size()) {
    throw InvalidArgument(fmt::format("calibration table has {} entries, expected {} depths x top-{} = {}", cum.size(),
                                      n_depth, top_k, t.p_.size()));
  }
  for (int32_t d = 1; d <= n_depth; ++d) {
    float prev = 0.0f;
    for (int32_t k = 0; k < top_k; ++k) {
      const float c = cum[static_cast<size_t>((d - 1) * top_k + k)];
      if (!(c >= 0.0f && c <= 1.0f) || c < prev) {
        throw InvalidArgument(fmt::format(
            "calibration table: top-{} accuracy at depth {} is {} (must be in [0, 1] and not below top-{}'s {})", k + 1,
            d, c, k, prev));
      }
      t.set(d, k, c - prev);
      prev = c;
    }
  }
  return t;
}

float AcceptanceTable::p(int32_t depth, int32_t rank) const {
  if (depth < 1 || depth > n_depth_ || rank < 0 || rank >= top_k_) return 0.0f;
  return p_[static_cast<size_t>((depth - 1) * top_k_ + rank)];
}

void AcceptanceTable::set(int32_t depth, int32_t rank, float value) {
  if (depth < 1 || depth > n_depth_ || rank < 0 || rank >= top_k_) {
    throw InvalidArgument(
        fmt::format("acceptance table: (depth {}, rank {}) outside {} x {}", depth, rank, n_depth_, top_k_));
  }
  p_[static_cast<size_t>((depth - 1) * top_k_ + rank)] = value;
}

std::vector<float> AcceptanceTable::cumulative() const {
  std::vector<float> out(p_.size());
  for (int32_t d = 0; d < n_depth_; ++d) {
    double acc = 0.0;
    for (int32_t k = 0; k < top_k_; ++k) {
      acc += p_[static_cast<size_t>(d * top_k_ + k)];
      out[static_cast<size_t>(d * top_k_ + k)] = static_cast<float>(acc);
    }
  }
  return out;
}

double AcceptanceTable::path_prob(std::span<const int32_t> rank_path) const {
  double prob = 1.0;
  for (size_t i = 0; i < rank_path.size(); ++i) prob *= p(static_cast<int32_t>(i) + 1, rank_path[i]);
  return prob;
}

void AcceptanceTable::update(int32_t depth, int32_t rank, float alpha) {
  if (depth < 1 || depth > n_depth_) return;  // deeper than the table: nothing to learn
  float* row = p_.data() + static_cast<size_t>((depth - 1) * top_k_);
  for (int32_t k = 0; k < top_k_; ++k) row[k] = (1.0f - alpha) * row[k] + (k == rank ? alpha : 0.0f);
}

void AcceptanceTable::update(std::span<const int32_t> ranks_by_depth, float alpha) {
  for (size_t i = 0; i < ranks_by_depth.size(); ++i) update(static_cast<int32_t>(i) + 1, ranks_by_depth[i], alpha);
}

// ---------------------------------------------------------------------------------------
// Best-first trees

namespace {

struct Frontier {
  double prob;
  std::vector<int32_t> path;
  int32_t parent;  // node index in the tree being built
};

// Max-heap order: higher probability, then smaller depth, then smaller rank path.
struct FrontierLess {
  bool operator()(const Frontier& a, const Frontier& b) const {
    if (a.prob != b.prob) return a.prob < b.prob;
    if (a.path.size() != b.path.size()) return a.path.size() > b.path.size();
    return a.path > b.path;
  }
};

}  // namespace

BestFirstTree build_best_first(const AcceptanceTable& table, int32_t n_nodes, int32_t max_depth) {
  if (table.n_depth() < 1) throw InvalidArgument("best-first tree: the acceptance table is empty");
  if (max_depth <= 0) max_depth = table.n_depth();
  max_depth = std::min(max_depth, table.n_depth());
  if (n_nodes < 1 || n_nodes > kMaxShapeNodes) {
    throw InvalidArgument(fmt::format("best-first tree size must be in 1..{} nodes, got {}", kMaxShapeNodes, n_nodes));
  }
  // Nodes that exist at all: sum over d of top_k^d (saturating).
  int64_t possible = 1, level = 1;
  for (int32_t d = 1; d <= max_depth && possible < n_nodes; ++d) {
    level = std::min<int64_t>(level * table.top_k(), kMaxShapeNodes);
    possible += level;
  }
  if (possible < n_nodes) {
    throw InvalidArgument(fmt::format(
        "best-first tree of {} nodes is impossible with depth <= {} and top-{} candidates per depth ({} nodes at most)",
        n_nodes, max_depth, table.top_k(), possible));
  }
  BestFirstTree out;
  out.node_prob.push_back(1.0);
  out.expected.push_back(0.0);
  std::vector<std::vector<int32_t>> paths;
  std::priority_queue<Frontier, std::vector<Frontier>, FrontierLess> heap;
  auto push_children = [&](int32_t node, const std::vector<int32_t>& path, double prob) {
    if (static_cast<int32_t>(path.size()) >= max_depth) return;
    for (int32_t j = 0; j < table.top_k(); ++j) {
      std::vector<int32_t> child = path;
      child.push_back(j);
      heap.push(Frontier{prob * table.p(static_cast<int32_t>(child.size()), j), std::move(child), node});
    }
  };
  push_children(0, {}, 1.0);
  while (static_cast<int32_t>(paths.size()) + 1 < n_nodes) {
    Frontier f = heap.top();
    heap.pop();
    const auto node = static_cast<int32_t>(paths.size()) + 1;
    out.node_prob.push_back(f.prob);
    out.expected.push_back(out.expected.back() + f.prob);
    push_children(node, f.path, f.prob);
    paths.push_back(std::move(f.path));
  }
  out.shape = TreeShape::from_paths(paths, "best-first tree");
  return out;
}

double expected_accepted(const TreeShape& shape, const AcceptanceTable& table) {
  double e = 0.0;
  for (int32_t i = 1; i < shape.size(); ++i) e += table.path_prob(shape.path(i));
  return e;
}

}  // namespace treespec::tree
