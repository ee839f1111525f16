#include "drafters/lookup/lookup_drafter.h"

#include <fmt/format.h>

#include <algorithm>

#include "treespec/status.h"

namespace treespec::drafters {

void LookupParams::validate() const {
  if (ngram_min < 1 || ngram_max < ngram_min || ngram_max > 64) {
    throw InvalidArgument(
        fmt::format("lookup n-gram sizes must satisfy 1 <= min <= max <= 64 (got {}..{})", ngram_min, ngram_max));
  }
  if (draft_len < 1 || draft_len > 256)
    throw InvalidArgument(fmt::format("lookup draft length must be in 1..256, got {}", draft_len));
  if (max_branches < 1 || max_branches > 64) {
    throw InvalidArgument(fmt::format("lookup branches must be in 1..64, got {}", max_branches));
  }
}

LookupDrafter::LookupDrafter(const LookupParams& p) : p_(p) { p_.validate(); }

tree::TokenTree LookupDrafter::propose(const DraftInput& in) {
  const auto ctx = in.context;
  const auto n_ctx = static_cast<int64_t>(ctx.size());
  tree::TokenTree t(ctx.back());
  int32_t branches = 0;
  for (auto n = static_cast<int32_t>(std::min<int64_t>(p_.ngram_max, n_ctx - 1));
       n >= p_.ngram_min && branches < p_.max_branches; --n) {
    const auto suffix = ctx.subspan(static_cast<size_t>(n_ctx - n));
    // Most recent occurrence first; the match must end before the suffix itself.
    for (int64_t end = n_ctx - 1; end >= n && branches < p_.max_branches && t.size() < in.budget; --end) {
      // Occurrence ctx[end - n, end) followed by ctx[end, ...).
      if (!std::equal(suffix.begin(), suffix.end(), ctx.begin() + (end - n))) continue;
      int32_t node = 0;
      bool added = false;
      for (int64_t k = end; k < n_ctx && k < end + p_.draft_len && t.size() < in.budget; ++k) {
        const int32_t tok = ctx[static_cast<size_t>(k)];
        const int32_t child = t.find_child(node, tok);
        if (child >= 0) {
          node = child;
        } else {
          node = t.add(tok, node);
          added = true;
        }
      }
      branches += added ? 1 : 0;
    }
  }
  return t;
}

}  // namespace treespec::drafters
