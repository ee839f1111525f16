#include "drafters/medusa/medusa_drafter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include "core/assert.h"
#include "core/log.h"
#include "model/model.h"
#include "sampling/top_k.h"
#include "treespec/status.h"

namespace treespec::drafters {

void MedusaParams::validate() const {
  if (top_k < 1 || top_k > 1024)
    throw InvalidArgument(fmt::format("medusa: candidates per head (--medusa-topk) must be in 1..1024, got {}", top_k));
  if (tree_nodes < 0 || tree_nodes > 4096)
    throw InvalidArgument(fmt::format("medusa: --tree-nodes must be in 0..4096, got {}", tree_nodes));
  if (!(adapt_alpha >= 0.0f && adapt_alpha <= 1.0f))
    throw InvalidArgument(fmt::format("medusa: adapt alpha must be in [0, 1], got {}", adapt_alpha));
  if (tree.empty()) throw InvalidArgument("medusa: --tree is empty (dynamic:N, auto:N, a tree name, or a JSON file)");
  (void)dynamic_nodes();
}

namespace {

// N of "<prefix>N" (1..4096), or 0 when spec does not start with prefix.
int32_t nodes_after(const std::string& spec, const std::string& prefix) {
  if (spec.rfind(prefix, 0) != 0) return 0;
  const std::string num = spec.substr(prefix.size());
  char* end = nullptr;
  const long n = std::strtol(num.c_str(), &end, 10);
  if (num.empty() || *end != '\0' || n < 1 || n > 4096) {
    throw InvalidArgument(
        fmt::format("--tree '{}': expected {}N with N (nodes incl. the root) in 1..4096", spec, prefix));
  }
  return static_cast<int32_t>(n);
}

}  // namespace

int32_t MedusaParams::dynamic_nodes() const { return nodes_after(tree, "dynamic:"); }

// ---------------------------------------------------------------------------------------

MedusaCandidates::MedusaCandidates(std::shared_ptr<const MedusaHeads> heads, int32_t top_k, core::ThreadPool* pool)
    : heads_(std::move(heads)), top_k_(top_k), pool_(pool) {
  TREESPEC_ASSERT(heads_ != nullptr, "MedusaCandidates: heads required");
  if (top_k < 1 || top_k > heads_->n_draft()) {
    throw InvalidArgument(
        fmt::format("medusa: {} candidates per head, but the heads draft from {} tokens", top_k, heads_->n_draft()));
  }
  ids_.assign(static_cast<size_t>(heads_->n_heads()) * static_cast<size_t>(top_k), 0);
  probs_.assign(ids_.size(), 0.0f);
  const auto K = static_cast<size_t>(heads_->n_heads());
  work_.resize((K + 1) * static_cast<size_t>(heads_->n_embd()));
  logits_.resize(K * static_cast<size_t>(heads_->n_draft()));
}

void MedusaCandidates::compute(const float* h) {
  heads_->forward_all(h, work_.data(), logits_.data(), pool_);
  const auto D = static_cast<size_t>(heads_->n_draft());
  for (int32_t k = 0; k < heads_->n_heads(); ++k) {
    int32_t* ids = ids_.data() + static_cast<size_t>(k) * static_cast<size_t>(top_k_);
    const float* row = logits_.data() + static_cast<size_t>(k) * D;
    sampling::top_k_ids(row, heads_->n_draft(), top_k_, ids);
    // The candidates' softmax probabilities over the draft vocabulary: a confidence
    // signal for dynamic trees (calibrated online, so logits more than 16 below the
    // largest, each under 1e-7 of its mass, are left out of the sum).
    float* probs = probs_.data() + static_cast<size_t>(k) * static_cast<size_t>(top_k_);
    const float top = row[ids[0]];
    float sum = 0.0f;
    if (std::isfinite(top)) {
      for (int32_t j = 0; j < heads_->n_draft(); ++j) {
        if (row[j] > top - 16.0f) sum += std::exp(row[j] - top);
      }
    }
    for (int32_t j = 0; j < top_k_; ++j) {
      probs[j] = sum > 0.0f && std::isfinite(row[ids[j]]) ? std::exp(row[ids[j]] - top) / sum : 0.0f;
    }
    // Columns to token ids (ascending, so ties still go to the lower id).
    for (int32_t j = 0; j < top_k_; ++j) ids[j] = heads_->draft_token(ids[j]);
  }
}

int32_t MedusaCandidates::rank_of(int32_t k, int32_t token) const {
  const auto t = top(k);
  const auto it = std::find(t.begin(), t.end(), token);
  return it == t.end() ? -1 : static_cast<int32_t>(it - t.begin());
}

tree::TokenTree fill_medusa_tree(int32_t root, const tree::TreeShape& shape, const MedusaCandidates& cand,
                                 int32_t budget) {
  tree::TokenTree t(root);
  const int32_t n = std::min(shape.size(), std::max(1, budget));
  for (int32_t i = 1; i < n; ++i) {
    const int32_t d = shape.depth(i);
    TREESPEC_ASSERT(d <= cand.n_heads() && shape.rank(i) < cand.top_k(),
                    "fill_medusa_tree: shape does not fit the heads (resolve_medusa_tree checks)");
    t.add(cand.top(d - 1)[static_cast<size_t>(shape.rank(i))], shape.parent(i));
  }
  return t;
}

// ---------------------------------------------------------------------------------------

void HeadAccuracyTracker::add(int64_t root_index, const MedusaCandidates& cand) {
  Pending p{root_index, 0, true, {}, {}};
  for (int32_t k = 0; k < cand.n_heads(); ++k) {
    p.cand.emplace_back(cand.top(k).begin(), cand.top(k).end());
    p.prob.emplace_back(cand.prob(k).begin(), cand.prob(k).end());
  }
  pending_.push_back(std::move(p));
}

void HeadAccuracyTracker::grade(std::span<const int32_t> context, tree::AcceptanceTable& table, float alpha,
                                HeadConfidence* conf) {
  const auto n = static_cast<int64_t>(context.size());
  for (auto& p : pending_) {
    while (p.graded < static_cast<int32_t>(p.cand.size())) {
      const int64_t target = p.root_index + p.graded + 1;
      if (target >= n) break;
      const auto& c = p.cand[static_cast<size_t>(p.graded)];
      const int32_t tok = context[static_cast<size_t>(target)];
      const auto it = std::find(c.begin(), c.end(), tok);
      const int32_t rank = it == c.end() ? -1 : static_cast<int32_t>(it - c.begin());
      table.update(p.graded + 1, rank, alpha);
      if (conf != nullptr && p.chain) {
        const auto& pr = p.prob[static_cast<size_t>(p.graded)];
        for (size_t j = 0; j < c.size(); ++j) conf->update(p.graded, pr[j], static_cast<int32_t>(j) == rank, alpha);
      }
      p.chain = p.chain && rank >= 0;
      ++p.graded;
    }
  }
  while (!pending_.empty() && pending_.front().graded == static_cast<int32_t>(pending_.front().cand.size()))
    pending_.pop_front();
}

// ---------------------------------------------------------------------------------------

MedusaDrafter::MedusaDrafter(const std::shared_ptr<const MedusaHeads>& heads, tree::TreeShape shape,
                             const MedusaParams& p, core::ThreadPool* pool, tree::AcceptanceTable initial)
    : heads_(heads),
      shape_(std::move(shape)),
      p_(p),
      cand_(heads, p.top_k, pool),
      live_(std::move(initial)),
      dynamic_(p.dynamic_nodes()),
      conf_(heads->n_heads()) {
  p_.validate();
  if (shape_.max_depth() > heads_->n_heads()) {
    throw InvalidArgument(fmt::format("medusa: the tree has depth {} but there are only {} heads", shape_.max_depth(),
                                      heads_->n_heads()));
  }
  if (shape_.max_rank() >= p_.top_k) {
    throw InvalidArgument(
        fmt::format("medusa: the tree uses rank {} but each head offers only {} candidates (--medusa-topk)",
                    shape_.max_rank(), p_.top_k));
  }
  if (live_.n_depth() != heads_->n_heads() || live_.top_k() != p_.top_k)
    live_ = tree::AcceptanceTable(heads_->n_heads(), p_.top_k);
}

void MedusaDrafter::begin(std::span<const int32_t> prompt) {
  have_cand_ = false;
  tracker_.clear();
}

tree::TokenTree MedusaDrafter::propose(const DraftInput& in) {
  const int32_t root = in.context.back();
  if (!have_cand_) return tree::TokenTree(root);  // first step: no hidden state yet
  if (dynamic_ == 0) return fill_medusa_tree(root, shape_, cand_, in.budget);
  DynamicTree t = grow_dynamic_tree(root, cand_, conf_, dynamic_);
  curve_.add(t.expected);
  return t.tree.prefix(t.size_for(in.budget, in.min_value));
}

bool MedusaDrafter::expected_accepted(std::span<double> out) const {
  if (dynamic_ == 0) return false;
  // Without candidates (the first step) the next tree is the root alone.
  if (have_cand_ && !curve_.empty()) {
    curve_.fill(out);
  } else {
    std::fill(out.begin(), out.end(), 0.0);
  }
  return true;
}

void MedusaDrafter::observe(const StepFeedback& fb) {
  const int32_t last = fb.result.path.back();
  const float* h =
      static_cast<size_t>(last) < fb.node_hidden.size() ? fb.node_hidden[static_cast<size_t>(last)] : nullptr;
  if (h == nullptr) {  // no hidden state for the accepted node: next step is plain
    have_cand_ = false;
    return;
  }
  cand_.compute(h);
  have_cand_ = true;
  if (p_.adapt_alpha > 0.0f) {
    tracker_.grade(fb.context, live_, p_.adapt_alpha, dynamic_ > 0 ? &conf_ : nullptr);
    tracker_.add(static_cast<int64_t>(fb.context.size()) - 1, cand_);
  }
}

// ---------------------------------------------------------------------------------------

std::shared_ptr<const MedusaHeads> load_medusa_heads(const MedusaParams& p, const model::Model& m, const char* method) {
  // Cache by (file, size, mtime, model): the server and the tests make one drafter per
  // sequence; loading and hashing once is enough.
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<const MedusaHeads>> cache;
  const std::string path = p.heads_path.empty() ? m.gguf().path() : p.heads_path;
  std::string key = fmt::format("{}|{}|{}", path, m.gguf().path(), static_cast<const void*>(&m));
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec) {
    const auto mtime = std::filesystem::last_write_time(path, ec);
    if (!ec) key += fmt::format("|{}|{}", size, mtime.time_since_epoch().count());
  }
  std::lock_guard<std::mutex> lock(mu);
  if (auto h = cache[key].lock()) return h;
  std::shared_ptr<MedusaHeads> h;
  if (p.heads_path.empty()) {
    if (!MedusaHeads::present_in(m.gguf())) {
      throw InvalidArgument(
          fmt::format("--spec {}: model '{}' holds no Medusa heads; give a heads file (run, serve: --heads FILE; "
                      "bench: --method {}:--heads=FILE; train one with: treespec train-heads -m {} -o HEADS.gguf)",
                      method, m.gguf().path(), method, m.gguf().path()));
    }
    h = MedusaHeads::from_gguf(m.gguf_shared());
  } else {
    h = MedusaHeads::load(p.heads_path);
  }
  h->bind(m);
  cache[key] = h;
  return h;
}

tree::AcceptanceTable calibration_table(const MedusaHeads& heads, int32_t top_k) {
  const auto& in = heads.info();
  if (!in.has_calibration()) {
    throw InvalidArgument(
        fmt::format("medusa: heads '{}' carry no calibration table, so --tree auto:N cannot be built; "
                    "use a static tree (--tree medusa_mc_sim_7b_63) or retrain with treespec train-heads",
                    heads.source()));
  }
  const int32_t k = std::min(top_k, in.calib_top_k);
  std::vector<float> cum;
  for (int32_t h = 0; h < in.n_heads; ++h) {
    for (int32_t j = 0; j < k; ++j) cum.push_back(in.calibration[static_cast<size_t>(h * in.calib_top_k + j)]);
  }
  tree::AcceptanceTable t = tree::AcceptanceTable::from_cumulative(in.n_heads, k, cum);
  if (k == top_k) return t;
  tree::AcceptanceTable wide(in.n_heads, top_k);  // ranks beyond the calibration: unknown, 0
  for (int32_t d = 1; d <= in.n_heads; ++d) {
    for (int32_t j = 0; j < k; ++j) wide.set(d, j, t.p(d, j));
  }
  return wide;
}

namespace {

std::vector<std::string> default_tree_files() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("TREESPEC_SHARED"); env && *env)
    out.push_back(std::string(env) + "/data/tree_choices.json");
  out.push_back("../shared/data/tree_choices.json");
  return out;
}

bool is_file(const std::string& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

}  // namespace

tree::TreeShape resolve_medusa_tree(const MedusaParams& p, const MedusaHeads& heads) {
  p.validate();
  tree::TreeShape shape;
  const std::string& spec = p.tree;
  if (p.dynamic_nodes() > 0) return shape;  // grown every step (dynamic_tree.h)
  if (const int32_t n = nodes_after(spec, "auto:"); n > 0) {
    shape = tree::build_best_first(calibration_table(heads, p.top_k), n, heads.n_heads()).shape;
  } else if (is_file(spec)) {
    shape = tree::load_tree_choices(spec);
  } else if (const auto colon = spec.rfind(':'); colon != std::string::npos && is_file(spec.substr(0, colon))) {
    shape = tree::load_tree_choices(spec.substr(0, colon), spec.substr(colon + 1));
  } else {
    std::vector<std::string> files = p.tree_file.empty() ? default_tree_files() : std::vector<std::string>{p.tree_file};
    std::string found;
    for (const auto& f : files) {
      if (is_file(f)) {
        found = f;
        break;
      }
    }
    if (found.empty()) {
      throw InvalidArgument(
          fmt::format("--tree '{}' is not auto:N or a file, and no tree choices file to look the name up in was found "
                      "(tried {}); pass --tree-file",
                      spec, fmt::join(files, ", ")));
    }
    shape = tree::load_tree_choices(found, spec);
  }
  if (shape.max_depth() > heads.n_heads()) {
    const int32_t before = shape.size(), depth = shape.max_depth();
    shape = shape.limit_depth(heads.n_heads());
    TS_LOG_WARN("medusa: tree '{}' is {} deep but there are {} heads: dropped its {} deeper nodes", spec, depth,
                heads.n_heads(), before - shape.size());
  }
  if (shape.max_rank() >= p.top_k) {
    throw InvalidArgument(
        fmt::format("--tree '{}' uses rank {} but each head offers {} candidates (raise --medusa-topk)", spec,
                    shape.max_rank(), p.top_k));
  }
  if (p.tree_nodes > 0) shape = shape.prefix(p.tree_nodes);
  return shape;
}

std::unique_ptr<Drafter> make_medusa_drafter(const MedusaParams& p, const model::Model& m, core::ThreadPool* pool,
                                             const char* method) {
  p.validate();
  auto heads = load_medusa_heads(p, m, method);
  tree::TreeShape shape = resolve_medusa_tree(p, *heads);
  tree::AcceptanceTable initial = heads->info().has_calibration() ? calibration_table(*heads, p.top_k)
                                                                  : tree::AcceptanceTable(heads->n_heads(), p.top_k);
  return std::make_unique<MedusaDrafter>(std::move(heads), std::move(shape), p, pool, std::move(initial));
}

}  // namespace treespec::drafters
